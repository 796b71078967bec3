"""Duel debates: one `debates` record per debate, its id also the id of the run that stages it.

A record moves `in_progress` → `completed`, `failed` or `cancelled`. Its events are the run's
(`store.runs`); which worker runs it is the run's business too.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pymongo import DESCENDING
from pymongo.asynchronous.database import AsyncDatabase

from store.cursors import encode_cursor, older_than

IN_PROGRESS, COMPLETED, FAILED, CANCELLED = "in_progress", "completed", "failed", "cancelled"


def now() -> datetime:
    return datetime.now(UTC)


async def create_debate(
    db: AsyncDatabase,
    *,
    debate_id: str,
    user: str,
    workspace: str,
    topic: str,
    user_profile: dict,
    rounds: int,
    model: str,
    stream_token: str,
) -> dict:
    """Store a new debate as `in_progress`; return the record."""
    at = now()
    record = {
        "_id": debate_id,
        "user": user,
        "workspace": workspace,
        "topic": topic,
        "userProfile": user_profile,
        "opponentProfile": None,
        "rounds": rounds,
        "model": model,
        "messages": [],
        "synthesis": None,
        "verdicts": [],
        "status": IN_PROGRESS,
        "error": None,
        "streamToken": stream_token,
        "createdAt": at,
        "updatedAt": at,
    }
    await db.debates.insert_one(record)
    return record


async def set_opponent(db: AsyncDatabase, *, debate_id: str, opponent_profile: dict) -> None:
    await db.debates.update_one(
        {"_id": debate_id}, {"$set": {"opponentProfile": opponent_profile, "updatedAt": now()}}
    )


async def append_message(db: AsyncDatabase, *, debate_id: str, message: dict) -> None:
    await db.debates.update_one({"_id": debate_id}, {"$push": {"messages": message}, "$set": {"updatedAt": now()}})


async def set_messages(db: AsyncDatabase, *, debate_id: str, messages: list[dict]) -> None:
    """Replace the stored messages (a resumed debate goes back to those its checkpoint holds)."""
    await db.debates.update_one({"_id": debate_id}, {"$set": {"messages": messages, "updatedAt": now()}})


async def complete_debate(db: AsyncDatabase, *, debate_id: str, synthesis: dict, verdicts: list[dict],
                          messages: list[dict], stopped_by: str | None = None) -> None:
    """Store a debate's end: its synthesis, both verdicts, its messages, and why it ended early, if it did."""
    early = {"stoppedBy": stopped_by} if stopped_by else {}
    await db.debates.update_one(
        {"_id": debate_id},
        {"$set": {"synthesis": synthesis, "verdicts": verdicts, "messages": messages, "status": COMPLETED,
                  "updatedAt": now(), **early}},
    )


async def end_debate(db: AsyncDatabase, *, debate_id: str, status: str, error: str | None) -> bool:
    """Mark a debate still `in_progress` as `failed` or `cancelled`; False when it had already ended."""
    result = await db.debates.update_one(
        {"_id": debate_id, "status": IN_PROGRESS},
        {"$set": {"status": status, "error": error, "updatedAt": now()}},
    )
    return result.modified_count == 1


async def get_debate(db: AsyncDatabase, *, debate_id: str, visible: dict | None = None) -> dict | None:
    """The debate `debate_id`, restricted by `visible` (`{"workspace", "user"?}`: whose debates the caller sees)
    when given."""
    return await db.debates.find_one({"_id": debate_id, **(visible or {})})


async def list_debates(
    db: AsyncDatabase, *, user: str, workspace: str, limit: int, cursor: str | None = None, page: int | None = None
) -> tuple[list[dict], str | None, int]:
    """A user's debates, newest first: one page by `cursor` (or 1-based `page`), the next cursor, and the total."""
    owner = {"user": user, "workspace": workspace}
    query: dict = dict(owner)
    if cursor:
        query.update(older_than(cursor))
    found = db.debates.find(query, {"streamToken": 0}).sort([("createdAt", DESCENDING), ("_id", DESCENDING)])
    if page and not cursor:
        found = found.skip((page - 1) * limit)
    rows = await found.limit(limit + 1).to_list()
    total = await db.debates.count_documents(owner)
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, encode_cursor(rows[-1]) if more and rows else None, total


async def fail_runless(db: AsyncDatabase, *, error: str) -> int:
    """Mark `in_progress` debates that have no run as `failed`: left by Parley 0.1, whose debates were not runs
    and so cannot be resumed. Return how many."""
    marked = 0
    async for debate in db.debates.find({"status": IN_PROGRESS}, {"_id": 1}):
        if await db.runs.count_documents({"_id": debate["_id"]}, limit=1) == 0:
            marked += await end_debate(db, debate_id=debate["_id"], status=FAILED, error=error)
    return marked
