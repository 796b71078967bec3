"""LangGraph checkpoints of runs (thread id = run id): what was saved, and which of a run's events survive a crash.

A resumed run does not re-run the tasks whose results LangGraph saved; it runs the others again, and
they send their events again. `survives` tells the two apart from an event's origin (the task that sent
it, and the checkpoint that task started from, at every level of nested graphs) and what was saved.
`EventBarrier` makes LangGraph save a task's results only after its events are stored, so that no event
of a finished task is ever lost with a worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.mongodb import MongoDBSaver
from pymongo import MongoClient

from nodes.events import Origin
from runs.events import Signal
from store.monitor import LISTENER

NS_SEP = "|"


class EventBarrier:
    """Holds back LangGraph's saving of a task's results until every event sent before them is stored.

    A run's events reach the engine the moment a node sends them (`nodes.events.EVENT_SINK`), and a task's
    results are saved after it returns: waiting for the events received so far covers all of the task's,
    so a task whose results were saved never has an event that was lost with its worker.
    """

    def __init__(self) -> None:
        self.received = self.stored = 0
        self.open = False  # nothing more will be stored: waiting would be forever
        self.waiting = 0  # saves waiting now
        self.on_wait: Callable[[], None] = lambda: None  # told when a save starts waiting (to store at once)
        self._changed = Signal()

    def received_one(self) -> None:
        self.received += 1

    def stored_upto(self, count: int) -> None:
        self.stored = max(self.stored, count)
        self._changed.notify()

    def release(self) -> None:
        self.open = True
        self._changed.notify()

    async def wait(self) -> None:
        target = self.received
        if self.stored >= target or self.open:
            return
        self.waiting += 1
        self.on_wait()
        try:
            while self.stored < target and not self.open:
                await self._changed.wait()
        finally:
            self.waiting -= 1


class BarrierSaver(MongoDBSaver):
    """LangGraph's MongoDB checkpointer, saving a run's task results only after the events sent before them
    (each run that registers an `EventBarrier` under its thread id)."""

    def __init__(self, client: MongoClient, db_name: str) -> None:
        super().__init__(client, db_name=db_name)
        self.barriers: dict[str, EventBarrier] = {}

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        barrier = self.barriers.get(config.get("configurable", {}).get("thread_id"))
        if barrier is not None:
            await barrier.wait()
        await super().aput_writes(config, writes, task_id, task_path)


def mongodb_saver(uri: str, db_name: str) -> BarrierSaver:
    """LangGraph's MongoDB checkpointer on Parley's database (collections `checkpoints`, `checkpoint_writes`),
    its commands counted (`store.monitor`)."""
    return BarrierSaver(MongoClient(uri, tz_aware=True, event_listeners=[LISTENER]), db_name)


@dataclass
class SavedGraph:
    """What was saved of one graph of a run (the run's own, or one nested in a task): its checkpoints, the
    latest of them, and the tasks whose results were saved against each."""

    ids: set[str] = field(default_factory=set)
    latest: str | None = None
    written: dict[str, set[str]] = field(default_factory=dict)


def namespaces(origins: Iterable[Origin]) -> set[str]:
    """Every graph namespace the tasks behind `origins` ran in."""
    out = set()
    for origin in origins:
        segments = origin.task.split(NS_SEP)
        out.update(NS_SEP.join(segments[:depth]) for depth in range(len(segments)))
    return out


async def saved_graphs(
    saver: BaseCheckpointSaver, thread_id: str, graph_namespaces: Iterable[str]
) -> dict[str, SavedGraph]:
    """What `saver` holds of each of the thread's graphs in `graph_namespaces`."""
    saved: dict[str, SavedGraph] = {}
    for ns in graph_namespaces:
        graph = saved[ns] = SavedGraph()
        async for checkpoint in saver.alist({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}):
            checkpoint_id = checkpoint.config["configurable"]["checkpoint_id"]
            graph.ids.add(checkpoint_id)
            graph.latest = max(graph.latest or checkpoint_id, checkpoint_id)  # ids sort by creation time
            graph.written[checkpoint_id] = {task_id for task_id, _, _ in checkpoint.pending_writes or ()}
    return saved


def survives(origin: Origin | None, saved: dict[str, SavedGraph]) -> bool:
    """Whether an event sent by the task `origin` stands once the run resumes from what is `saved`.

    Walking from the outermost graph in: a task that started from a checkpoint that was never saved will
    run again under a new id (its events are void); one whose checkpoint has a saved successor finished its
    step, and so did one whose own result was saved (its events stand, nested ones included); any other will
    run again with the same id, and then what its nested graph saved decides for the events sent inside it.
    Events sent outside any task (`origin` None) always stand.
    """
    if origin is None:
        return True
    started_from = dict(origin.checkpoints)
    segments = origin.task.split(NS_SEP)
    for depth, segment in enumerate(segments):
        ns = NS_SEP.join(segments[:depth])
        graph, checkpoint_id = saved.get(ns), started_from.get(ns)
        if graph is None or checkpoint_id not in graph.ids:
            return False
        if checkpoint_id != graph.latest:
            return True
        if segment.rpartition(":")[2] in graph.written.get(checkpoint_id, set()):
            return True
    return False
