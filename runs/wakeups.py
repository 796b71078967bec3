"""Followers of runs executing on other workers, woken as soon as a page of their events is stored.

One change stream per worker on the run events' pages (`store.runs.watch_pages`), open while a listener here
follows a run from the database; a server that has none (a standalone server, such as the embedded database)
refuses it, and followers poll as before (`runs.following.Following._follow`). A wake-up only ends a follower's
wait early: one that is lost (the stream broke, the database restarted) costs that follower a poll interval, never
an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import OperationFailure, PyMongoError

from parley.store import runs as store

log = logging.getLogger(__name__)

# The server's code for a change stream asked of a server that is not a replica set.
NOT_A_REPLICA_SET = 40573


class PageWatch:
    """Wake this worker's followers of a run when its events are stored (see the module)."""

    def __init__(self, db: AsyncDatabase) -> None:
        self.db = db
        self.unsupported = False  # the server refused a change stream: followers poll
        self._waiting: dict[str, set[asyncio.Event]] = {}  # run id → the wake-ups of its followers here
        self._task: asyncio.Task | None = None
        self._opened: asyncio.Future[bool] | None = None

    @property
    def live(self) -> bool:
        """Whether the change stream is open: a follower may then wait for its wake-up rather than poll."""
        return (self._task is not None and not self._task.done() and self._opened is not None
                and self._opened.done() and self._opened.result())

    @contextlib.asynccontextmanager
    async def subscription(self, run_id: str) -> AsyncIterator[asyncio.Event]:
        """An event set each time a page of `run_id`'s events is stored, from the moment this yields on (the
        stream is open then, unless the server has none or cannot be reached: see `live`)."""
        wake = asyncio.Event()
        self._waiting.setdefault(run_id, set()).add(wake)
        try:
            await self.ensure_open()
            yield wake
        finally:
            waiting = self._waiting.get(run_id, set())
            waiting.discard(wake)
            if not waiting:
                self._waiting.pop(run_id, None)
            if not self._waiting:
                await self.close()

    async def ensure_open(self) -> None:
        """Open the change stream unless it is open, or the server has none (again after it broke)."""
        if self.unsupported or self.live:
            return
        if self._task is None or self._task.done():
            self._opened = asyncio.get_running_loop().create_future()
            self._task = asyncio.create_task(self._watch(self._opened), name="wake followers")
        assert self._opened is not None
        await asyncio.shield(self._opened)

    async def close(self) -> None:
        """Close the change stream (none is open once no one follows a run from the database)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _watch(self, opened: asyncio.Future[bool]) -> None:
        stream: store.PageStream | None = None
        try:
            stream = await store.watch_pages(self.db)
            opened.set_result(True)
            async for run_id in stream:
                for wake in self._waiting.get(run_id, ()):
                    wake.set()
        except Exception as exc:
            if isinstance(exc, OperationFailure) and exc.code == NOT_A_REPLICA_SET:
                self.unsupported = True
                log.info("run engine: the database has no change streams; followers poll it")
            else:  # the followers poll, and the next one to follow a run opens it again
                log.warning("run engine: no change stream of run events (%s); followers poll", exc)
        finally:
            if not opened.done():
                opened.set_result(False)
            if stream is not None:
                with contextlib.suppress(PyMongoError):
                    await stream.aclose()
