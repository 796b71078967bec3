"""Resume a run another execution began (a worker that died, or one that parked it to wait for a person): fence
its stored events, retract those of the tasks that run again, and say where its graph starts.

A worker whose leases expired is gone for the run: another worker claims it and resumes it from its last checkpoint
(finished tasks are not run again; the events of unfinished ones are retracted and sent again, see `runs.events`).
"""

from __future__ import annotations

import logging
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command
from pymongo.asynchronous.database import AsyncDatabase

from parley.nodes.inbox import RELEASES, Steering
from parley.runs.survival import namespaces, saved_graphs, survives
from parley.runs.events import RETRACT
from parley.runs.live import EventWriter, origin_of
from parley.runs.modes.base import Emit, ModeRun
from parley.store import runs as store

log = logging.getLogger("parley.runs")

RESUMED_REASON = "the worker running this turn stopped; it is streamed again from its start"


async def fence(db: AsyncDatabase, record: dict, mode: ModeRun, *, saver: BaseCheckpointSaver | None = None) -> int:
    """Keep every earlier execution of a run another execution began (one whose worker may still be going, cut off
    from the database) from writing anything more of it: a fence page of events (`store.runs.fence_events`), its
    usage rows (`store.runs.fence_usage`) and, before they are read, its checkpoints (`RunSaver.afence`) are
    refused to a lease older than this execution's. Return the number of the last event stored (-1: none)."""
    run_id, lease = record["_id"], store.lease_of(record)
    if lease is not None:
        await store.fence_usage(db, run_id=run_id, lease=lease)
        if mode.checkpointed and hasattr(saver, "afence"):
            await saver.afence(run_id, lease)
    return await store.fence_events(db, run_id=run_id)


async def first_seq(db: AsyncDatabase, record: dict, mode: ModeRun, *, saver: BaseCheckpointSaver | None = None
                    ) -> int:
    """The number of this execution's first event. For a run another execution began, past a fence (`fence`: no
    write of that execution, still going somewhere, is stored after this one's) and past the numbers it may have
    shown without storing them (see `EventWriter`); a run woken from a wait had stored every event it showed."""
    resumed = record.get("claims", 1) > 1
    stored = await fence(db, record, mode, saver=saver) if resumed else -1
    gap = (1 if record.get("woken") else EventWriter.SHOWN_UNSTORED) if resumed else 0
    return max(mode.first_seq, stored + 1 + gap)


async def restore(db: AsyncDatabase, saver: BaseCheckpointSaver, record: dict, *, mode: ModeRun, graph: Any,
                  config: dict, writer: EventWriter, steering: Steering | None, worker: str,
                  lease: int | None = None) -> tuple[bool, Any]:
    """Where the run's graph starts. For a run another execution began: void the events of the tasks that
    will run again (announcing them in a `retract`) and bring the mode's records in line.

    Returns whether the run goes on from what an earlier execution did (its opening events stand), and the
    graph's input: None to go on from its last checkpoint (a `checkpointed` mode), `Command(resume=input)` when
    that checkpoint waits for a person (`input`: the last one that lets it go on), else the input it starts
    with (from its beginning, or where the mode's own records say it had got to, see `ModeRun.restart`).
    """
    if record.get("claims", 1) <= 1:
        return False, mode.graph_input()
    await store.mark_running(db, run_id=record["_id"], worker=worker, lease=lease)
    rows = await store.all_events(db, run_id=record["_id"])
    live_rows = [row for row in rows if not row.get("void") and row["event"] != RETRACT]
    # Ids an earlier execution may have shown but not stored: events of tasks that had not finished.
    unstored = [] if record.get("woken") else list(range((rows[-1]["seq"] if rows else -1) + 1, writer.next_seq))
    graph_input: dict[str, Any] | None = mode.graph_input()
    standing: set[int] = set()  # the events that stand (all others are void)
    went_on = False
    if mode.checkpointed:
        snapshot = await graph.aget_state(config)
        if snapshot.values or snapshot.next:
            origins = {o for o in (origin_of(row) for row in live_rows) if o is not None}
            saved = await saved_graphs(saver, record["_id"], namespaces(origins))
            standing = {row["seq"] for row in live_rows if survives(origin_of(row), saved)}
            graph_input, went_on = None, True
            if snapshot.interrupts:  # it waited for a person: what let it go on is its answer
                answers = [row for row in (steering.inbox if steering else []) if row.get("action") in RELEASES]
                graph_input = Command(resume=answers[-1] if answers else {})
            await mode.resumed(dict(snapshot.values))
    elif (restart := await mode.restart(live_rows)) is not None:
        graph_input, standing = restart
        went_on = True
    void = [row["seq"] for row in live_rows if row["seq"] not in standing]
    if void:
        await store.mark_void(db, run_id=record["_id"], seqs=void)
    if void or unstored:
        writer.add(Emit(RETRACT, {"seqs": void + unstored, "reason": RESUMED_REASON}))
    if record.get("woken"):
        log.info("run %s (%s) goes on on %s after its wait", record["_id"], record["kind"], worker)
    else:
        log.warning("run %s (%s) taken over by %s: %s, %d event(s) retracted", record["_id"], record["kind"],
                    worker, "going on from where it was" if went_on else "starting over", len(void))
    return went_on, graph_input
