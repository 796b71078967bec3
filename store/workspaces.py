"""Workspaces: a USD credit balance (panel debates) and a token allowance (round tables).

Every change is one atomic conditional update, so concurrent requests can never take a balance
below zero. Concurrent reads go to the database together, and so do concurrent reservations and refunds of one
workspace (`store.group`):
one update takes the sum of every reservation that came meanwhile when the balance covers it (else each is tried
in turn, as if alone), one update gives back every refund.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase

from parley.core import clock
from parley.store.group import Group


async def get_workspace(db: AsyncDatabase, workspace: str) -> dict:
    """Return the workspace record (an empty one when it was never credited)."""
    return await _reads(db, workspace) or {"_id": workspace, "creditUsd": 0.0, "allowanceTokens": None}


async def _read_together(db: AsyncDatabase, workspaces: list[str]) -> list[dict | None]:
    found = {row["_id"]: row async for row in db.workspaces.find({"_id": {"$in": list(dict.fromkeys(workspaces))}})}
    return [dict(found[w]) if w in found else None for w in workspaces]


# The workspaces concurrent requests read (a default budget, a balance) are read in one command (`store.group`).
_reads: Group[str, dict | None] = Group("read workspaces", send=_read_together)


async def add_credit(db: AsyncDatabase, workspace: str, usd: float) -> float:
    """Add `usd` to the credit balance; return the new balance."""
    if usd <= 0:
        raise ValueError("credit to add must be positive")
    doc = await db.workspaces.find_one_and_update(
        {"_id": workspace},
        {"$inc": {"creditUsd": usd}, "$set": {"updatedAt": clock.now()}},
        upsert=True,
        return_document=ReturnDocument.AFTER,
    )
    return float(doc["creditUsd"])


async def _take(db: AsyncDatabase, workspace: str, usd: float) -> bool:
    """Take `usd` from the balance if it covers it, in one conditional update."""
    result = await db.workspaces.update_one(
        {"_id": workspace, "creditUsd": {"$gte": usd}}, {"$inc": {"creditUsd": -usd}}
    )
    return result.modified_count == 1


def _by_workspace(items: list[tuple[str, float]]) -> dict[str, list[int]]:
    """The indexes of `items` (workspace, amount) by workspace, in order."""
    groups: dict[str, list[int]] = {}
    for i, (workspace, _) in enumerate(items):
        groups.setdefault(workspace, []).append(i)
    return groups


async def _reserve_together(db: AsyncDatabase, items: list[tuple[str, float]]) -> list[bool]:
    taken = [False] * len(items)
    for workspace, indexes in _by_workspace(items).items():
        if len(indexes) > 1 and await _take(db, workspace, sum(items[i][1] for i in indexes)):
            for i in indexes:
                taken[i] = True
            continue
        for i in indexes:  # alone, or the sum is more than the balance: each in turn, first come first served
            taken[i] = await _take(db, workspace, items[i][1])
    return taken


async def _refund_together(db: AsyncDatabase, items: list[tuple[str, float]]) -> list[None]:
    for workspace, indexes in _by_workspace(items).items():
        await db.workspaces.update_one({"_id": workspace}, {"$inc": {"creditUsd": sum(items[i][1] for i in indexes)}})
    return [None] * len(items)


_reservations: Group[tuple[str, float], bool] = Group("reserve credit", send=_reserve_together)
_refunds: Group[tuple[str, float], None] = Group("refund credit", send=_refund_together)


async def reserve_credit(db: AsyncDatabase, workspace: str, usd: float) -> bool:
    """Take `usd` from the balance if it covers it; False (and nothing taken) otherwise."""
    return await _reservations(db, (workspace, usd))


async def settle_credit(db: AsyncDatabase, workspace: str, *, reserved: float, actual: float) -> None:
    """Return the unused part of a reservation; `actual` above `reserved` is charged only as far as the balance allows."""
    refund = reserved - actual
    if refund >= 0:
        if refund > 0:
            await _refunds(db, (workspace, refund))
        return
    extra = -refund
    charged = await db.workspaces.update_one(
        {"_id": workspace, "creditUsd": {"$gte": extra}}, {"$inc": {"creditUsd": -extra}}
    )
    if charged.modified_count == 0:
        await db.workspaces.update_one({"_id": workspace}, {"$set": {"creditUsd": 0.0}})


@asynccontextmanager
async def released_on_failure(db: AsyncDatabase, workspace: str, *, credit: float = 0.0,
                              tokens: int = 0) -> AsyncIterator[None]:
    """Give a reservation back if the block fails: wrap everything between reserving and handing the reservation
    to the run that settles it, so no failure in between (a database refusal, a cancelled request) keeps credit.
    """
    try:
        yield
    except BaseException:
        if credit > 0:
            await settle_credit(db, workspace, reserved=credit, actual=0.0)
        if tokens > 0:
            await settle_allowance(db, workspace, reserved=tokens, actual=0)
        raise


async def set_allowance(db: AsyncDatabase, workspace: str, tokens: int) -> int:
    """Set the token allowance of a workspace."""
    if tokens < 0:
        raise ValueError("allowance must be zero or more tokens")
    await db.workspaces.update_one(
        {"_id": workspace},
        {"$set": {"allowanceTokens": tokens, "updatedAt": clock.now()}, "$setOnInsert": {"creditUsd": 0.0}},
        upsert=True,
    )
    return tokens


async def set_budget(db: AsyncDatabase, workspace: str, budget: dict | None) -> dict | None:
    """Set (None: clear) the workspace's default budget, `{"maxTokens"?, "maxCost"?, "maxSeconds"?}`: the limits
    a run of the workspace gets when its request sets none of its own."""
    change = {"$set": {"budget": budget or None, "updatedAt": clock.now()}}
    await db.workspaces.update_one({"_id": workspace}, {**change, "$setOnInsert": {"creditUsd": 0.0}}, upsert=True)
    return budget or None


async def consume_allowance(db: AsyncDatabase, workspace: str, tokens: int) -> int | None:
    """Take `tokens` from the allowance, never below zero; return what remains (None when unlimited)."""
    ws = await get_workspace(db, workspace)
    if ws.get("allowanceTokens") is None:
        return None
    take = await db.workspaces.update_one(
        {"_id": workspace, "allowanceTokens": {"$gte": tokens}}, {"$inc": {"allowanceTokens": -tokens}}
    )
    if take.modified_count == 0:
        await db.workspaces.update_one({"_id": workspace}, {"$set": {"allowanceTokens": 0}})
    return int((await get_workspace(db, workspace))["allowanceTokens"])


async def reserve_allowance(db: AsyncDatabase, workspace: str, tokens: int) -> bool | None:
    """Take `tokens` from the allowance if it covers them: True; False (nothing taken) if not; None when unlimited."""
    ws = await get_workspace(db, workspace)
    if ws.get("allowanceTokens") is None:
        return None
    taken = await db.workspaces.update_one(
        {"_id": workspace, "allowanceTokens": {"$gte": tokens}}, {"$inc": {"allowanceTokens": -tokens}}
    )
    return taken.modified_count == 1


async def settle_allowance(db: AsyncDatabase, workspace: str, *, reserved: int, actual: int) -> int | None:
    """Return the unused part of a reservation, or charge the excess (never below zero); return what remains."""
    refund = reserved - actual
    if refund >= 0:
        await db.workspaces.update_one({"_id": workspace}, {"$inc": {"allowanceTokens": refund}})
        return int((await get_workspace(db, workspace))["allowanceTokens"])
    return await consume_allowance(db, workspace, -refund)
