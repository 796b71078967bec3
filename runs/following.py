"""Serve a run's record and events to its listeners, on any worker: from memory while this worker executes it
(`LiveRun`), from the database otherwise; and the record of a run that ended here, kept a while for those waiting.

Listeners follow a run from any worker: from memory on the worker executing it, by polling the database elsewhere
(backing off while nothing new comes). When the database fails, listeners' streams end with a `storage_unavailable`
error (docs/operations.md). A follower of a run executing elsewhere reads its events when a change stream says a page
of them was stored (`runs.wakeups.PageWatch`: one stream per worker, open while it has such followers), and every
heartbeat besides; where the database has no change streams (a standalone server, such as the embedded database), it
polls every `PARLEY_RUN_POLL` seconds, doubling up to the heartbeat while none comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from parley.runs.events import TERMINAL, Event, listener_view, storage_failure
from parley.runs.live import LiveRun
from parley.runs.wakeups import PageWatch
from parley.store import runs as store

log = logging.getLogger("parley.runs")


class RunNotFound(LookupError):
    """No such run (in this workspace)."""


class Following:
    """The runs this worker's listeners can follow from memory, the records of those that ended here lately, and
    the streams of every run's events.

    Args:
        db: Parley's database.
        watch: this worker's change stream on the events' pages (`PageWatch`).
        poll: the first interval between two reads of a run executing elsewhere (`PARLEY_RUN_POLL`).
        heartbeat: the longest such interval (`PARLEY_RUN_HEARTBEAT`).
    """

    # Seconds the record of a run that ended here is kept in memory, for those waiting on it (`wait`).
    ENDED_KEPT = 10.0

    def __init__(self, db: AsyncDatabase, *, watch: PageWatch, poll: float, heartbeat: float) -> None:
        self.db, self.watch, self.poll, self.heartbeat = db, watch, poll, heartbeat
        self._live: dict[str, LiveRun] = {}  # run id → its execution here, while it lasts
        self._ended: dict[str, dict] = {}  # run id → its finished record, for `ENDED_KEPT` seconds

    # --- what executes here -------------------------------------------------------------------

    def show(self, live: LiveRun) -> None:
        """Let listeners here follow the run's execution from memory."""
        self._live[live.id] = live

    def hide(self, run_id: str) -> None:
        self._live.pop(run_id, None)

    def live_run(self, run_id: str) -> LiveRun | None:
        return self._live.get(run_id)

    def storage_down(self, down: bool = True) -> None:
        """The database cannot be reached (the listeners of every execution here are told: their streams end), or
        can again (for the executions still going)."""
        for live in self._live.values():
            if down or not live.ended:
                live.storage_down(down)

    def ended(self, record: dict) -> None:
        """Keep the record of a run that ended here, for `ENDED_KEPT` seconds (`wait` reads it)."""
        self._ended[record["_id"]] = record
        asyncio.get_running_loop().call_later(self.ENDED_KEPT, self._ended.pop, record["_id"], None)

    # --- serving ------------------------------------------------------------------------------

    async def get(self, run_id: str, *, workspace: str | None = None) -> dict:
        """The run's record (in `workspace`, when given); `RunNotFound` when there is none."""
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
