"""Execute one run here: its graph run with its events relayed (`runs.live.EventWriter`), and its end stored
(completed, failed or cancelled), or the run handed over to another worker, or parked to wait for a person."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from parley.core.limits import MAX_RUN_CRASHES
from parley.core.metrics import record_fenced_write, record_run
from parley.core.settings import Settings
from parley.core.telemetry import trace_config
from parley.llm.budget import Budget, BudgetExceeded, BudgetLimits
from parley.llm.endpoints import QUEUE_WATCH
from parley.llm.usage import UsageLedger, UsageRecord, usage_view
from parley.nodes.events import EVENT_SINK, TaskEvent, report_queued
from parley.nodes.inbox import Steering
from parley.runs import resume
from parley.runs.announce import announce, announcing
from parley.runs.checkpoints import RunLease
from parley.runs.survival import EventBarrier
from parley.runs.following import Following
from parley.runs.held import HeldRuns
from parley.runs.inputs import Inputs
from parley.runs.live import EventWriter, LiveRun
from parley.runs.modes.base import Emit, ModeRun, Outcome, RunFailure, Services
from parley.runs.stops import StopGuard, Stops
from parley.store import runs as store

log = logging.getLogger("parley.runs")


@dataclass
class RunLedger(UsageLedger):
    """A run's usage ledger that hands each call's usage to `sink` as it is made, to be stored at once."""

    sink: Callable[[UsageRecord], None] = field(default=lambda record: None, repr=False)

    def add(self, record: UsageRecord) -> None:
        super().add(record)
        self.sink(record)


def over_budget(exc: BaseException) -> RunFailure | None:
    """The failure to report for a run that failed because its budget refused a model call it could not do without
    (a turn, not a structured answer, which has its fallback): 402 `budget_exceeded`, with the figures."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, BudgetExceeded):
            return RunFailure(str(current), status=402, code="budget_exceeded", budget=current.figures)
        current = current.__cause__ or current.__context__
    return None


class Executions:
    """Start executing runs in this worker (`launch`), each in a task of its own, and see each to its end.

    Args:
        db: Parley's database.
        saver: the LangGraph checkpointer runs save to.
        settings: deadline and checkpoint durability (`PARLEY_RUN_*`).
        modes: each kind of run → the mode that drives it.
        services: what modes are given (database, model factory, settings, billing).
        worker: this worker's name in run records.
        held: where each execution's task is registered (for the lease thread, stops and take-overs).
        stops: why each run here stops (cancels, deadlines, failures, hand-overs).
        inputs: the inputs delivered to each run here, and where a run parks.
        following: where this worker's listeners find each execution here, and the records of runs ended here.
        leases_hold: awaited before each model call of a run (`RunEngine.leases_hold`), given its id.
    """

    def __init__(self, db: AsyncDatabase, *, saver: BaseCheckpointSaver, settings: Settings,
                 modes: Mapping[str, type[ModeRun]], services: Services, worker: str, held: HeldRuns, stops: Stops,
                 inputs: Inputs, following: Following,
                 leases_hold: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.db, self.saver, self.settings, self.modes, self.services = db, saver, settings, modes, services
        self.worker, self.held, self.stops, self.inputs, self.following = worker, held, stops, inputs, following
        self.leases_hold = leases_hold

    def launch(self, record: dict) -> None:
        """Execute the run `record` here, in a task of its own, from its start or from where it got to."""
        run_id = record["_id"]
        live = None
        if record.get("claims", 1) <= 1:
            # Registered before the task starts, so that a listener on this worker (the route that just
            # submitted the run) follows it from memory at once instead of polling the database.
            live = LiveRun(run_id, first_seq=self.modes[record["kind"]].first_seq)
            self.following.show(live)
        task = asyncio.create_task(self._execute(record, live), name=f"run {run_id}")
        self.held.add(run_id, task, record.get("leaseUntil"))

        def forget(_: asyncio.Task) -> None:
            if live is not None and self.following.live_run(run_id) is live:  # a task cancelled before it started
                live.end()
                self.following.hide(run_id)
            self.held.discard(run_id, task)
            self.stops.forget(run_id)

        task.add_done_callback(forget)

    async def _execute(self, record: dict, live: LiveRun | None) -> None:
        """Execute a run here, from its start or from its last checkpoint, and store how it ends."""
        run_id = record["_id"]
        resumed = record.get("claims", 1) > 1  # another worker began it
        deadline = self._deadline(record)
        barriers: dict[str, EventBarrier] | None = getattr(self.saver, "barriers", None)
        leases: dict[str, RunLease] | None = getattr(self.saver, "leases", None)
        lease = store.lease_of(record)
        try:
            mode: ModeRun = self.modes[record["kind"]](record, self.services)
            if leases is not None:  # its checkpoints are saved with its lease, and refused once it is taken
                leases[run_id] = RunLease(lease, lambda: self._lost(run_id, lease, "checkpoint"))
            if live is None:  # a run another execution began (a new run's is registered by `launch`)
                live = LiveRun(run_id, first_seq=await resume.first_seq(self.db, record, mode, saver=self.saver))
                self.following.show(live)
            barrier = EventBarrier()
            if barriers is not None:
                barriers[run_id] = barrier
            writer = EventWriter(self.db, live, barrier, write_after=mode.store_every, lease=lease,
                                 on_failure=lambda: self.stops.stop(run_id, "storage"),
                                 on_lost=lambda what: self._lost(run_id, lease, what),
                                 on_too_large=lambda exc: self.stops.fail(run_id, RunFailure(
                                     f"The run was stopped: an event too large to store ({exc})", status=500,
                                     code="event_too_large")))
            earlier = [UsageRecord(**row) for row in await store.list_usage(self.db, run_id=run_id)] if resumed else []
            ledger = RunLedger(records=earlier, sink=writer.add_usage)
            steering = await self.inputs.steering_for(record, mode)
            budget = self._budget(record, ledger)
            outcome = await self._outcome(record, mode, writer, ledger, steering, budget)
            if outcome is not None:
                await self._conclude(record, outcome, writer, ledger, budget)
        except PyMongoError as exc:  # before the graph ran, or while its end was decided
            log.error("run %s: storage failed (%s); it will be resumed once its lease expires", run_id, exc)
            if live is not None:
                live.storage_failed = True
        finally:
            deadline.cancel()
            if live is not None:
                live.end()
            self.following.hide(run_id)
            self.inputs.forget(run_id)
            if barriers is not None:
                barriers.pop(run_id, None)
            if leases is not None:
                leases.pop(run_id, None)
            if hasattr(self.saver, "forget"):  # what the checkpointer keeps in memory of the run
                self.saver.forget(run_id)

    def _lost(self, run_id: str, lease: int | None, what: str) -> None:
        """A write of this execution was refused (`what`: events, usage, checkpoint): another worker took the run
        over. It stops at once, its model calls with it (`Stops`), writing nothing more."""
        log.warning("run %s: its %s write was refused: another worker took the run over from this execution (lease "
                    "%s); it stops here", run_id, what, lease)
        record_fenced_write(what)
        self.stops.stop(run_id, "lost")

    def _deadline(self, record: dict) -> asyncio.TimerHandle:
        """Stop the run once it has been active for `PARLEY_RUN_DEADLINE` seconds since it was created (a resumed
        run keeps the deadline it had; time spent waiting for a person does not count)."""
        left = max(0.0, self.settings.parley_run_deadline - store.active_seconds(record))
        return asyncio.get_running_loop().call_later(left, self.stops.stop, record["_id"], "deadline")

    def _budget(self, record: dict, ledger: UsageLedger) -> Budget | None:
        """The run's budget (`input.steer.budget`), its clock counting the run's active seconds (None: no limits)."""
        limits = BudgetLimits.parse((record["input"].get("steer") or {}).get("budget"))
        if not limits:
            return None
        before, started = store.active_seconds(record), time.monotonic()
        return Budget(limits, ledger, clock=lambda: before + time.monotonic() - started)

    def _sink(self, run_id: str, mode: ModeRun, writer: EventWriter) -> Callable[[TaskEvent], None]:
        """Where the run's nodes send their events: translated and queued at once, in the order they are sent
        (nested graphs' too), before the task that sent them can have its results saved."""

        def take(event: TaskEvent) -> None:
            if self.stops.told(run_id):
                self.stops.still_running(run_id)
            writer.barrier.received_one()
            try:
                origin = event.origin if mode.checkpointed else None  # what a resume from a checkpoint reads
                for emit in mode.translate("custom", event):
                    writer.add(emit, origin)
            except Exception as exc:  # the mode refuses to go on (a panel answer cut off mid-stream, say)
                self.stops.fail(run_id, exc)
            writer.received()

        return take

    async def _outcome(self, record: dict, mode: ModeRun, writer: EventWriter, ledger: RunLedger,
                       steering: Steering | None = None, budget: Budget | None = None) -> Outcome | None:
        """Run the graph, relaying its events; return how the run ended (None: it goes on elsewhere, or waits for
        a person)."""
        run_id, kind = record["_id"], record["kind"]
        graph = mode.graph(self.saver if mode.checkpointed else None)
        hold = None if self.leases_hold is None else (lambda: self.leases_hold(run_id))
        config = {"configurable": {"thread_id": run_id},
                  **trace_config(run_id, kind, record["workspace"], record["user"]),
                  "callbacks": [StopGuard(self.stops, run_id, hold=hold)]}
        context = mode.knobs(mode.context(ledger))
        context.steering, context.budget = steering, budget
        try:
            await mode.prepare()
            went_on, graph_input = await resume.restore(self.db, self.saver, record, mode=mode, graph=graph,
                                                        config=config, writer=writer, steering=steering,
                                                        worker=self.worker, lease=store.lease_of(record))
            if record.get("cancelRequested"):
                self.stops.mark(run_id, "cancel")
                raise asyncio.CancelledError
            if record.get("crashes", 0) > MAX_RUN_CRASHES:  # its workers stopped while executing it, in a row
                log.error("run %s (%s): its worker stopped %d times in a row while executing it; it is failed, not "
                          "resumed again", run_id, kind, record["crashes"])
                return await self._failed(record, mode, ledger, RunFailure(
                    f"The workers executing this run stopped {record['crashes']} times in a row while executing it; "
                    "it is not resumed again, in case it is what stops them", status=500, code="run_crashed"))
            if not went_on:
                for emit in mode.opening():
                    writer.add(emit)
            state: dict[str, Any] = {}
            # Custom events come through the sink (as they are sent); the stream gives the other modes.
            modes = [m for m in mode.stream_mode if m != "custom"] + ["values"]
            sink = EVENT_SINK.set(self._sink(run_id, mode, writer))
            watch = QUEUE_WATCH.set(report_queued)  # a call waiting for its endpoint is a `queued` event of the run
            try:
                parts = graph.astream(
                    graph_input, config, context=context,
                    stream_mode=modes,
                    **({"durability": self.settings.parley_run_durability} if mode.checkpointed else {}),
                )
                async with contextlib.aclosing(parts):  # its tasks stop with it, however the loop is left
                    async for part_mode, part in parts:
                        writer.check()
                        if self.stops.told(run_id):  # told to stop, and the cancellation was lost on its way
                            raise asyncio.CancelledError
                        if part_mode == "values":
                            state = part
                            if "values" not in mode.stream_mode:
                                continue
                        for emit in mode.translate(part_mode, part):
                            writer.add(emit)
            finally:
                QUEUE_WATCH.reset(watch)
                EVENT_SINK.reset(sink)
            if self.stops.told(run_id):
                raise asyncio.CancelledError
            if state.get("__interrupt__"):  # stopped at a boundary of its graph to wait for a person
                if not await self.inputs.park(record, mode, writer, state):
                    await self._hand_over(record, writer, "lost")
                return None
            return await self._end(record, mode, ledger, lambda: self._completed(mode, state, ledger, writer),
                                   "completed")
        except asyncio.CancelledError:
            return await self._stopped(record, mode, writer, ledger)
        except store.Fenced:  # another worker took the run over: this execution writes nothing more
            await self._hand_over(record, writer, "lost")
            return None
        except PyMongoError as exc:
            # The database cannot take the run's writes: leave the run to be resumed when it can.
            log.error("run %s: storage failed (%s); it will be resumed once its lease expires", run_id, exc)
            writer.abandon()
            writer.live.storage_failed = True
            return None
        except Exception as exc:  # the top of a run: the mode records the failure and tells the listeners
            if self.stops.told(run_id):  # a node turned the stop into a failure (StopGuard's, say)
                return await self._stopped(record, mode, writer, ledger)
            log.warning("run %s (%s) failed: %s", run_id, kind, exc, exc_info=True)
            return await self._failed(record, mode, ledger, over_budget(exc) or exc)

    async def _completed(self, mode: ModeRun, state: dict[str, Any], ledger: RunLedger,
                         writer: EventWriter) -> Outcome:
        """The outcome of a run whose graph finished: its mode's, unless one of its events (its closing ones included)
        is too large to store; then the run fails (`event_too_large`, through `_end`), so that a run stored
        `completed` has every event stored whole, its `done` with its data."""
        outcome = await mode.completed(state, ledger)
        if (too_large := writer.unstorable(outcome.events)) is not None:
            raise RunFailure(f"The run was stopped: an event too large to store ({too_large})", status=500,
                             code="event_too_large")
        return outcome

    async def _stopped(self, record: dict, mode: ModeRun, writer: EventWriter, ledger: RunLedger) -> Outcome | None:
        """How a run told to stop ends: cancelled, failed (its mode refused to go on, or past its deadline), or
        not at all here (handed over to another worker, or left until storage is back)."""
        run_id = record["_id"]
        reason = self.stops.reason(run_id) or "shutdown"
        if reason == "failed":
            return await self._failed(record, mode, ledger, self.stops.failure(run_id))
        if reason == "deadline":
            seconds = self.settings.parley_run_deadline
            log.warning("run %s (%s) stopped: past its deadline of %s s", run_id, record["kind"], seconds)
            return await self._failed(record, mode, ledger, RunFailure(
                f"The run took longer than its deadline of {seconds:g} s (PARLEY_RUN_DEADLINE) and was stopped",
                status=504, code="run_deadline"))
        if reason == "storage":
            log.error("run %s: storage failed (%s); it will be resumed once its lease expires", run_id,
                      writer.failure)
            writer.live.storage_failed = True
            return None
        if reason != "cancel":
            await self._hand_over(record, writer, reason)
            return None
        self.stops.close(run_id)
        return await mode.cancelled(ledger)

    async def _failed(self, record: dict, mode: ModeRun, ledger: RunLedger, exc: Exception) -> Outcome | None:
        async def failure() -> Outcome:
            try:
                return await mode.failed(exc, ledger)
            except PyMongoError:
                raise
            except Exception:
                log.exception("run %s: the failure could not be recorded", record["_id"])
                return Outcome("failed", [Emit("error", {"message": "internal error"})],
                               error={"message": "internal error", "status": 500})

        return await self._end(record, mode, ledger, failure, "failed")

    async def _end(self, record: dict, mode: ModeRun, ledger: RunLedger, store_end: Callable[[], Awaitable[Outcome]],
                   status: str) -> Outcome | None:
        """Claim the run's end as `status`, then let the mode store it (`store_end`). A cancel recorded before
        the claim wins: the run ends cancelled, whatever its graph did after the request."""
        run_id = record["_id"]
        self.stops.close(run_id)
        lease = store.lease_of(record)
        claimed = await store.conclude(self.db, run_id=run_id, worker=self.worker, lease=lease, status=status)
        if claimed is None or claimed.get("worker") != self.worker or claimed.get("lease") != lease or \
                claimed["status"] in store.FINISHED:
            log.warning("run %s: another worker holds it now", run_id)
            return None
        if claimed.get("concluding") != status:  # cancelled before it could end
            return await mode.cancelled(ledger)
        try:
            return await store_end()
        except PyMongoError:
            raise
        except Exception as exc:
            if status == "failed":
                raise
            log.warning("run %s (%s) failed: %s", run_id, record["kind"], exc, exc_info=True)
            return await self._failed(record, mode, ledger, exc)

    async def _hand_over(self, record: dict, writer: EventWriter, reason: str) -> None:
        """Stop executing a run here without ending it: lost to another worker, or this worker shutting down."""
        run_id = record["_id"]
        if reason == "shutdown":
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.close(), timeout=2)
            with contextlib.suppress(PyMongoError):
                await store.release(self.db, run_id=run_id, worker=self.worker, lease=store.lease_of(record))
            log.info("run %s released for another worker to resume", run_id)
        else:
            writer.abandon()
            log.warning("run %s: lease lost; another worker has it now", run_id)

    async def _conclude(self, record: dict, outcome: Outcome, writer: EventWriter, ledger: UsageLedger,
                        budget: Budget | None = None) -> None:
        """Store the closing events and the run's end (with why it stopped early, and its budget's figures). The
        record says how the run ended before any listener here sees its last event (listeners elsewhere check
        it, see `Following.follow`)."""
        run_id = record["_id"]
        try:
            rows = await writer.close(outcome.events)
            ending = store.end_fields(status=outcome.status, result=outcome.result, error=outcome.error,
                                      usage=usage_view(ledger), stopped_by=outcome.stopped_by,
                                      budget=budget.figures() if budget is not None else None)
            # Its webhooks' deliveries are stored first: a worker that dies between the two writes leaves the run
            # to be resumed, and announced again under the same ids, by another.
            if announcing(self.settings):
                await announce(self.db, {**record, **ending}, outcome.status, lease=store.lease_of(record))
            finished = await store.finish(self.db, run_id=run_id, worker=self.worker, lease=store.lease_of(record),
                                          status=outcome.status,
                                          result=outcome.result, error=outcome.error, usage=ending["usage"],
                                          stopped_by=outcome.stopped_by, budget=ending.get("budget"),
                                          at=ending["finishedAt"])
            if finished is not None:  # before any listener here sees the last event: `wait` reads it
                self.following.ended({**record, **finished})
            record_run(record["kind"], outcome.status)
            writer.live.publish(rows)
        except (PyMongoError, store.Fenced) as exc:
            log.error("run %s: its end could not be stored (%s)", run_id, exc)
            writer.live.storage_failed = isinstance(exc, PyMongoError)
            return
        if self.modes[record["kind"]].checkpointed and not self.settings.parley_run_keep_checkpoints:
            try:
                await self.saver.adelete_thread(run_id)
            except PyMongoError as exc:
                log.warning("run %s: checkpoints not deleted (%s)", run_id, exc)
