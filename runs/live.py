"""One execution's events: numbered, shown at once to this worker's listeners (`LiveRun`) and stored in batches
(`EventWriter`), a record change or a checkpoint save making a batch due at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from parley.llm.usage import UsageRecord
from parley.nodes.events import Origin
from parley.runs.survival import EventBarrier
from parley.runs.events import Event, Signal, listener_view
from parley.runs.modes.base import Emit
from parley.store import runs as store


def origin_row(origin: Origin | None) -> dict | None:
    """How an event's origin (the task that sent it, see `runs.survival`) is stored with it."""
    return None if origin is None else {"task": origin.task, "checkpoints": [list(p) for p in origin.checkpoints]}


def origin_of(row: dict) -> Origin | None:
    """The origin of a stored event (see `origin_row`)."""
    origin = row.get("origin")
    return None if origin is None else Origin(origin["task"], tuple(tuple(p) for p in origin["checkpoints"]))


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
        """Note that the database is unreachable (its listeners' streams end, see `Following.follow`), or back."""
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

    An event is shown at once, unless it (or one before it) carries a change of the mode's records or is `durable`: then
    it is shown once that change and the events up to it are stored (a client that sees a duel's `message` can read it
    back). Events are stored in batches: every `write_after` seconds (the mode's `store_every`), at once when an event
    carries a record change or LangGraph waits to save a task's results (`EventBarrier`), and never more than
    `SHOWN_UNSTORED` events are shown before they are stored. A worker that resumes the run after this one died numbers
    its events from `SHOWN_UNSTORED` past the last stored one, so an id a listener saw here is never given to another
    event, and retracts the ids in between (see `runs.resume`).
    """

    SHOWN_UNSTORED = 256

    def __init__(self, db: AsyncDatabase, live: LiveRun, barrier: EventBarrier, *, write_after: float,
                 lease: int | None = None, on_failure: Callable[[], None] = lambda: None,
                 on_lost: Callable[[str], None] = lambda what: None,
                 on_too_large: Callable[[store.EventTooLarge], None] = lambda exc: None) -> None:
        self.db, self.live, self.barrier, self.on_failure, self.on_lost = db, live, barrier, on_failure, on_lost
        self.lease = lease  # the lease the execution holds: its usage rows are stored with it
        self.on_too_large = on_too_large
        self.write_after = write_after
        self.failure: BaseException | None = None
        self.omitted: list[store.EventTooLarge] = []  # the events stored without their data (`_omit`)
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

    def unstorable(self, last: list[Emit]) -> store.EventTooLarge | None:
        """The first event too large to store (None when every one fits) among those not stored yet and `last`, the
        closing events the run would end with: checked before a run is said to have completed, so that a run whose
        events cannot all be stored ends `failed` instead (`event_too_large`), never `completed` beside an event
        stored without its data (`_omit`)."""
        if self.omitted:
            return self.omitted[0]
        closing = [{"seq": self.next_seq + i, "event": emit.event, "data": emit.data, "origin": None}
                   for i, emit in enumerate(last)]
        return store.oversized_event(self.live.id, self._rows[self._stored:] + closing)

    def abandon(self) -> None:
        self._task.cancel()

    def _done(self, task: asyncio.Task) -> None:
        self.barrier.release()
        if not task.cancelled() and task.exception() is not None:
            self.failure = task.exception()
            if isinstance(self.failure, PyMongoError):  # the run stops now, not at its next step
                self.on_failure()
            elif isinstance(self.failure, store.Fenced):  # another worker took the run over: it stops now too
                self.on_lost("events" if isinstance(self.failure, store.EventConflict) else "usage")

    def _omit(self, exc: store.EventTooLarge) -> None:
        """Keep an event too large to store as its name and size only, and have its run fail (never silently)."""
        for row in self._rows[self._stored:]:
            if row["seq"] == exc.seq:
                row["data"] = {"omitted": f"{exc.size:,} bytes, more than a page of events holds"}
        self.omitted.append(exc)
        self.on_too_large(exc)

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
            try:
                await store.store_batch(self.db, run_id=self.live.id, events=self._rows[self._stored:upto],
                                        usage=usage, lease=self.lease)
            except store.EventTooLarge as exc:  # stored again at once without its data, and the run fails
                for index in changes:  # made already: not again
                    del self._stores[index]
                self._usage = usage + self._usage
                self._omit(exc)
                continue
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
