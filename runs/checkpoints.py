"""LangGraph checkpoints of runs (thread id = run id), and which of a run's events survive a crash.

A resumed run does not re-run the tasks whose results LangGraph saved; it runs the others again, and
they send their events again. `survives` tells the two apart from an event's origin (the task that sent
it, and the checkpoint that task started from, at every level of nested graphs) and what was saved.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.mongodb import MongoDBSaver
from pymongo import MongoClient

from nodes.events import Origin

NS_SEP = "|"


def mongodb_saver(uri: str, db_name: str) -> MongoDBSaver:
    """LangGraph's MongoDB checkpointer on Parley's database (collections `checkpoints`, `checkpoint_writes`)."""
    return MongoDBSaver(MongoClient(uri, tz_aware=True), db_name=db_name)


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


async def saved_graphs(saver: BaseCheckpointSaver, thread_id: str, graph_namespaces: Iterable[str]) -> dict[str, SavedGraph]:
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
