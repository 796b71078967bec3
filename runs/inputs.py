"""A person's inputs to runs, and the runs that wait for a person: an input stored and delivered to the run's
execution (at once here, within a heartbeat elsewhere), a run parked at a boundary of its graph, woken to go on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from parley.nodes.inbox import RELEASES, Steering
from parley.runs.announce import announce
from parley.runs.following import RunNotFound
from parley.runs.held import HeldRuns
from parley.runs.live import EventWriter
from parley.runs.modes.base import Emit, ModeRun
from parley.runs.stops import Stops
from parley.store import inputs as input_store
from parley.store import runs as store

log = logging.getLogger("parley.runs")


class Inputs:
    """The inputs delivered to each run this worker executes, and the runs it parks and wakes.

    Args:
        db: Parley's database.
        saver: the LangGraph checkpointer (a parked run's checkpoints are kept while it waits).
        worker: this worker's name in run records.
        lease: the seconds of a lease (a woken run's).
        held: the runs this worker executes (a run's last execution here is awaited before it is woken).
        stops: why each run here stops (a run parking is told apart from one cancelled meanwhile).
        launch: start executing a run here (a woken one), given its record.
        announcing: whether a run's wait is announced to webhooks (`runs.announce.announcing`).
    """

    def __init__(self, db: AsyncDatabase, *, saver: BaseCheckpointSaver, worker: str, lease: float, held: HeldRuns,
                 stops: Stops, launch: Callable[[dict], None], announcing: bool) -> None:
        self.db, self.saver, self.worker, self.lease, self.announcing = db, saver, worker, lease, announcing
        self.held, self.stops, self.launch = held, stops, launch
        self._steering: dict[str, Steering] = {}  # run id → the inputs delivered to its execution here
        self._fetching: dict[str, asyncio.Task] = {}  # run id → a fetch of its inputs under way
        self._refetch: set[str] = set()  # runs whose inputs are to be read again once the fetch under way ends
        self._waking: set[asyncio.Task] = set()  # wakes asked for by executions as they parked

    # --- delivering ---------------------------------------------------------------------------

    async def steering_for(self, record: dict, mode: ModeRun) -> Steering | None:
        """The run's steering (None for a mode no one steers): where it waits by itself (`input.steer.await`) and
        the inputs stored for it so far (read only when some were sent, `store.runs.note_input`)."""
        if not mode.steers(record):
            return None
        steering = Steering(await_at=(record["input"].get("steer") or {}).get("await"))
        if record.get("inputs"):
            steering.deliver(await input_store.list_inputs(self.db, run_id=record["_id"]))
        self._steering[record["_id"]] = steering
        return steering

    def behind(self, run_id: str, sent: int) -> bool:
        """Whether the run's execution here was delivered fewer inputs than the `sent` its record counts."""
        return (steering := self._steering.get(run_id)) is not None and sent > len(steering.inbox)

    def fetch(self, run_id: str) -> None:
        """Read the run's inputs again (some were stored on another worker) and deliver what is new; a fetch asked
        for while one is under way is made once that one ends."""
        if (current := self._fetching.get(run_id)) is not None and not current.done():
            self._refetch.add(run_id)
            return

        async def fetch() -> None:
            while True:
                self._refetch.discard(run_id)
                try:
                    rows = await input_store.list_inputs(self.db, run_id=run_id)
                except PyMongoError as exc:
                    log.warning("run %s: its inputs could not be read (%s); read again at the next renewal", run_id,
                                exc)
                    return
                if (steering := self._steering.get(run_id)) is not None:
                    steering.deliver(rows)
                if run_id not in self._refetch:
                    return

        self._fetching[run_id] = asyncio.create_task(fetch(), name=f"inputs of {run_id}")

    def forget(self, run_id: str) -> None:
        """The run's execution here has ended: deliver it nothing more."""
        self._steering.pop(run_id, None)
        if (fetching := self._fetching.pop(run_id, None)) is not None:
            fetching.cancel()

    async def steer(self, run_id: str, *, user: str, content: str | None = None,
                    action: str | None = None) -> tuple[dict, dict] | None:
        """Store and count an input a person sent a run (a message, an action, or both), then deliver it: at once to
        the run's execution when this worker executes it, within a heartbeat from any other (its lease renewal reads
        the count of inputs, `store.runs.note_input`); a waiting run that it lets go on (`continue`, `guide`,
        `end`) is woken and executed here. Return the input as delivered and the run's record as it now is; None
        when the run had ended (or was being cancelled): the input is not kept.

        Raises:
            store.TooManyInputs: the run was sent `MAX_RUN_INPUTS` inputs already and this one counts against them
                (a message, or a control repeated within a lap: `store.runs.counts_against_cap`); it is not kept.
        """
        # Stored, then counted: a run that parks meanwhile finds the input (`park` reads them) or is seen waiting
        # here. One refused by the count is taken back (callers check the count first: `store.runs.inputs_full`).
        given = await input_store.add_input(self.db, run_id=run_id, user=user, content=content, action=action)
        try:
            record = await store.note_input(self.db, run_id=run_id, action=action)
        except store.TooManyInputs:
            await input_store.remove_input(self.db, input_id=given["id"])
            raise
        if record is None:
            await input_store.remove_input(self.db, input_id=given["id"])
            return None
        if (steering := self._steering.get(run_id)) is not None:
            steering.deliver([given])
        if record["status"] == store.WAITING and action in RELEASES:
            record = await self.wake(run_id) or await store.get_run(self.db, run_id=run_id)
            if record is None:
                raise RunNotFound(run_id)
        return given, record

    # --- waiting ------------------------------------------------------------------------------

    async def park(self, record: dict, mode: ModeRun, writer: EventWriter, state: dict[str, Any]) -> bool:
        """Store that the run waits for a person at a boundary of its graph (`store.runs.park`: no lease held, no
        worker executing it; its webhooks' deliveries stored just before, `runs.announce`), then its `waiting`
        event; keep its checkpoints for as long as it waits. An input that lets it go on, stored while it was
        parking, wakes it at once (see `steer`). Return False when another worker holds the run now (this execution
        is to hand it over).

        Raises:
            asyncio.CancelledError: a cancel was asked first: the run ends cancelled instead.
        """
        run_id = record["_id"]
        where = dict(state["__interrupt__"][0].value or {})
        self.stops.close(run_id)  # nothing stops this execution now: it is storing how it stops
        wait = store.next_wait(record)
        # Announced before it is stored, as a run's end is (see `runs.announce`).
        if self.announcing:
            await announce(self.db, {**record, "waiting": where}, store.WAITING, wait=wait, lease=store.lease_of(record))
        if not await store.park(self.db, run_id=run_id, worker=self.worker, lease=store.lease_of(record),
                                waiting=where, wait=wait):
            self.stops.reopen(run_id)
            current = await store.get_run(self.db, run_id=run_id) or {}
            if current.get("lease") == store.lease_of(record) and current.get("cancelRequested"):
                self.stops.mark(run_id, "cancel")
                raise asyncio.CancelledError
            return False
        log.info("run %s (%s) waits for a person (%s)", run_id, record["kind"], where)
        try:
            writer.live.publish(await writer.close([Emit("waiting", where)]))
        except (PyMongoError, store.Fenced) as exc:  # woken and fenced elsewhere already, or storage down
            log.warning("run %s: its waiting event was not stored (%s)", run_id, exc)
        with contextlib.suppress(PyMongoError):
            if mode.checkpointed and hasattr(self.saver, "akeep"):
                await self.saver.akeep(run_id)
            consumed = set(state.get("consumed") or [])
            answered = [row for row in await input_store.list_inputs(self.db, run_id=run_id)
                        if row["id"] not in consumed and row.get("action") in RELEASES]
            if answered:  # once this execution has ended (`wake` waits for it)
                waking = asyncio.create_task(self.wake(run_id), name=f"wake {run_id}")
                self._waking.add(waking)
                waking.add_done_callback(self._waking.discard)
        return True

    async def wake(self, run_id: str) -> dict | None:
        """Take a waiting run (`store.runs.wake`) and execute it here, from where it waited; None when it was not
        waiting (another worker woke it, or it ended)."""
        record = await store.wake(self.db, run_id=run_id, worker=self.worker, lease_seconds=self.lease)
        if record is None:
            return None
        record["woken"] = True  # every event of its last execution was stored: nothing to retract or skip
        if (parking := self.held.task(run_id)) is not None:  # its last execution here is still storing its wait
            await asyncio.wait([parking])
        self.launch(record)
        return record
