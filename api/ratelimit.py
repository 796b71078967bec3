"""Rate limits whose counters live in MongoDB, so several Parley processes share them.

Uses the `limits` library's moving-window strategy (the fixed-window one relies on racing upserts,
which the embedded server may answer with `null`).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from limits import parse
from limits.storage import MongoDBStorage
from limits.strategies import MovingWindowRateLimiter

from parley.core.metrics import record_rate_limited
from parley.store.monitor import LISTENER


@dataclass(frozen=True)
class RateDecision:
    """Whether a hit was allowed and, if not, how many seconds until it would be."""

    allowed: bool
    retry_after: int = 0


class RateLimiter:
    """Moving-window limits keyed by any identifiers (route, user, IP, key)."""

    def __init__(self, uri: str, db_name: str) -> None:
        self._uri, self._db_name = uri, db_name
        self._storage: MongoDBStorage | None = None
        self._limiter: MovingWindowRateLimiter | None = None

    def open(self) -> None:
        """Connect and create the counters' indexes now (blocking; call it from a thread at start-up).

        `limits` would otherwise create them on the first hit, racing whatever else the database is doing
        then: the embedded server has been seen to stop answering writes when an index build met a burst of
        run writes."""
        self._ensure()
        assert self._storage is not None
        self._storage.storage  # noqa: B018 - the property connects and creates the indexes

    def _ensure(self) -> MovingWindowRateLimiter:
        # Built when opened or on first use: limits' storage connects (and creates its indexes) even from
        # __del__, so one that was never used must never exist.
        if self._limiter is None:
            self._storage = MongoDBStorage(
                self._uri,
                database_name=self._db_name,
                counter_collection_name="ratelimit_counters",
                window_collection_name="ratelimit_windows",
                event_listeners=[LISTENER],  # passed to its MongoClient: its commands are counted
            )
            self._limiter = MovingWindowRateLimiter(self._storage)
        return self._limiter

    async def hit(self, limit: str, *identifiers: str) -> RateDecision:
        """Count one hit against `limit` (e.g. `"8/minute"`) for `identifiers`, the first naming the route
        (it labels the refusals metric)."""
        item = parse(limit)
        # limits' MongoDB storage is pymongo's synchronous client; keep it off the event loop.
        limiter = await asyncio.to_thread(self._ensure)
        allowed = await asyncio.to_thread(limiter.hit, item, *identifiers)
        if allowed:
            return RateDecision(True)
        record_rate_limited(identifiers[0] if identifiers else "unknown")
        stats = await asyncio.to_thread(limiter.get_window_stats, item, *identifiers)
        return RateDecision(False, max(1, math.ceil(stats.reset_time - time.time())))

    def close(self) -> None:
        if self._storage is not None:
            self._storage.storage.close()
