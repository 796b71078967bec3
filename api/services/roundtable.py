"""Round-table questions over HTTP: the route's rate limit, and what a question's run answers with.

Seating the table, billing and storing the debate is the run engine's (`runs.modes.roundtable`). A run
outlives its client, so a debate is always stored and billed whole; an idempotent retry follows the run
the first request started (no 409 while it goes on), from any worker, or gets its stored result.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI

from api.deps import Principal
from api.errors import ApiError, run_error
from runs import Event, RunFailure
from runs.modes.roundtable import Asked, ask_table
from store import conversations as conv_store

MESSAGE_RATE = "30/minute"
STALE_KEY_AGE = timedelta(hours=1)  # a key whose run never started this long after it was claimed is freed


async def on_startup(app: FastAPI) -> None:
    """Finish deletions a stopped process left halfway; free keys whose run a stopped process never started."""
    await conv_store.finish_deletions(app.state.db)
    await conv_store.release_stale_keys(app.state.db, older_than=datetime.now(UTC) - STALE_KEY_AGE)


async def submit_message(
    app: FastAPI, principal: Principal, conversation_id: str, content: str, *, idempotency_key: str | None
) -> Asked:
    """Put a question to the table: its run (or, for a retry of a finished one, its result).

    Raises:
        ApiError: 429 over the route's rate, 404 for an unknown conversation, 409 when an Idempotency-Key is
            reused for another question, 500 without agents or allowance.
    """
    decision = await app.state.ratelimiter.hit(MESSAGE_RATE, "conversations:message", principal.key_id)
    if not decision.allowed:
        raise ApiError(
            429, f"Rate limit exceeded: at most {MESSAGE_RATE.replace('/', ' calls per ')} on this route",
            code="rate_limited", headers={"Retry-After": str(decision.retry_after)},
        )
    conversation = await conv_store.get_conversation(app.state.db, workspace=principal.workspace,
                                                     conversation_id=conversation_id)
    if conversation is None:
        raise ApiError(404, "Conversation not found")
    try:
        return await ask_table(app.state.runs, principal.caller, conversation, content,
                               idempotency_key=idempotency_key)
    except RunFailure as exc:
        raise run_error(exc.error) from exc


def replayed(result: dict[str, Any]) -> list[Event]:
    """The events an idempotent retry of a finished debate streams: its synthesis, then `done`."""
    return [Event("synthesis", {"synthesis": result["synthesis"], "totalRounds": result["totalRounds"]}, seq=0),
            Event("done", {**result, "replayed": True}, seq=1)]


async def result_of(app: FastAPI, asked: Asked) -> dict[str, Any]:
    """The response body of the question's debate, once it has ended; its error raised if it failed."""
    if asked.replay is not None:
        return asked.replay
    record = await app.state.runs.wait(asked.run_id)
    if record["status"] == "completed":
        return record["result"]
    raise run_error(record.get("error") or {"message": "The debate was cancelled", "status": 500},
                    run_id=asked.run_id)
