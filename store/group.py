"""Group commit: what concurrent callers ask of the database, sent together in one command.

The embedded database spends about a millisecond on every command whatever it carries (bench/dbops.py), and a
real MongoDB a round trip: twenty requests that each reserve credit, store a run and settle cost sixty commands
one by one, three when gathered. A `Group` sends a caller's item at once when nothing of its kind is in flight,
else with every item that came while one was (a group commit): no timer, no waiting when the database is idle,
and an item is never sent before it was asked for, so a read sees every write that ended before it was asked.

    _credits = Group("reserve credit", send=_reserve_together)   # send(db, items) -> one result per item
    taken = await _credits(db, (workspace, usd))

`send` gets the items of one round, in order, and returns one result per item: a value, or an exception
that is raised to that item's caller alone. An exception `send` raises reaches every caller of the round.
Rounds are kept apart per database and per event loop.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError, DuplicateKeyError, WriteError

DUPLICATE_KEY = 11000

T = TypeVar("T")
R = TypeVar("R")

Send = Callable[[AsyncDatabase, list[T]], Awaitable[Sequence[Any]]]


class _Round(Generic[T]):
    """The items queued for one database on one loop, and the task sending them."""

    def __init__(self) -> None:
        self.queued: list[tuple[T, asyncio.Future]] = []
        self.sender: asyncio.Task | None = None


class Group(Generic[T, R]):
    """Items of one kind from concurrent callers, sent `send`'s way a round at a time (see the module)."""

    def __init__(self, name: str, send: Send) -> None:
        self.name, self.send = name, send
        # The database handle (by identity: handles of two clients of one server are equal, and a round goes
        # through the client of whoever asked) → event loop → its round; a handle or loop that goes away takes its
        # rounds with it.
        self._rounds: dict[int, weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Round]] = {}

    async def __call__(self, db: AsyncDatabase, item: T) -> R:
        loop = asyncio.get_running_loop()
        rounds = self._rounds.get(id(db))
        if rounds is None:
            rounds = self._rounds[id(db)] = weakref.WeakKeyDictionary()
            weakref.finalize(db, self._rounds.pop, id(db), None)
        state = rounds.get(loop)
        if state is None:
            state = rounds[loop] = _Round()
        done = loop.create_future()
        state.queued.append((item, done))
        if state.sender is None or state.sender.done():
            state.sender = loop.create_task(self._send(db, state), name=self.name)
        return await done

    async def _send(self, db: AsyncDatabase, state: _Round[T]) -> None:
        while state.queued:
            queued, state.queued = state.queued, []
            try:
                results = await self.send(db, [item for item, _ in queued])
            except BaseException as exc:  # noqa: BLE001 (every caller of the round sees it, cancellation too)
                for _, done in queued:
                    if not done.done():
                        done.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            for (_, done), result in zip(queued, results, strict=True):
                if done.done():  # its caller gave up meanwhile
                    continue
                if isinstance(result, BaseException):
                    done.set_exception(result)
                else:
                    done.set_result(result)


async def insert_each(collection: Any, docs: list[dict]) -> list[BaseException | None]:
    """Insert `docs` in one unordered command; one result per document: None, or the error that refused it (a
    `DuplicateKeyError` for a taken `_id`), raised to that document's caller alone by a `Group`."""
    try:
        await collection.insert_many(docs, ordered=False)
    except BulkWriteError as exc:
        errors = {e["index"]: e for e in exc.details.get("writeErrors", [])}
        if not errors:
            raise
        return [None if i not in errors else
                (DuplicateKeyError if errors[i].get("code") == DUPLICATE_KEY else WriteError)(
                    errors[i].get("errmsg", "write refused"), errors[i].get("code"), errors[i])
                for i in range(len(docs))]
    return [None] * len(docs)
