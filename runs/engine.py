"""The run engine: a run of any mode starts, streams, is stored, resumes after a crash and stops the same way.

Any worker executes and any worker serves. A run is a record in `runs` leased to the worker executing it, its numbered
events in `run_events`, the usage of its model calls in `run_usage`, and its LangGraph checkpoints (thread id = run
id). The worker that starts a run executes it at once. `RunEngine` puts together the parts that do this, one job each:

- `runs.execution`: execute one run here, and store how it ends; `runs.live`: its events, shown to this worker's
  listeners and stored in batches; `runs.resume`: where a run another execution began goes on.
- `runs.held`: the runs this worker executes; `runs.leases`: their leases renewed from a thread of its own, and the
  runs other workers left taken over.
- `runs.stops`: a cancel, a deadline, a failure or a hand-over delivered to a run's execution.
- `runs.inputs`: a person's inputs delivered to a run; a run parked to wait for a person, and woken.
- `runs.following`: a run's events and record served to its listeners on any worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConnectionFailure, PyMongoError

from parley.core.workers import WORKER
from parley.core.settings import Settings
from parley.llm.factory import ModelFactory
from parley.runs.announce import announcing
from parley.runs.events import Event, Signal
from parley.runs.execution import Executions
from parley.runs.following import Following
from parley.runs.held import HeldRuns, Holding
from parley.runs.inputs import Inputs
from parley.runs.leases import LeaseKeeper, TakeOvers
from parley.runs.modes.base import ModeRun, Services, Settle
from parley.runs.stops import Stops
from parley.runs.wakeups import PageWatch
from parley.store import runs as store

log = logging.getLogger("parley.runs")


@dataclass(frozen=True)
class Caller:
    """Who a run is for: the key's user and workspace."""

    user: str
    workspace: str


class RunEngine:
    """Start runs, execute them (and those other workers left behind), serve their events, cancel them.

    Args:
        db: Parley's database.
        saver: the LangGraph checkpointer runs save to.
        factory: the model factory modes build their contexts with.
        modes: each kind of run the engine executes → the mode that drives it (`runs.modes.MODES` has every
            mode of Parley); a run of another kind is refused.
        settle: how a mode bills a run when it ends (`services.billing.settle`; `services.engine.ParleyRunEngine`
            gives both).
        settings: lease, heartbeat, poll interval and checkpoint durability (`PARLEY_RUN_*`).
        uri: the database's URI, for the lease thread's own synchronous client (`LeaseKeeper`); default
            `settings.mongodb_uri` (give it when that is unset: the embedded server's).
        worker: this worker's name in run records (default `host:pid`).
        takes_over: whether this worker resumes runs whose worker stopped (False for a short-lived process,
            such as the CLI, that executes only the runs it starts).
    """

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
        self.worker = worker or WORKER
        self.lease, self.heartbeat = settings.parley_run_lease, settings.parley_run_heartbeat
        self.poll = settings.parley_run_poll
        self.watch = PageWatch(db)  # wakes followers of runs executing elsewhere, where the database can
        self.held = HeldRuns()
        self.stops = Stops(self.held)
        self.following = Following(db, watch=self.watch, poll=self.poll, heartbeat=self.heartbeat)
        self.inputs = Inputs(db, saver=saver, worker=self.worker, lease=self.lease, held=self.held, stops=self.stops,
                             launch=self._launch, announcing=announcing(settings))
        self.executions = Executions(db, saver=saver, settings=settings, modes=self.modes, services=self.services,
                                     worker=self.worker, held=self.held, stops=self.stops, inputs=self.inputs,
                                     following=self.following, leases_hold=self.leases_hold)
        self.take_overs = TakeOvers(db, worker=self.worker, lease=self.lease, heartbeat=self.heartbeat,
                                    poll=self.poll, held=self.held, launch=self._launch)
        self._keeper: LeaseKeeper | None = None
        self._renewal = Signal()  # a lease renewal answered, or failed

    # --- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Begin tending: renew leases and pick up cancel requests (`LeaseKeeper`), take over runs other
        workers left (`TakeOvers`, unless `takes_over` is False)."""
        if self._keeper is None:
            self._keeper = LeaseKeeper(self.uri, self.db.name, worker=self.worker, lease=self.lease,
                                       heartbeat=self.heartbeat, held=self.held.snapshot, renewed=self._renewed,
                                       failed=self._renewal_failed)
            self._keeper.start()
        if self.takes_over:
            self.take_overs.start()

    async def stop(self, grace: float = 5.0) -> None:
        """Stop tending and hand this worker's runs over: each is released for another worker (or this one,
        restarted) to resume. Events already queued are stored first, for up to `grace` seconds."""
        await self.take_overs.stop()
        if self._keeper is not None:  # before the runs are released: a renewal would undo a release
            await asyncio.to_thread(self._keeper.stop)
            self._keeper = None
        for run_id in self.held.ids():
            self.stops.stop(run_id, "shutdown")
        if tasks := self.held.tasks():
            await asyncio.wait(tasks, timeout=grace)
        await self.watch.close()

    def tending(self) -> bool:
        """Whether this worker tends its runs: started and not stopping, its lease renewals answered on time
        (`LeaseKeeper.holds`: its event loop turns and its lease thread lives). What `/readyz` reports, with the
        database's ping."""
        return self._keeper is not None and self._keeper.holds()

    # --- runs ---------------------------------------------------------------------------------

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

    async def get(self, run_id: str, *, workspace: str | None = None) -> dict:
        """The run's record (`RunNotFound` when there is none, in `workspace` when given)."""
        return await self.following.get(run_id, workspace=workspace)

    def follow(self, run_id: str, *, after: int = -1) -> AsyncIterator[list[Event]]:
        """The run's events after `after` in batches, until its last one (see `Following.follow`)."""
        return self.following.follow(run_id, after=after)

    async def wait(self, run_id: str, *, or_waiting: bool = False) -> dict:
        """The run's record once it has ended, or with `or_waiting` once it waits for a person (`Following.wait`)."""
        return await self.following.wait(run_id, or_waiting=or_waiting)

    async def cancel(self, run_id: str) -> tuple[dict | None, bool]:
        """Ask for a run to stop: at once when this worker executes it, else at the next lease renewal (within a
        heartbeat) of the worker that does. Return the record and whether the request was recorded (False: the
        run had ended, or had finished and was being stored; it is left as it is). A recorded request is kept:
        the run ends `cancelled`."""
        record, accepted = await store.request_cancel(self.db, run_id=run_id)
        if accepted and record is not None and record["status"] == store.WAITING:
            record = await self.wake(run_id) or record  # executed here, it ends cancelled at once
        elif accepted:
            self.stops.stop(run_id, "cancel")
        return record, accepted

    async def steer(self, run_id: str, *, user: str, content: str | None = None,
                    action: str | None = None) -> tuple[dict, dict] | None:
        """Store and deliver an input a person sent a run, waking it when it waits and the input lets it go on
        (`Inputs.steer`). Return the input and the run's record; None when the run had ended."""
        return await self.inputs.steer(run_id, user=user, content=content, action=action)

    async def wake(self, run_id: str) -> dict | None:
        """Take a waiting run and execute it here, from where it waited (`Inputs.wake`); None when it was not
        waiting."""
        return await self.inputs.wake(run_id)

    def _launch(self, record: dict) -> None:
        self.executions.launch(record)

    # --- lease renewals' answers (on the loop) --------------------------------------------------

    async def leases_hold(self, run_id: str) -> None:
        """Return once this worker's leases are known to hold (`LeaseKeeper.holds`) or run `run_id` was told to stop:
        at once while renewals succeed, else after the next renewal's answer. Every model call of a run awaits it
        (`StopGuard`), so that a worker cut off from the database, or frozen, for longer than a lease starts no call
        before it learns that its run was taken over (`_renewed` stops it)."""
        while (keeper := self._keeper) is not None and not keeper.holds() and not self.stops.told(run_id):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._renewal.wait(), self.heartbeat)

    def _renewed(self, sent: dict[str, Holding], held: dict[str, store.Held]) -> None:
        """A lease renewal's answer: stop the runs of `sent` this worker no longer holds (another took them over),
        and those someone cancelled (again, while they still execute: a cancellation lost in the graph); fetch
        the inputs sent on other workers to the runs it executes. A run whose task changed since (it ended, and
        was claimed here again) is left alone."""
        for run_id, holding in sent.items():
            if self.held.task(run_id) is not holding.task:
                continue
            if run_id not in held:
                self.stops.stop(run_id, "lost")
            elif held[run_id].cancel:
                if self.stops.told(run_id):
                    self.stops.still_running(run_id)
                else:
                    self.stops.stop(run_id, "cancel")
            elif self.inputs.behind(run_id, held[run_id].inputs):
                self.inputs.fetch(run_id)
        self.following.storage_down(False)
        self._renewal.notify()

    def _renewal_failed(self, exc: PyMongoError, ok_at: float) -> None:
        """A lease renewal failed: listeners are told at once when the database cannot be reached, and once no
        renewal has succeeded for a whole lease, this worker's runs are stopped (others may hold them now)."""
        log.warning("run engine: database unreachable (%s)", exc)
        if isinstance(exc, ConnectionFailure):
            self.following.storage_down()  # their listeners' streams end now, with an error
        if time.monotonic() - ok_at > self.lease:
            for run_id in self.held.ids():  # our leases have run out: others may hold these runs now
                self.stops.stop(run_id, "lost")
        self._renewal.notify()
