"""Custom stream events sent from inside graph nodes, each marked with the graph task that sent it.

Nodes send events with `event_writer()` (or `emit()`) rather than LangGraph's bare `get_stream_writer()`.
Every consumer still sees plain dicts. A durable runner (`runs/`) also reads `TaskEvent.origin` to tell,
after a crash, which events came from tasks whose results were saved in a checkpoint and which came from
tasks that will run again; and it may take the events itself, the moment they are sent, by setting
`EVENT_SINK` around a run (so it can store a task's events before LangGraph saves the task's results).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from langgraph.config import get_config, get_stream_writer


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
