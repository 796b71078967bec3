"""Hold the runs this worker executes, and take over those other workers left: the lease thread (`LeaseKeeper`)
and the take-over loop (`TakeOvers`).

A run is leased to the worker executing it; a thread of its own renews its leases every heartbeat (a busy event loop
does not delay it); when a worker dies its leases expire and another worker claims each run and resumes it from its
last checkpoint (`runs.resume`).

What a worker asks of the database on its own, whatever its runs do: every heartbeat while it executes runs, one
`update` and one `find` on `runs` (`store.runs.renew_leases`: the leases it holds, and the cancels asked of them);
nothing while it holds none. For take-overs (`TakeOvers`) one indexed `find` of the first lease to end among runs
other workers hold, again when that lease would end (at most a lease later), and a claim only when a holder is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pymongo import MongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from parley.runs.held import HeldRuns, Holding
from parley.store import runs as store
from parley.store.monitor import LISTENER

log = logging.getLogger("parley.runs")


class LeaseKeeper:
    """Renew the leases of the runs a worker executes, from a thread of its own, so that a busy (or blocked)
    event loop never lets them expire while the worker lives.

    Every `heartbeat` seconds, while the worker executes runs, one `find` on a synchronous client of its own
    (`store.runs.renew_leases`): which of them it still holds, which someone asked to cancel, and how many inputs
    each was sent; and, before it, one `update` extending the leases that end within `RENEWED_WITHIN` heartbeats
    (a run of a second or two, most panel requests, is never renewed: the lease it started with outlives it). The
    thread reads the runs through `held` (a snapshot `HeldRuns` takes under its lock) and touches nothing else of
    the engine: each answer is handed to the event loop (`loop.call_soon_threadsafe`), to `renewed(sent, held)`
    or, when the database failed, `failed(exc, ok_at)` (`ok_at`: the monotonic time of the last renewal that
    succeeded). Its client gives up on a dead database within `min(3, lease / 2)` seconds (server selection,
    connection) and on a reply after a lease, so `stop` never waits long.
    """

    # A lease is extended once no more than this many heartbeats of it are left: with the defaults (a 5 s lease, a
    # 1 s heartbeat) every other heartbeat, never with less than 2 s of it to go.
    RENEWED_WITHIN = 3
    # A run's model call starts only while the last renewal that succeeded began less than this many heartbeats ago.
    CALLS_WITHIN = 2

    def __init__(self, uri: str, db_name: str, *, worker: str, lease: float, heartbeat: float,
                 held: Callable[[], dict[str, Holding]],
                 renewed: Callable[[dict[str, Holding], dict[str, store.Held]], None],
                 failed: Callable[[PyMongoError, float], None]) -> None:
        self.uri, self.db_name, self.worker, self.lease, self.heartbeat = uri, db_name, worker, lease, heartbeat
        self.held, self.renewed, self.failed = held, renewed, failed
        self._stopping = threading.Event()
        # When the last renewal that succeeded began, set on the event loop once its answer was applied (the runs it
        # found lost are stopped first): what `holds` reads.
        self.ok_at = time.monotonic()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Start renewing (from the event loop the answers go to)."""
        self._loop = asyncio.get_running_loop()
        self._stopping.clear()
        self.ok_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"run leases of {self.worker}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing; wait for the thread, for at most its client's timeouts (call it off the loop)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=self.lease + 3)
            self._thread = None

    def holds(self) -> bool:
        """Whether this worker's leases are known to hold, for a model call to start: the last renewal that succeeded
        began less than `CALLS_WITHIN` heartbeats ago (no more than one renewal missed since; it left every lease
        at least `RENEWED_WITHIN` heartbeats, so none has ended). A worker cut off from the database thus starts no
        call after two heartbeats, well before another may take its runs over."""
        return time.monotonic() - self.ok_at < min(self.CALLS_WITHIN * self.heartbeat, self.lease)

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
                    self._hand(self._answered, started, None, None)
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
                        self._hand(self._answered, started, sent, held)
                self._stopping.wait(max(0.0, started + self.heartbeat - time.monotonic()))
        finally:
            client.close()

    def _answered(self, started: float, sent: dict[str, Holding] | None, held: dict[str, store.Held] | None) -> None:
        """A renewal's answer, on the loop: applied (`renewed`), then noted as the last that succeeded."""
        if sent is not None and held is not None:
            self.renewed(sent, held)
        self.ok_at = max(self.ok_at, started)

    def _hand(self, callback: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: the worker is gone
            self._loop.call_soon_threadsafe(callback, *args)


class TakeOvers:
    """Take over the runs other workers left: look (one indexed `find`, `store.runs.next_expiring`) at the run whose
    lease ends first among those not executing here, claim it once its holder is gone (`store.runs.claim_expired`)
    and `launch` it, else look again when it could be (at most a lease later: a run started meanwhile cannot be free
    before). The runs this worker executes (`held`) are never claimed, even when their lease has expired (a database
    outage), so nothing runs twice here."""

    def __init__(self, db: AsyncDatabase, *, worker: str, lease: float, heartbeat: float, poll: float,
                 held: HeldRuns, launch: Callable[[dict], None]) -> None:
        self.db, self.worker, self.lease, self.heartbeat, self.poll = db, worker, lease, heartbeat, poll
        self.held, self.launch = held, launch
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="run take-overs")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        while True:
            wait = self.lease
            try:
                while (run := await store.next_expiring(self.db, exclude=self.held.ids())) is not None:
                    left = (store.claimable_at(run, self.lease) - store.now()).total_seconds()
                    if left >= 0:
                        wait = min(self.lease, left + 0.01)
                        break
                    record = await store.claim_expired(self.db, run=run, worker=self.worker,
                                                       lease_seconds=self.lease)
                    if record is None:  # renewed, claimed or ended meanwhile: look again shortly
                        wait = min(self.poll, self.lease)
                        break
                    if record["_id"] not in self.held:
                        self.launch(record)
            except PyMongoError as exc:
                log.warning("run engine: take-overs paused, database unreachable (%s)", exc)
                wait = self.heartbeat
            await asyncio.sleep(wait)
