"""Run a command's debate, panel, round table or workflow as the API does: through the run engine, started by the
route's own service function, so that it is checked, stored, billed to its workspace and listed in History
(`GET /v1/runs`); the command renders the wire events the API streams.

`run_here` gives a command's coroutine a `Backend` whose engine executes the runs it starts; `follow_run` yields a
run's events, asking the person at the terminal whenever the run waits for them; `failure_of` reads a failed run's
message from its last event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from parley import store
from parley.cli.common import CLI_USER, CLI_WORKSPACE
from parley.core.settings import get_settings
from parley.llm.factory import ModelFactory
from parley.runs import RunEngine
from parley.runs.checkpoints import expire_after, mongodb_saver
from parley.services.access import Principal
from parley.services.backend import Backend
from parley.services.engine import ParleyRunEngine

T = TypeVar("T")
WireEvent = tuple[str, dict[str, Any]]

# A command acts as a key of its user with every mode's scope (it is the local user's own process).
CLI_SCOPES = frozenset({"debate", "chat", "conversations", "workflows"})


class RunFailed(RuntimeError):
    """The run ended with `error` or `cancelled` (the message is the run's), or its events stopped without `done`."""


def principal(user: str = CLI_USER, workspace: str = CLI_WORKSPACE) -> Principal:
    """Who a command's runs are for: `user` in `workspace` (by default the first key's, so History lists them)."""
    return Principal(key_id="cli", user=user, workspace=workspace, scopes=CLI_SCOPES)


def failure_of(event: str, data: dict[str, Any]) -> RunFailed | None:
    """The failure an `error` or `cancelled` event tells, whatever the mode's payload (`{message}`, `{error: text}`,
    `{error: {message}}`); None for any other event."""
    if event not in ("error", "cancelled"):
        return None
    error = data.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    return RunFailed(message or data.get("message") or f"the run ended: {event}")


def _where(waiting: dict[str, Any]) -> str:
    """Where a waiting run stands, in words: `after turn 2`, `after round 1`, `at node review`."""
    at, position = waiting.get("at"), waiting.get("position")
    if at in ("after_turn", "after_round"):
        return f"{at.replace('_', ' ')} {position}"
    return f"at node {at}"


async def follow_run(engine: RunEngine, run_id: str, *, user: str,
                     ask: Callable[[str], dict[str, str]] | None = None) -> AsyncIterator[WireEvent]:
    """The run's events as `(event, data)`, until its last. Each time it waits for a person, `ask(where)` (run off the
    loop) gives the input sent to it (`{"action", "content"?}`, as `POST /v1/runs/{id}/input` takes it)."""
    async for batch in engine.follow(run_id):
        for event in batch:
            yield event.event, event.data
            if event.event == "waiting" and ask is not None:
                reply = await asyncio.to_thread(ask, _where(event.data))
                await engine.steer(run_id, user=user, **reply)


def run_here(uri: str, factory: ModelFactory, go: Callable[[Backend], Awaitable[T]]) -> T:
    """Run `go(backend)` to its end on the database at `uri` and return what it returns.

    The backend's run engine is a worker for the runs this process starts (`takes_over=False`: it resumes no one
    else's); a run still going when `go` stops (the command was interrupted) is handed over, and a server's worker
    on the same database resumes it. No rate limits apply (the local user's own process).
    """
    settings = get_settings()

    async def main() -> T:
        client, db = store.connect(uri, settings.mongodb_db)
        saver = mongodb_saver(uri, settings.mongodb_db, expire_after=expire_after(settings))
        engine = ParleyRunEngine(db, saver=saver, factory=factory, settings=settings, uri=uri, takes_over=False)
        try:
            await store.ensure_indexes(db)
            await engine.start()
            return await go(Backend(db=db, factory=factory, settings=settings, runs=engine))
        finally:
            await engine.stop()
            await saver.aclose()
            await client.close()

    return asyncio.run(main())
