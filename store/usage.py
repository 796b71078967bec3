"""Usage records: one row per model per request, the basis of billing and reporting."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pymongo.asynchronous.database import AsyncDatabase

from parley.core import clock
from parley.store.group import Group

if TYPE_CHECKING:  # the ledger's type only: store/ imports nothing of Parley's but core/ (tests/test_layers.py)
    from parley.llm.usage import UsageLedger


async def record_usage(
    db: AsyncDatabase, *, workspace: str, user: str, request_id: str, mode: str, ledger: UsageLedger
) -> list[dict]:
    """Store the ledger of one request as per-model usage rows; return them."""
    now = clock.now()
    rows = [
        {
            "workspace": workspace,
            "user": user,
            "requestId": request_id,
            "mode": mode,
            "model": model,
            "inputTokens": int(sums["input_tokens"]),
            "outputTokens": int(sums["output_tokens"]),
            "cachedTokens": int(sums["cached_tokens"]),  # of inputTokens: read from the prompt cache
            "reasoningTokens": int(sums["reasoning_tokens"]),  # of outputTokens: spent reasoning
            "calls": int(sums["calls"]),
            "costUsd": float(sums["cost"]),
            "cachedCostUsd": float(sums["cached_cost"]),
            "reasoningCostUsd": float(sums["reasoning_cost"]),
            "priced": all(r.priced for r in ledger.records if r.model == model),
            **({"toolCalls": ledger.tool_calls_of(model)} if ledger.tool_calls_of(model) else {}),
            "createdAt": now,
        }
        for model, sums in ledger.by_model().items()
    ]
    if rows:
        await _inserts(db, [dict(row) for row in rows])
    return rows


async def _insert_together(db: AsyncDatabase, batches: list[list[dict]]) -> list[None]:
    await db.usage.insert_many([row for rows in batches for row in rows], ordered=False)
    return [None] * len(batches)


# The rows of concurrent requests are stored in one command (`store.group`).
_inserts: Group[list[dict], None] = Group("store usage rows", send=_insert_together)
