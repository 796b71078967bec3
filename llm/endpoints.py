"""When an endpoint may be called: after a 429, not before the time it asked for (`Retry-After`).

Every call of the model layer asks its endpoint (`endpoint(base_url)`) before it is sent (`BoundedChatOpenAI`): a
rate-limited endpoint that said when to come back is not called again before then, by any run of this worker, so
the retry of the call that was refused (a node's `RetryPolicy`) does not spend itself half a second later. The wait
is bounded by `MAX_RETRY_AFTER_SECONDS`, and comes before the call's own deadline starts.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from dataclasses import dataclass
from typing import Any

from parley.core.limits import MAX_RETRY_AFTER_SECONDS


@dataclass
class Endpoint:
    """One endpoint's state in this worker: the monotonic time before which it is not called."""

    not_before: float = 0.0

    async def ready(self) -> None:
        """Return once the endpoint may be called."""
        while (wait := self.not_before - time.monotonic()) > 0:
            await asyncio.sleep(wait)

    def throttled(self, seconds: float | None) -> None:
        """Note that the endpoint asked not to be called for `seconds` (at most `MAX_RETRY_AFTER_SECONDS`)."""
        if seconds is not None and seconds > 0:
            self.not_before = max(self.not_before, time.monotonic() + min(seconds, MAX_RETRY_AFTER_SECONDS))


_ENDPOINTS: dict[str, Endpoint] = {}


def endpoint(base_url: str | None) -> Endpoint:
    """The state of the endpoint at `base_url` (None: the SDK's default, OpenAI's)."""
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
