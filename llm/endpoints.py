"""When an endpoint may be called: after a 429, not before the time it asked for (`Retry-After`); and no more calls
at once than it answers at once (its provider's `max_concurrent`).

Every call of the model layer asks its endpoint (`endpoint(base_url)`) before it is sent (`BoundedChatOpenAI`): a
rate-limited endpoint that said when to come back is not called again before then, by any run of this worker, so
the retry of the call that was refused (a node's `RetryPolicy`) does not spend itself half a second later. The wait
is bounded by `MAX_RETRY_AFTER_SECONDS`, and comes before the call's own deadline starts.

An endpoint that answers one request at a time (the embedded llama.cpp server) holds the others unanswered, and a
call waiting there spends its read timeout on the calls ahead of it: a round table's third seat timed out behind the
first two. So a call beyond the endpoint's capacity waits here instead, in line (first come, first sent), and its
read timeout and deadline start when it is sent. A call that has to wait says so to `QUEUE_WATCH`, where the run
making it listens (`nodes.events.report_queued`). The line is the worker's: every event loop of the process shares
it (the factory's clients are per loop, the endpoint is not).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from parley.core.limits import MAX_RETRY_AFTER_SECONDS


@dataclass(frozen=True)
class Queued:
    """A call that waits for its endpoint before it is sent: its model, and its place in line (1: sent next)."""

    model: str
    position: int


# Who hears that a call made in this context waits for its endpoint (None: nobody): set around a run by whoever
# relays its progress (the run engine), read by the call.
QUEUE_WATCH: ContextVar[Callable[[Queued], None] | None] = ContextVar("parley_queue_watch", default=None)


class _Waiter:
    """A call waiting in an endpoint's line: woken on its own loop when a place is its."""

    __slots__ = ("future", "granted", "limit", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.loop, self.limit, self.granted = loop, limit, False
        self.future: asyncio.Future[None] = loop.create_future()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclass
class Endpoint:
    """One endpoint's state in this worker: the monotonic time before which it is not called, and the calls it is
    answering (`sending`) and those waiting for a place (`slot`)."""

    not_before: float = 0.0
    sending: int = 0
    _line: deque[_Waiter] = field(default_factory=deque, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    async def ready(self) -> None:
        """Return once the endpoint may be called."""
        while (wait := self.not_before - time.monotonic()) > 0:
            await asyncio.sleep(wait)

    def throttled(self, seconds: float | None) -> None:
        """Note that the endpoint asked not to be called for `seconds` (at most `MAX_RETRY_AFTER_SECONDS`)."""
        if seconds is not None and seconds > 0:
            self.not_before = max(self.not_before, time.monotonic() + min(seconds, MAX_RETRY_AFTER_SECONDS))

    @property
    def waiting(self) -> int:
        """Calls waiting in line for a place."""
        return len(self._line)

    @contextlib.asynccontextmanager
    async def slot(self, limit: int | None, *, model: str = "") -> AsyncIterator[None]:
        """Hold a place at the endpoint for the call made inside the block, waiting in line while `limit` calls (the
        provider's `max_concurrent`; None: no limit) are already sent; the place is given back however the block
        ends, cancelled included. A call that waits tells `QUEUE_WATCH` (`Queued`, with `model`)."""
        waiter = None
        with self._lock:
            if limit is None or (not self._line and self.sending < limit):
                self.sending += 1
            else:
                waiter = _Waiter(asyncio.get_running_loop(), limit)
                self._line.append(waiter)
                position = len(self._line)
        if waiter is not None:
            if (watch := QUEUE_WATCH.get()) is not None:
                watch(Queued(model, position))
            try:
                await waiter.future
            except BaseException:
                with self._lock:
                    if waiter.granted:  # woken and cancelled at once: the place was ours, and goes to the next
                        self.sending -= 1
                        self._grant()
                    else:
                        self._line.remove(waiter)
                raise
        try:
            yield
        finally:
            with self._lock:
                self.sending -= 1
                self._grant()

    def _grant(self) -> None:
        """Give the free places to the calls first in line (under the lock), each woken on its own loop; a call whose
        loop has closed is dropped."""
        while self._line and self.sending < self._line[0].limit:
            waiter = self._line.popleft()
            try:
                waiter.loop.call_soon_threadsafe(_wake, waiter.future)
            except RuntimeError:  # its event loop is closed: nobody waits there any more
                continue
            waiter.granted = True
            self.sending += 1


_ENDPOINTS: dict[str, Endpoint] = {}
_REGISTRY = threading.Lock()


def endpoint(base_url: str | None) -> Endpoint:
    """The state of the endpoint at `base_url` (None: the SDK's default, OpenAI's)."""
    with _REGISTRY:
        return _ENDPOINTS.setdefault(base_url or "", Endpoint())


def retry_after(exc: BaseException) -> float | None:
    """The seconds a refused call's response asked the client to wait (`retry-after-ms`, or `Retry-After` in seconds
    or as an HTTP date), or None when it said nothing readable."""
    headers: Any = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return float(ms) / 1000
        value = headers.get("retry-after")
        if value is None:
            return None
        if value.strip().replace(".", "", 1).isdigit():
            return float(value)
        when = email.utils.parsedate_to_datetime(value)
        return when.timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        return None
