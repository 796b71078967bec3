"""The run engine: a run of any mode starts, streams, is stored, resumes after a crash and stops the same way.

Any worker executes and any worker serves. A run is a record in `runs` leased to the worker executing
it, its numbered events in `run_events`, the usage of its model calls in `run_usage`, and its LangGraph
checkpoints (thread id = run id). The worker that starts a run executes it at once; a thread of its own
renews its leases every heartbeat (`LeaseKeeper`: a busy event loop does not delay it); when a worker dies
its leases expire and another worker claims each run and resumes it from its last checkpoint (finished
tasks are not run again; the events of unfinished ones are retracted and sent again, see `runs.events`).
Listeners follow a run from any worker: from memory on the worker executing it, by polling the database
elsewhere (backing off while nothing new comes). A cancel request stops the run's graph, and with it its
model calls, at once on the worker executing it and within a heartbeat from any other (the lease renewal
reads the requests); a run whose cancel was recorded ends `cancelled` (the end of a run is claimed before it
is stored, see `store.runs.conclude`). A run past its deadline (`PARLEY_RUN_DEADLINE`) is stopped and stored
`failed` (`run_deadline`). When the database fails, listeners' streams end with a `storage_unavailable`
error (docs/operations.md).

What a worker asks of the database on its own, whatever its runs do: every heartbeat while it executes runs,
one `update` and one `find` on `runs` (`store.runs.renew_leases`: the leases it holds, and the cancels asked
of them); nothing while it holds none. For take-overs (`RunEngine._take_over`) one indexed `find` of the
first lease to end among runs other workers hold, again when that lease would end (at most a lease later),
and a claim only when a holder is gone. A follower of a run executing elsewhere reads its events when a
change stream says a page of them was stored (`runs.wakeups.PageWatch`: one stream per worker, open while it has
such followers), and every heartbeat besides; where the database has no change streams (a standalone server, such
as the embedded database), it polls every `PARLEY_RUN_POLL` seconds, doubling up to the heartbeat while none comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from langchain_core.callbacks import AsyncCallbackHandler
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command
from pymongo import MongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConnectionFailure, PyMongoError

from parley.core.metrics import record_run
from parley.core.settings import Settings
from parley.core.telemetry import trace_config
from parley.llm.budget import Budget, BudgetExceeded, BudgetLimits
from parley.llm.factory import ModelFactory
from parley.llm.usage import UsageLedger, UsageRecord
from parley.nodes.events import EVENT_SINK, Origin, TaskEvent
from parley.nodes.inbox import RELEASES, Steering
from parley.runs.checkpoints import EventBarrier, namespaces, saved_graphs, survives
from parley.runs.events import RETRACT, TERMINAL, Event, Signal, listener_view, storage_failure
from parley.runs.modes.base import Emit, ModeRun, Outcome, RunFailure, Services, Settle
from parley.runs.wakeups import PageWatch
from parley.store import inputs as input_store
from parley.store import runs as store
from parley.store.monitor import LISTENER

log = logging.getLogger("parley.runs")

RESUMED_REASON = "the worker running this turn stopped; it is streamed again from its start"
# Why a run stops that is delivered again if the run goes on (see `RunEngine._still_running`).
REPEATED = ("cancel", "deadline", "failed", "storage")


@dataclass(frozen=True)
class Caller:
    """Who a run is for: the key's user and workspace."""

    user: str
    workspace: str


class RunNotFound(LookupError):
    """No such run (in this workspace)."""


@dataclass
class RunLedger(UsageLedger):
    """A run's usage ledger that hands each call's usage to `sink` as it is made, to be stored at once."""

    sink: Callable[[UsageRecord], None] = field(default=lambda record: None, repr=False)

    def add(self, record: UsageRecord) -> None:
        super().add(record)
        self.sink(record)


def usage_totals(ledger: UsageLedger) -> dict[str, Any]:
    return {"inputTokens": ledger.input_tokens, "outputTokens": ledger.total_tokens - ledger.input_tokens,
            "totalTokens": ledger.total_tokens, "costUsd": round(ledger.total_cost, 8), "calls": len(ledger.records)}


def origin_row(origin: Origin | None) -> dict | None:
    return None if origin is None else {"task": origin.task, "checkpoints": [list(p) for p in origin.checkpoints]}


def origin_of(row: dict) -> Origin | None:
    origin = row.get("origin")
    return None if origin is None else Origin(origin["task"], tuple(tuple(p) for p in origin["checkpoints"]))


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


class RunStopped(RuntimeError):
    """A model call refused because its run was told to stop (cancelled, past its deadline, ...)."""


class StopGuard(AsyncCallbackHandler):
    """Refuse to start a model call of a run that was told to stop.

    Stopping a run cancels its task; should that cancellation be lost on its way through the graph, a
    node could go on to its next model call. Every model call of a run inherits this callback, which
    raises `RunStopped` before the request is sent (and delivers the stop again).
    """

    raise_error = True  # LangChain re-raises what this handler raises, so the model call does not start
    # Awaited in place: otherwise langchain-core wraps every event it gets (each streamed token, each node's start and
    # end) in a task of its own.
    run_inline = True

    def __init__(self, engine: RunEngine, run_id: str) -> None:
        self.engine, self.run_id = engine, run_id

    def _check(self) -> None:
        if self.run_id in self.engine._stopping:
            self.engine._still_running(self.run_id)
            raise RunStopped(f"run {self.run_id} was told to stop")

    async def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        self._check()

    async def on_llm_start(self, *args: Any, **kwargs: Any) -> None:
        self._check()


# --- one execution ----------------------------------------------------------------------------


class LiveRun:
    """A run executing in this worker: the events this execution has stored so far, and their listeners."""

    def __init__(self, run_id: str, first_seq: int) -> None:
        self.id, self.first_seq = run_id, first_seq
        self.rows: list[dict] = []
        self.ended = False
        self.storage_failed = False  # the database failed: listeners are told (the run may go on, or stop)
        self._changed = Signal()

    def publish(self, rows: list[dict]) -> None:
        self.rows.extend(rows)
        self._changed.notify()

    def end(self) -> None:
        self.ended = True
        self._changed.notify()

    def storage_down(self, down: bool = True) -> None:
        """Note that the database is unreachable (its listeners' streams end, see `RunEngine.follow`), or back."""
        if down != self.storage_failed:
            self.storage_failed = down
            self._changed.notify()

    async def follow(self, after: int) -> AsyncIterator[list[Event]]:
        """Batches of the events after `after` (as `listener_view` shows them), until this execution ends."""
        index = max(0, after + 1 - self.first_seq)
        while True:
            if index < len(self.rows):
                rows, index = self.rows[index:], len(self.rows)
                shown = listener_view(rows, after=after)
                after = rows[-1]["seq"]
                if shown:
                    yield shown
                continue
            if self.ended or self.storage_failed:
                return
            await self._changed.wait()


async def _nothing() -> None:
    """The record change of a `durable` event: none (it is stored with its page)."""


class EventWriter:
    """Number one execution's events, show them to this worker's listeners, and store them in batches.

    An event is shown at once, unless it (or one before it) carries a change of the mode's records or is
    `durable`: then it is shown once that change and the events up to it are stored (a client that sees a duel's
    `message` can read it back). Events are stored in batches: every `write_after` seconds (the mode's `store_every`), at once when an
    event carries a record change or LangGraph waits to save a task's results (`EventBarrier`), and never more
    than `SHOWN_UNSTORED` events are shown before they are stored. A worker that resumes the run after this one
    died numbers its events from `SHOWN_UNSTORED` past the last stored one, so an id a listener saw here is
    never given to another event, and retracts the ids in between (see `RunEngine._restore`).
    """

    SHOWN_UNSTORED = 256

    def __init__(self, db: AsyncDatabase, live: LiveRun, barrier: EventBarrier, *, write_after: float,
                 on_failure: Callable[[], None] = lambda: None) -> None:
        self.db, self.live, self.barrier, self.on_failure = db, live, barrier, on_failure
        self.write_after = write_after
        self.failure: BaseException | None = None
        self.next_seq = live.first_seq
        self._rows: list[dict] = []  # every event of this execution, in order
        self._stores: dict[int, Callable[[], Awaitable[Any]]] = {}  # row index → the record change it carries
        self._marks: list[tuple[int, int]] = []  # (rows queued, node events received) at each node event
        self._usage: list[UsageRecord] = []
        self._stored = self._shown = 0
        self._closing = False
        self._hold: int | None = None  # rows from this index on are stored but not shown (the closing events)
        self._wakeup = asyncio.Event()
        barrier.on_wait = self._wakeup.set  # LangGraph waits to save results: store now
        self._task = asyncio.create_task(self._loop(), name=f"store events of {live.id}")
        self._task.add_done_callback(self._done)

    def add(self, emit: Emit, origin: Origin | None = None) -> None:
        self._rows.append({"seq": self.next_seq, "event": emit.event, "data": emit.data, "origin": origin_row(origin)})
        self.next_seq += 1
        if emit.store is not None or emit.durable:
            self._stores[len(self._rows) - 1] = emit.store or _nothing
            self._wakeup.set()
        self._show()

    def received(self) -> None:
        """Note that the events of one node event are all queued (it may have given none)."""
        self._marks.append((len(self._rows), self.barrier.received))

    def add_usage(self, record: UsageRecord) -> None:
        self._usage.append(record)

    def check(self) -> None:
        """Raise the failure of a write, if one failed."""
        if self._task.done() and not self._task.cancelled() and self._task.exception() is not None:
            raise self._task.exception()

    async def close(self, last: list[Emit] | None = None) -> list[dict]:
        """Store everything queued and then `last`, the run's closing events, their record changes first, in the
        same write (raising a storage failure). The closing events are not shown: return their rows, for the
        engine to show once the run's end is recorded."""
        self._hold = len(self._rows)
        for emit in last or []:
            self.add(emit)
        self._closing = True
        self._wakeup.set()
        await self._task
        return self._rows[self._hold:]

    def abandon(self) -> None:
        self._task.cancel()

    def _done(self, task: asyncio.Task) -> None:
        self.barrier.release()
        if not task.cancelled() and task.exception() is not None:
            self.failure = task.exception()
            if isinstance(self.failure, PyMongoError):  # the run stops now, not at its next step
                self.on_failure()

    def _show(self) -> None:
        gate = min(self._stores, default=len(self._rows))  # the first event whose record change is not stored
        limit = min(gate, self._stored + self.SHOWN_UNSTORED, len(self._rows) if self._hold is None else self._hold)
        if limit > self._shown:
            self.live.publish(self._rows[self._shown:limit])
            self._shown = limit

    def _urgent(self) -> bool:
        unstored = len(self._rows) - self._stored
        return (self._closing or bool(self._stores) or unstored >= self.SHOWN_UNSTORED
                or (self.barrier.waiting > 0 and (unstored > 0 or bool(self._marks))))

    async def _loop(self) -> None:
        while True:
            if not self._urgent():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), self.write_after)
            self._wakeup.clear()
            upto, usage = len(self._rows), self._usage
            self._usage = []
            changes = sorted(i for i in self._stores if i < upto)
            for index in changes:
                await self._stores[index]()
            await store.store_batch(self.db, run_id=self.live.id, events=self._rows[self._stored:upto], usage=usage)
            for index in changes:
                del self._stores[index]
            self._stored = upto
            self._show()
            received = [count for rows, count in self._marks if rows <= upto]
            if received:
                self._marks = [(rows, count) for rows, count in self._marks if rows > upto]
                self.barrier.stored_upto(max(received))
            if self._closing and self._stored == len(self._rows) and not self._usage:
                return


# --- leases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Holding:
    """A run this worker executes, as the lease thread sees it: its execution's task, and when the lease that
    execution began with (its start, take-over or wake) ends."""

    task: asyncio.Task
    lease_until: datetime | None


class LeaseKeeper:
    """Renew the leases of the runs a worker executes, from a thread of its own, so that a busy (or blocked)
    event loop never lets them expire while the worker lives.

    Every `heartbeat` seconds, while the worker executes runs, one `find` on a synchronous client of its own
    (`store.runs.renew_leases`): which of them it still holds, which someone asked to cancel, and how many inputs
    each was sent; and, before it, one `update` extending the leases that end within `RENEWED_WITHIN` heartbeats
    (a run of a second or two, most panel requests, is never renewed: the lease it started with outlives it). The
    thread reads the runs through `held` (a snapshot the engine takes under its lock) and touches nothing else of
    the engine: each answer is handed to the event loop (`loop.call_soon_threadsafe`), to `renewed(sent, held)`
    or, when the database failed, `failed(exc, ok_at)` (`ok_at`: the monotonic time of the last renewal that
    succeeded). Its client gives up on a dead database within `min(3, lease / 2)` seconds (server selection,
    connection) and on a reply after a lease, so `stop` never waits long.
    """

    # A lease is extended once no more than this many heartbeats of it are left: with the defaults (a 5 s lease, a
    # 1 s heartbeat) every other heartbeat, never with less than 2 s of it to go.
    RENEWED_WITHIN = 3

    def __init__(self, uri: str, db_name: str, *, worker: str, lease: float, heartbeat: float,
                 held: Callable[[], dict[str, Holding]],
                 renewed: Callable[[dict[str, Holding], dict[str, store.Held]], None],
                 failed: Callable[[PyMongoError, float], None]) -> None:
        self.uri, self.db_name, self.worker, self.lease, self.heartbeat = uri, db_name, worker, lease, heartbeat
        self.held, self.renewed, self.failed = held, renewed, failed
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Start renewing (from the event loop the answers go to)."""
        self._loop = asyncio.get_running_loop()
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name=f"run leases of {self.worker}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing; wait for the thread, for at most its client's timeouts (call it off the loop)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=self.lease + 3)
            self._thread = None

    def _run(self) -> None:
        timeout_ms = int(max(0.1, min(3.0, self.lease / 2)) * 1000)
        client: MongoClient = MongoClient(
            self.uri, tz_aware=True, event_listeners=[LISTENER], serverSelectionTimeoutMS=timeout_ms,
            connectTimeoutMS=timeout_ms, socketTimeoutMS=int(self.lease * 1000), appname="parley-leases")
        db = client[self.db_name]
        ok_at = time.monotonic()
        extended: dict[asyncio.Task, datetime] = {}  # an execution's task → when the lease this thread last set ends
        try:
            while not self._stopping.is_set():
                started = time.monotonic()
                sent = self.held()
                extended = {h.task: extended[h.task] for h in sent.values() if h.task in extended}
                if not sent:
                    ok_at = started  # nothing to hold: nothing can be lost
                else:
                    at = store.now()  # the leases the update sets end a little later than at + lease
                    soon = at + timedelta(seconds=self.RENEWED_WITHIN * self.heartbeat)
                    due = [run_id for run_id, h in sent.items()
                           if (until := extended.get(h.task, h.lease_until)) is None or until <= soon]
                    try:
                        held = store.renew_leases(db, run_ids=list(sent), extend=due, worker=self.worker,
                                                  lease_seconds=self.lease)
                    except PyMongoError as exc:
                        self._hand(self.failed, exc, ok_at)
                    except Exception:  # never let the thread die: the leases would lapse while the worker lives
                        log.exception("run engine: a lease renewal failed")
                    else:
                        ok_at = started
                        extended.update((sent[run_id].task, at + timedelta(seconds=self.lease)) for run_id in due)
                        self._hand(self.renewed, sent, held)
                self._stopping.wait(max(0.0, started + self.heartbeat - time.monotonic()))
        finally:
            client.close()

    def _hand(self, callback: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: the worker is gone
            self._loop.call_soon_threadsafe(callback, *args)


# --- the engine -------------------------------------------------------------------------------


class RunEngine:
    """Start runs, execute them (and those other workers left behind), serve their events, cancel them.

    Args:
        db: Parley's database.
        saver: the LangGraph checkpointer runs save to.
        factory: the model factory modes build their contexts with.
        modes: each kind of run the engine executes → the mode that drives it (`runs.modes.MODES` has every
            mode of Parley); a run of another kind is refused.
        settle: how a mode bills a run when it ends (`services.billing.settle`; `services.engine.RunEngine`
            gives both).
        settings: lease, heartbeat, poll interval and checkpoint durability (`PARLEY_RUN_*`).
        uri: the database's URI, for the lease thread's own synchronous client (`LeaseKeeper`); default
            `settings.mongodb_uri` (give it when that is unset: the embedded server's).
        worker: this worker's name in run records (default `host:pid`).
        takes_over: whether this worker resumes runs whose worker stopped (False for a short-lived process,
            such as the CLI, that executes only the runs it starts).
    """

    # Seconds the record of a run that ended here is kept in memory, for those waiting on it (`wait`).
    ENDED_KEPT = 10.0

    def __init__(
        self, db: AsyncDatabase, *, saver: BaseCheckpointSaver, factory: ModelFactory, settings: Settings,
        modes: Mapping[str, type[ModeRun]], settle: Settle, uri: str | None = None, worker: str | None = None,
        takes_over: bool = True,
    ) -> None:
        self.db, self.saver, self.settings, self.takes_over = db, saver, settings, takes_over
        self.modes = dict(modes)
        self.uri = uri or settings.mongodb_uri
        if not self.uri:
            raise ValueError("RunEngine needs the database's URI (uri=, or MONGODB_URI) for its lease renewals")
        self.services = Services(db=db, factory=factory, settings=settings, settle=settle)
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        self.lease, self.heartbeat = settings.parley_run_lease, settings.parley_run_heartbeat
        self.poll = settings.parley_run_poll
        self._tasks: dict[str, asyncio.Task] = {}  # changed on the loop under `_tasks_lock`, read by the keeper
        self._leases: dict[str, datetime | None] = {}  # run id → when its execution's first lease ends (same lock)
        self._tasks_lock = threading.Lock()
        self._live: dict[str, LiveRun] = {}
        self._ended: dict[str, dict] = {}  # run id → its finished record, for `ENDED_KEPT` seconds
        self._stopping: dict[str, str] = {}  # run id → why its execution stops: cancel, failed, lost, shutdown
        self._failures: dict[str, Exception] = {}  # run id → why its mode refused to go on
        self._closing: set[str] = set()  # runs whose graph has finished and whose outcome is being stored
        self._steering: dict[str, Steering] = {}  # run id → the inputs delivered to its execution here
        self._fetching: dict[str, asyncio.Task] = {}  # run id → a fetch of its inputs under way
        self._refetch: set[str] = set()  # runs whose inputs are to be read again once the fetch under way ends
        self._waking: set[asyncio.Task] = set()  # wakes asked for by executions as they parked
        self._keeper: LeaseKeeper | None = None
        self._taker: asyncio.Task | None = None
        self.watch = PageWatch(db)  # wakes followers of runs executing elsewhere, where the database can

    # --- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Begin tending: renew leases and pick up cancel requests (`LeaseKeeper`), take over runs other
        workers left (`_take_over`, unless `takes_over` is False)."""
        if self._keeper is None:
            self._keeper = LeaseKeeper(self.uri, self.db.name, worker=self.worker, lease=self.lease,
                                       heartbeat=self.heartbeat, held=self._held, renewed=self._renewed,
                                       failed=self._renewal_failed)
            self._keeper.start()
        if self.takes_over and self._taker is None:
            self._taker = asyncio.create_task(self._take_over(), name="run take-overs")

    async def stop(self, grace: float = 5.0) -> None:
        """Stop tending and hand this worker's runs over: each is released for another worker (or this one,
        restarted) to resume. Events already queued are stored first, for up to `grace` seconds."""
        if self._taker is not None:
            self._taker.cancel()
            await asyncio.gather(self._taker, return_exceptions=True)
            self._taker = None
        if self._keeper is not None:  # before the runs are released: a renewal would undo a release
            await asyncio.to_thread(self._keeper.stop)
            self._keeper = None
        for run_id in list(self._tasks):
            self._stop(run_id, "shutdown")
        if self._tasks:
            await asyncio.wait(list(self._tasks.values()), timeout=grace)
        await self.watch.close()

    # --- starting runs ------------------------------------------------------------------------

    async def submit(
        self, kind: str, *, caller: Caller, input: dict[str, Any], title: str, ref: dict[str, Any] | None = None,
        run_id: str | None = None,
    ) -> dict:
        """Store a new run of `kind` and start executing it in this worker; return its record."""
        if kind not in self.modes:
            raise ValueError(f"unknown run kind {kind!r}")
        record = await store.create_run(
            self.db, run_id=run_id or f"run_{uuid.uuid4().hex[:20]}", kind=kind, workspace=caller.workspace,
            user=caller.user, title=title, input=input, ref=ref, worker=self.worker, lease_seconds=self.lease,
        )
        self._launch(record)
        return record

    def _launch(self, record: dict) -> None:
        run_id = record["_id"]
        live = None
        if record.get("claims", 1) <= 1:
            # Registered before the task starts, so that a listener on this worker (the route that just
            # submitted the run) follows it from memory at once instead of polling the database.
            live = self._live[run_id] = LiveRun(run_id, first_seq=self.modes[record["kind"]].first_seq)
        task = asyncio.create_task(self._execute(record), name=f"run {run_id}")
        with self._tasks_lock:
            self._tasks[run_id] = task
            self._leases[run_id] = record.get("leaseUntil")

        def forget(_: asyncio.Task) -> None:
            if live is not None and self._live.get(run_id) is live:  # a task cancelled before it started
                live.end()
                self._live.pop(run_id, None)
            with self._tasks_lock:
                if self._tasks.get(run_id) is task:
                    del self._tasks[run_id]
                    self._leases.pop(run_id, None)
            self._stopping.pop(run_id, None)
            self._closing.discard(run_id)

        task.add_done_callback(forget)

    def _stop(self, run_id: str, reason: str) -> None:
        """Stop executing a run here, for `reason` (the first one given stands): cancel its task."""
        task = self._tasks.get(run_id)
        if task is None or run_id in self._closing or run_id in self._stopping:
            return
        self._stopping[run_id] = reason
        task.cancel()

    def _still_running(self, run_id: str) -> None:
        """The run sent an event, or began a model call, after it was told to stop: its cancellation was lost in
        the graph's machinery (one that lands as a step's task returns can be), so deliver it again. Nothing
        is repeated for a hand-over (`lost`, `shutdown`), which must not be interrupted."""
        task = self._tasks.get(run_id)
        if task is not None and run_id not in self._closing and self._stopping.get(run_id) in REPEATED:
            task.cancel()

    # --- executing ----------------------------------------------------------------------------

    async def _execute(self, record: dict) -> None:
        """Execute a run here, from its start or from its last checkpoint, and store how it ends."""
        run_id = record["_id"]
        resumed = record.get("claims", 1) > 1  # another worker began it
        deadline = self._deadline(record)
        barriers: dict[str, EventBarrier] | None = getattr(self.saver, "barriers", None)
        live: LiveRun | None = self._live.get(run_id)  # a new run's, registered by `_launch`
        try:
            mode: ModeRun = self.modes[record["kind"]](record, self.services)
            if live is None:
                # Fenced first: no page of an earlier execution, still going somewhere, is stored after this.
                stored = await store.fence_events(self.db, run_id=run_id) if resumed else -1
                # Past the fence, and past the ids another worker may have shown without storing them (see
                # EventWriter); a run woken from a wait had stored every event it showed.
                gap = (1 if record.get("woken") else EventWriter.SHOWN_UNSTORED) if resumed else 0
                live = self._live[run_id] = LiveRun(run_id, first_seq=max(mode.first_seq, stored + 1 + gap))
            barrier = EventBarrier()
            if barriers is not None:
                barriers[run_id] = barrier
            writer = EventWriter(self.db, live, barrier, write_after=mode.store_every,
                                 on_failure=lambda: self._stop(run_id, "storage"))
            earlier = [UsageRecord(**row) for row in await store.list_usage(self.db, run_id=run_id)] if resumed else []
            ledger = RunLedger(records=earlier, sink=writer.add_usage)
            steering = await self._steer_options(record, mode)
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
            self._live.pop(run_id, None)
            self._failures.pop(run_id, None)
            self._steering.pop(run_id, None)
            if (fetching := self._fetching.pop(run_id, None)) is not None:
                fetching.cancel()
            if barriers is not None:
                barriers.pop(run_id, None)
            if hasattr(self.saver, "forget"):  # what the checkpointer keeps in memory of the run
                self.saver.forget(run_id)

    def _deadline(self, record: dict) -> asyncio.TimerHandle:
        """Stop the run once it has been active for `PARLEY_RUN_DEADLINE` seconds since it was created (a resumed
        run keeps the deadline it had; time spent waiting for a person does not count)."""
        left = max(0.0, self.settings.parley_run_deadline - store.active_seconds(record))
        return asyncio.get_running_loop().call_later(left, self._stop, record["_id"], "deadline")

    async def _steer_options(self, record: dict, mode: ModeRun) -> Steering | None:
        """The run's steering (None for a mode no one steers): where it waits by itself (`input.steer.await`) and
        the inputs stored for it so far (read only when some were sent, `store.runs.note_input`)."""
        if not mode.steers(record):
            return None
        steering = Steering(await_at=(record["input"].get("steer") or {}).get("await"))
        if record.get("inputs"):
            steering.deliver(await input_store.list_inputs(self.db, run_id=record["_id"]))
        self._steering[record["_id"]] = steering
        return steering

    def _budget(self, record: dict, ledger: UsageLedger) -> Budget | None:
        """The run's budget (`input.steer.budget`), its clock counting the run's active seconds (None: no limits)."""
        limits = BudgetLimits.parse((record["input"].get("steer") or {}).get("budget"))
        if not limits:
            return None
        before, started = store.active_seconds(record), time.monotonic()
        return Budget(limits, ledger, clock=lambda: before + time.monotonic() - started)

    def _fetch_inputs(self, run_id: str) -> None:
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

    def _sink(self, run_id: str, mode: ModeRun, writer: EventWriter) -> Callable[[TaskEvent], None]:
        """Where the run's nodes send their events: translated and queued at once, in the order they are sent
        (nested graphs' too), before the task that sent them can have its results saved."""

        def take(event: TaskEvent) -> None:
            if run_id in self._stopping:
                self._still_running(run_id)
            writer.barrier.received_one()
            try:
                origin = event.origin if mode.checkpointed else None  # what a resume from a checkpoint reads
                for emit in mode.translate("custom", event):
                    writer.add(emit, origin)
            except Exception as exc:  # the mode refuses to go on (a panel answer cut off mid-stream, say)
                self._failures[run_id] = exc
                self._stop(run_id, "failed")
            writer.received()

        return take

    async def _outcome(self, record: dict, mode: ModeRun, writer: EventWriter, ledger: RunLedger,
                       steering: Steering | None = None, budget: Budget | None = None) -> Outcome | None:
        """Run the graph, relaying its events; return how the run ended (None: it goes on elsewhere, or waits for
        a person)."""
        run_id, kind = record["_id"], record["kind"]
        graph = mode.graph(self.saver if mode.checkpointed else None)
        config = {"configurable": {"thread_id": run_id},
                  **trace_config(run_id, kind, record["workspace"], record["user"]),
                  "callbacks": [StopGuard(self, run_id)]}
        context = mode.context(ledger)
        context.steering, context.budget = steering, budget
        try:
            went_on, graph_input = await self._restore(record, mode, graph, config, writer, steering)
            if record.get("cancelRequested"):
                self._stopping[run_id] = "cancel"
                raise asyncio.CancelledError
            if not went_on:
                for emit in mode.opening():
                    writer.add(emit)
            state: dict[str, Any] = {}
            # Custom events come through the sink (as they are sent); the stream gives the other modes.
            modes = [m for m in mode.stream_mode if m != "custom"] + ["values"]
            sink = EVENT_SINK.set(self._sink(run_id, mode, writer))
            try:
                parts = graph.astream(
                    graph_input, config, context=context,
                    stream_mode=modes,
                    **({"durability": self.settings.parley_run_durability} if mode.checkpointed else {}),
                )
                async with contextlib.aclosing(parts):  # its tasks stop with it, however the loop is left
                    async for part_mode, part in parts:
                        writer.check()
                        if run_id in self._stopping:  # told to stop, and the cancellation was lost on its way
                            raise asyncio.CancelledError
                        if part_mode == "values":
                            state = part
                            if "values" not in mode.stream_mode:
                                continue
                        for emit in mode.translate(part_mode, part):
                            writer.add(emit)
            finally:
                EVENT_SINK.reset(sink)
            if run_id in self._stopping:
                raise asyncio.CancelledError
            if state.get("__interrupt__"):  # stopped at a boundary of its graph to wait for a person
                return await self._park(record, mode, writer, steering, state)
            return await self._end(record, mode, ledger, lambda: mode.completed(state, ledger), "completed")
        except asyncio.CancelledError:
            return await self._stopped(record, mode, writer, ledger)
        except store.EventConflict:
            await self._hand_over(run_id, writer, "lost")
            return None
        except PyMongoError as exc:
            # The database cannot take the run's writes: leave the run to be resumed when it can.
            log.error("run %s: storage failed (%s); it will be resumed once its lease expires", run_id, exc)
            writer.abandon()
            writer.live.storage_failed = True
            return None
        except Exception as exc:  # the top of a run: the mode records the failure and tells the listeners
            if run_id in self._stopping:  # a node turned the stop into a failure (StopGuard's, say)
                return await self._stopped(record, mode, writer, ledger)
            log.warning("run %s (%s) failed: %s", run_id, kind, exc, exc_info=True)
            return await self._failed(record, mode, ledger, over_budget(exc) or exc)

    async def _park(self, record: dict, mode: ModeRun, writer: EventWriter, steering: Steering | None,
                    state: dict[str, Any]) -> None:
        """Store that the run waits for a person at a boundary of its graph (`store.runs.park`: no lease held, no
        worker executing it), then its `waiting` event; keep its checkpoints for as long as it waits. An input
        that lets it go on, stored while it was parking, wakes it at once (see `steer`).

        Raises:
            asyncio.CancelledError: a cancel was asked first: the run ends cancelled instead.
        """
        run_id = record["_id"]
        where = dict(state["__interrupt__"][0].value or {})
        self._closing.add(run_id)  # nothing stops this execution now: it is storing how it stops
        if not await store.park(self.db, run_id=run_id, worker=self.worker, waiting=where):
            self._closing.discard(run_id)
            current = await store.get_run(self.db, run_id=run_id) or {}
            if current.get("worker") == self.worker and current.get("cancelRequested"):
                self._stopping[run_id] = "cancel"
                raise asyncio.CancelledError
            await self._hand_over(run_id, writer, "lost")
            return None
        log.info("run %s (%s) waits for a person (%s)", run_id, record["kind"], where)
        try:
            writer.live.publish(await writer.close([Emit("waiting", where)]))
        except (PyMongoError, store.EventConflict) as exc:  # woken and fenced elsewhere already, or storage down
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
        return None

    async def _stopped(self, record: dict, mode: ModeRun, writer: EventWriter, ledger: RunLedger) -> Outcome | None:
        """How a run told to stop ends: cancelled, failed (its mode refused to go on, or past its deadline), or
        not at all here (handed over to another worker, or left until storage is back)."""
        run_id = record["_id"]
        reason = self._stopping.get(run_id, "shutdown")
        if reason == "failed":
            return await self._failed(record, mode, ledger, self._failures[run_id])
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
            await self._hand_over(run_id, writer, reason)
            return None
        self._closing.add(run_id)
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
        self._closing.add(run_id)
        claimed = await store.conclude(self.db, run_id=run_id, worker=self.worker, status=status)
        if claimed is None or claimed.get("worker") != self.worker or claimed["status"] in store.FINISHED:
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

    async def _restore(self, record: dict, mode: ModeRun, graph: Any, config: dict, writer: EventWriter,
                       steering: Steering | None = None) -> tuple[bool, Any]:
        """Where the run's graph starts. For a run another execution began: void the events of the tasks that
        will run again (announcing them in a `retract`) and bring the mode's records in line.

        Returns whether the run goes on from what an earlier execution did (its opening events stand), and the
        graph's input: None to go on from its last checkpoint (a `checkpointed` mode), `Command(resume=input)` when
        that checkpoint waits for a person (`input`: the last one that lets it go on), else the input it starts
        with (from its beginning, or where the mode's own records say it had got to, see `ModeRun.restart`).
        """
        if record.get("claims", 1) <= 1:
            return False, mode.graph_input()
        await store.mark_running(self.db, run_id=record["_id"], worker=self.worker)
        rows = await store.all_events(self.db, run_id=record["_id"])
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
                saved = await saved_graphs(self.saver, record["_id"], namespaces(origins))
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
            await store.mark_void(self.db, run_id=record["_id"], seqs=void)
        if void or unstored:
            writer.add(Emit(RETRACT, {"seqs": void + unstored, "reason": RESUMED_REASON}))
        if record.get("woken"):
            log.info("run %s (%s) goes on on %s after its wait", record["_id"], record["kind"], self.worker)
        else:
            log.warning("run %s (%s) taken over by %s: %s, %d event(s) retracted", record["_id"], record["kind"],
                        self.worker, "going on from where it was" if went_on else "starting over", len(void))
        return went_on, graph_input

    async def _hand_over(self, run_id: str, writer: EventWriter, reason: str) -> None:
        """Stop executing a run here without ending it: lost to another worker, or this worker shutting down."""
        if reason == "shutdown":
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.close(), timeout=2)
            with contextlib.suppress(PyMongoError):
                await store.release(self.db, run_id=run_id, worker=self.worker)
            log.info("run %s released for another worker to resume", run_id)
        else:
            writer.abandon()
            log.warning("run %s: lease lost; another worker has it now", run_id)

    async def _conclude(self, record: dict, outcome: Outcome, writer: EventWriter, ledger: UsageLedger,
                        budget: Budget | None = None) -> None:
        """Store the closing events and the run's end (with why it stopped early, and its budget's figures). The
        record says how the run ended before any listener here sees its last event (listeners elsewhere check
        it, see `follow`)."""
        run_id = record["_id"]
        try:
            rows = await writer.close(outcome.events)
            finished = await store.finish(self.db, run_id=run_id, worker=self.worker, status=outcome.status,
                                          result=outcome.result, error=outcome.error, usage=usage_totals(ledger),
                                          stopped_by=outcome.stopped_by,
                                          budget=budget.figures() if budget is not None else None)
            if finished is not None:  # before any listener here sees the last event: `wait` reads it
                self._ended[run_id] = {**record, **finished}
                asyncio.get_running_loop().call_later(self.ENDED_KEPT, self._ended.pop, run_id, None)
            record_run(record["kind"], outcome.status)
            writer.live.publish(rows)
        except (PyMongoError, store.EventConflict) as exc:
            log.error("run %s: its end could not be stored (%s)", run_id, exc)
            writer.live.storage_failed = isinstance(exc, PyMongoError)
            return
        if self.modes[record["kind"]].checkpointed and not self.settings.parley_run_keep_checkpoints:
            try:
                await self.saver.adelete_thread(run_id)
            except PyMongoError as exc:
                log.warning("run %s: checkpoints not deleted (%s)", run_id, exc)

    # --- tending ------------------------------------------------------------------------------

    def _held(self) -> dict[str, Holding]:
        """The runs this worker executes, each with its task and its lease's end (called from the lease thread)."""
        with self._tasks_lock:
            return {run_id: Holding(task, self._leases.get(run_id)) for run_id, task in self._tasks.items()}

    def _renewed(self, sent: dict[str, Holding], held: dict[str, store.Held]) -> None:
        """A lease renewal's answer (on the loop): stop the runs of `sent` this worker no longer holds (another
        took them over), and those someone cancelled (again, while they still execute: a cancellation lost in
        the graph); fetch the inputs sent on other workers to the runs it executes. A run whose task changed
        since (it ended, and was claimed here again) is left alone."""
        for run_id, holding in sent.items():
            if self._tasks.get(run_id) is not holding.task:
                continue
            if run_id not in held:
                self._stop(run_id, "lost")
            elif held[run_id].cancel:
                if run_id in self._stopping:
                    self._still_running(run_id)
                else:
                    self._stop(run_id, "cancel")
            elif (steering := self._steering.get(run_id)) is not None and held[run_id].inputs > len(steering.inbox):
                self._fetch_inputs(run_id)
        for live in self._live.values():
            if not live.ended:
                live.storage_down(False)

    def _renewal_failed(self, exc: PyMongoError, ok_at: float) -> None:
        """A lease renewal failed (on the loop): listeners are told at once when the database cannot be
        reached, and once no renewal has succeeded for a whole lease, this worker's runs are stopped (others may
        hold them now)."""
        log.warning("run engine: database unreachable (%s)", exc)
        if isinstance(exc, ConnectionFailure):
            for live in self._live.values():  # their listeners' streams end now, with an error
                live.storage_down()
        if time.monotonic() - ok_at > self.lease:
            for run_id in list(self._tasks):  # our leases have run out: others may hold these runs now
                self._stop(run_id, "lost")

    async def _take_over(self) -> None:
        """Take over the runs other workers left: look (one indexed `find`, `store.runs.next_expiring`) at the run
        whose lease ends first among those not executing here, claim it once its holder is gone
        (`store.runs.claim_expired`), else look again when it could be (at most a lease later: a run started
        meanwhile cannot be free before). The runs this worker executes are never claimed, even when their
        lease has expired (a database outage), so nothing runs twice here."""
        while True:
            wait = self.lease
            try:
                while (run := await store.next_expiring(self.db, exclude=list(self._tasks))) is not None:
                    left = (store.claimable_at(run, self.lease) - store.now()).total_seconds()
                    if left >= 0:
                        wait = min(self.lease, left + 0.01)
                        break
                    record = await store.claim_expired(self.db, run=run, worker=self.worker,
                                                       lease_seconds=self.lease)
                    if record is None:  # renewed, claimed or ended meanwhile: look again shortly
                        wait = min(self.poll, self.lease)
                        break
                    if record["_id"] not in self._tasks:
                        self._launch(record)
            except PyMongoError as exc:
                log.warning("run engine: take-overs paused, database unreachable (%s)", exc)
                wait = self.heartbeat
            await asyncio.sleep(wait)

    # --- serving ------------------------------------------------------------------------------

    async def get(self, run_id: str, *, workspace: str | None = None) -> dict:
        record = await store.get_run(self.db, run_id=run_id, workspace=workspace)
        if record is None:
            raise RunNotFound(run_id)
        return record

    async def follow(self, run_id: str, *, after: int = -1) -> AsyncIterator[list[Event]]:
        """The run's events after `after` in batches, then the live ones as they come, until its last one.

        Served from memory while this worker executes the run, from the database otherwise: polled every
        `PARLEY_RUN_POLL` seconds, the interval doubling (up to the heartbeat) while no event comes and reset
        when one does. When the database fails, the stream ends with an `error` event whose `code` is
        `storage_unavailable` (without an id: the run goes on once storage is back, and a listener resumes from
        the last id it saw).
        """
        try:
            async for batch in self._follow(run_id, after=after):
                yield batch
        except PyMongoError as exc:
            log.warning("run %s: a listener's stream ends, storage failed (%s)", run_id, exc)
            yield [storage_failure()]

    async def _follow(self, run_id: str, *, after: int) -> AsyncIterator[list[Event]]:
        async with contextlib.AsyncExitStack() as stack:
            wake: asyncio.Event | None = None  # set when a page of the run's events is stored (`PageWatch`)
            delay = self.poll
            while True:
                live = self._live.get(run_id)
                if live is not None and not live.ended and after + 1 >= live.first_seq:
                    async for batch in live.follow(after):
                        after = batch[-1].seq
                        yield batch
                        if batch[-1].terminal:
                            return
                    if live.storage_failed:
                        yield [storage_failure()]
                        return
                    continue  # the execution here stopped without an end (handed over): read on from the database
                if wake is None:  # the change stream, if the database has one, is open before the first read
                    wake = await stack.enter_async_context(self.watch.subscription(run_id))
                wake.clear()  # a page stored from here on sets it again
                rows = await store.events_after(self.db, run_id=run_id, after=after)
                if rows:
                    delay = self.poll
                    end = next((i + 1 for i, row in enumerate(rows)
                                if row["event"] in TERMINAL and not row.get("void")), len(rows))
                    shown = listener_view(rows[:end], after=after)
                    if shown and shown[-1].terminal:
                        await self._until_recorded(run_id)
                        yield shown
                        return
                    after = rows[end - 1]["seq"]
                    if shown:
                        yield shown
                    continue
                ended = run_id in self._ended
                if not ended:
                    status = await store.run_status(self.db, run_id=run_id)
                    if status is None:
                        return
                    ended = status in store.FINISHED
                if ended and not await store.events_after(self.db, run_id=run_id, after=after):
                    return
                if self.watch.live:  # woken when a page comes; read anyway every heartbeat
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), max(self.poll, self.heartbeat))
                    continue
                await asyncio.sleep(delay)
                delay = min(2 * delay, max(self.poll, self.heartbeat))

    async def _until_recorded(self, run_id: str, timeout: float = 10.0) -> None:
        """Wait for the run's record to say it ended (stored just after its last event); nothing is read when it
        ended on this worker."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline and run_id not in self._ended:
            status = await store.run_status(self.db, run_id=run_id)
            if status is None or status in store.FINISHED:
                return
            await asyncio.sleep(min(self.poll, 0.05))

    async def wait(self, run_id: str, *, or_waiting: bool = False) -> dict:
        """The run's record once it has ended: from memory when it ended on this worker (in the last
        `ENDED_KEPT` seconds), from the database otherwise. With `or_waiting`, also as soon as it waits for a
        person (its record's status is then `waiting`)."""
        if (ended := self._ended.get(run_id)) is None:
            async for batch in self.follow(run_id):
                if or_waiting and any(event.event == "waiting" for event in batch):
                    record = await self.get(run_id)
                    if record["status"] == store.WAITING:
                        return record
            ended = self._ended.get(run_id)
        return ended if ended is not None else await self.get(run_id)

    async def cancel(self, run_id: str) -> tuple[dict | None, bool]:
        """Ask for a run to stop: at once when this worker executes it, else at the next lease renewal (within a
        heartbeat) of the worker that does. Return the record and whether the request was recorded (False: the
        run had ended, or had finished and was being stored; it is left as it is). A recorded request is kept:
        the run ends `cancelled`."""
        record, accepted = await store.request_cancel(self.db, run_id=run_id)
        if accepted and record is not None and record["status"] == store.WAITING:
            record = await self.wake(run_id) or record  # executed here, it ends cancelled at once
        elif accepted:
            self._stop(run_id, "cancel")
        return record, accepted

    async def steer(self, run_id: str, *, user: str, content: str | None = None,
                    action: str | None = None) -> tuple[dict, dict] | None:
        """Store an input a person sent a run (a message, an action, or both), then deliver it: at once to the
        run's execution when this worker executes it, within a heartbeat from any other (its lease renewal reads
        the count of inputs, `store.runs.note_input`); a waiting run that it lets go on (`continue`, `guide`,
        `end`) is woken and executed here. Return the input as delivered and the run's record as it now is; None
        when the run had ended (or was being cancelled): the input is not kept."""
        given = await input_store.add_input(self.db, run_id=run_id, user=user, content=content, action=action)
        record = await store.note_input(self.db, run_id=run_id)
        if record is None:
            await input_store.remove_input(self.db, input_id=given["id"])
            return None
        if (steering := self._steering.get(run_id)) is not None:
            steering.deliver([given])
        if record["status"] == store.WAITING and action in RELEASES:
            record = await self.wake(run_id) or await self.get(run_id)
        return given, record

    async def wake(self, run_id: str) -> dict | None:
        """Take a waiting run (`store.runs.wake`) and execute it here, from where it waited; None when it was not
        waiting (another worker woke it, or it ended)."""
        record = await store.wake(self.db, run_id=run_id, worker=self.worker, lease_seconds=self.lease)
        if record is None:
            return None
        record["woken"] = True  # every event of its last execution was stored: nothing to retract or skip
        if (parking := self._tasks.get(run_id)) is not None:  # its last execution here is still storing its wait
            await asyncio.wait([parking])
        self._launch(record)
        return record
