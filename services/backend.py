"""What the services work with: the database, the model factory, the deployment settings, the run engine and the
rate limiter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pymongo.asynchronous.database import AsyncDatabase

from parley.core.settings import Settings
from parley.llm.factory import ModelFactory
from parley.runs import RunEngine
from parley.services.errors import RateLimited


class Decision(Protocol):
    allowed: bool
    retry_after: int


class Limiter(Protocol):
    """Rate limits shared by Parley's processes (`api.ratelimit.RateLimiter`)."""

    async def hit(self, rate: str, *keys: str) -> Decision: ...


@dataclass(frozen=True)
class Backend:
    """One process's handles on Parley: `api.main` builds it at start-up, a CLI command for its run.

    `limiter` None: no rate limits (the CLI, a local user's own process).
    """

    db: AsyncDatabase
    factory: ModelFactory
    settings: Settings
    runs: RunEngine
    limiter: Limiter | None = None

    async def admit(self, rate: str, *keys: str, message: str, retry_field: str | None = None) -> None:
        """Count one request against `rate` (`"30/minute"`) for `keys`.

        Raises:
            RateLimited: over the rate; `message` says so (and the body field `retry_field`, when given, the
                seconds to wait, as `Retry-After` does).
        """
        if self.limiter is None:
            return
        decision = await self.limiter.hit(rate, *keys)
        if not decision.allowed:
            extra = {retry_field: decision.retry_after} if retry_field else {}
            raise RateLimited(message, retry_after=decision.retry_after, **extra)
