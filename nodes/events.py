"""Custom stream events sent from inside graph nodes, each marked with the graph task that sent it.

Nodes send events with `event_writer()` (or `emit()`) rather than LangGraph's bare `get_stream_writer()`.
Every consumer still sees plain dicts. A durable runner (`runs/`) also reads `TaskEvent.origin` to tell,
after a crash, which events came from tasks whose results were saved in a checkpoint and which came from
tasks that will run again; and it may take the events itself, the moment they are sent, by setting
`EVENT_SINK` around a run (so it can store a task's events before LangGraph saves the task's results).

A model call that waits in its endpoint's line (`llm.endpoints`) is told as a `queued` event of the task making it
(`report_queued`, which a runner sets as the run's `QUEUE_WATCH`), naming the speaker the task speaks for (`speaking`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from langgraph.config import get_config, get_stream_writer

from parley.llm.endpoints import Queued


@dataclass(frozen=True)
class Origin:
    """Which task sent an event.

    `task` is the task's checkpoint namespace: `node:task_id`, prefixed by the namespaces of the tasks
    it runs inside when its graph is nested (`outer:id|inner:id`). `checkpoints` maps the namespace of
    each enclosing graph (`""` for the outermost) to the id of the checkpoint its running task started
    from.
    """

    task: str
    checkpoints: tuple[tuple[str, str], ...]

    @property
    def outermost_node(self) -> str:
        """The node of the outermost graph whose task sent the event, or ran the graph that did."""
        return self.task.split("|", 1)[0].rpartition(":")[0]

    @property
    def nested(self) -> bool:
        return "|" in self.task


class TaskEvent(dict):
    """A custom stream event: a plain dict to whoever reads it, plus the `origin` of the task that sent it."""

    __slots__ = ("origin",)

    def __init__(self, data: Mapping[str, Any], origin: Origin | None) -> None:
        super().__init__(data)
        self.origin = origin


# Where the events of the run in this context go instead of LangGraph's custom stream: set by a runner
# that must have them synchronously, nested graphs' included (they inherit the context of their node).
EVENT_SINK: ContextVar[Callable[[TaskEvent], None] | None] = ContextVar("parley_event_sink", default=None)


def current_origin() -> Origin | None:
    """The origin of events sent by the running task (None outside a graph task)."""
    try:
        configurable = get_config().get("configurable", {})
    except RuntimeError:
        return None
    task = configurable.get("checkpoint_ns")
    if not task:
        return None
    checkpoints = configurable.get("checkpoint_map") or {}
    return Origin(task, tuple(sorted(checkpoints.items())))


def event_writer() -> Callable[[Mapping[str, Any]], None]:
    """A writer for the running task's custom stream events, each marked with the task's origin
    (an event relayed from a nested graph keeps the origin it already has)."""
    sink = EVENT_SINK.get()
    write = sink or get_stream_writer()
    origin = current_origin()
    return lambda event: write(TaskEvent(event, getattr(event, "origin", None) or origin))


def emit(event: Mapping[str, Any]) -> None:
    """Send one custom stream event from the running task."""
    event_writer()(event)


def relay(event: Mapping[str, Any], data: Mapping[str, Any]) -> TaskEvent:
    """`data` as an event with the origin of `event`: a graph re-sending a nested graph's events keeps
    each one's true origin, so a resumed run can still tell whose it was."""
    return TaskEvent(data, getattr(event, "origin", None))


# Who the model calls of the running task are made for (`speaking`), named in their `queued` events.
SPEAKER: ContextVar[Mapping[str, Any] | None] = ContextVar("parley_speaker", default=None)


@contextmanager
def speaking(speaker: Mapping[str, Any] | None) -> Iterator[None]:
    """Make the model calls inside the block `speaker`'s (`{"id", "name"}`): a call that waits for its endpoint
    names them in its `queued` event."""
    token = SPEAKER.set(speaker)
    try:
        yield
    finally:
        SPEAKER.reset(token)


def queued_event(queued: Queued) -> dict[str, Any]:
    """The `queued` event of a call waiting in its endpoint's line: `{"event": "queued", "model", "position"}`
    (`position` 1: it is sent next), with the `speaker` it is made for when there is one."""
    speaker = SPEAKER.get()
    return {"event": "queued", "model": queued.model, "position": queued.position,
            **({"speaker": {"id": speaker["id"], "name": speaker["name"]}} if speaker else {})}


def report_queued(queued: Queued) -> None:
    """Send the `queued` event of a call of the running task (`llm.endpoints.QUEUE_WATCH`, set by a runner); a call
    made outside a graph task is not reported."""
    try:
        write = event_writer()
    except RuntimeError:  # not inside a graph task: no run to tell
        return
    write(queued_event(queued))
