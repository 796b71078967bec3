"""Which of a run's events survive a crash, and the barrier that makes sure none of a finished task's is lost.

A resumed run does not re-run the tasks whose results LangGraph saved; it runs the others again, and
they send their events again. `survives` tells the two apart from an event's origin (the task that sent
it, and the checkpoint that task started from, at every level of nested graphs) and what was saved.
`EventBarrier` makes LangGraph save a task's results (its writes, and the checkpoint that holds them) only
after its events are stored, so that no event of a finished task is ever lost with a worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from parley.nodes.events import Origin
from parley.runs.events import Signal

if TYPE_CHECKING:
    from parley.runs.checkpoints import RunSaver

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


@dataclass
class SavedGraph:
    """What was saved of one graph of a run (the run's own, or one nested in a task): its checkpoints, the
    latest of them, and the tasks whose results were saved against it."""

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


async def saved_graphs(saver: RunSaver, thread_id: str, graph_namespaces: Iterable[str]) -> dict[str, SavedGraph]:
    """What `saver` holds of each of the thread's graphs in `graph_namespaces`."""
    return await saver.asaved(thread_id, graph_namespaces)


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
