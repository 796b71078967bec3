"""Duel debates and their event logs: one `debates` record per debate, one `debate_events` row per SSE event.

A record moves `in_progress` → `completed` or `failed`. `owner` names the process running it
(instance id, host, pid) and `heartbeatAt` says it is still alive, so a restarted Parley can tell
its dead predecessor's debates from those of a live sibling.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError

IN_PROGRESS, COMPLETED, FAILED = "in_progress", "completed", "failed"
DUPLICATE_KEY = 11000


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
    owner: dict,
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
        "owner": owner,
        "streamToken": stream_token,
        "createdAt": at,
        "updatedAt": at,
        "heartbeatAt": at,
    }
    await db.debates.insert_one(record)
    return record


async def set_opponent(db: AsyncDatabase, *, debate_id: str, opponent_profile: dict) -> None:
    at = now()
    await db.debates.update_one(
        {"_id": debate_id}, {"$set": {"opponentProfile": opponent_profile, "updatedAt": at, "heartbeatAt": at}}
    )


async def append_message(db: AsyncDatabase, *, debate_id: str, message: dict) -> None:
    at = now()
    await db.debates.update_one(
        {"_id": debate_id},
        {"$push": {"messages": message}, "$set": {"updatedAt": at, "heartbeatAt": at}},
    )


async def complete_debate(db: AsyncDatabase, *, debate_id: str, synthesis: dict, verdicts: list[dict]) -> None:
    at = now()
    await db.debates.update_one(
        {"_id": debate_id},
        {"$set": {"synthesis": synthesis, "verdicts": verdicts, "status": COMPLETED, "updatedAt": at,
                  "heartbeatAt": at}},
    )


async def fail_debate(db: AsyncDatabase, *, debate_id: str, error: str) -> bool:
    """Mark a debate still `in_progress` as `failed`; False when it had already ended."""
    result = await db.debates.update_one(
        {"_id": debate_id, "status": IN_PROGRESS},
        {"$set": {"status": FAILED, "error": error, "updatedAt": now()}},
    )
    return result.modified_count == 1


async def heartbeat(db: AsyncDatabase, *, debate_ids: list[str]) -> None:
    """Mark the given running debates as still alive."""
    if debate_ids:
        await db.debates.update_many(
            {"_id": {"$in": debate_ids}, "status": IN_PROGRESS}, {"$set": {"heartbeatAt": now()}}
        )


async def append_events(db: AsyncDatabase, *, debate_id: str, events: list[dict]) -> None:
    """Store events (`{"seq", "event", "data"}`) of a debate; ones already stored under their seq are kept as they are.

    Idempotent, so a write interrupted after the server took it can simply be repeated.
    """
    if not events:
        return
    try:
        await db.debate_events.insert_many(
            [{"debateId": debate_id, "seq": e["seq"], "event": e["event"], "data": e["data"]} for e in events],
            ordered=False,
        )
    except BulkWriteError as exc:
        if any(err.get("code") != DUPLICATE_KEY for err in exc.details.get("writeErrors", [])):
            raise


async def events_after(db: AsyncDatabase, *, debate_id: str, after: int) -> list[dict]:
    """The stored events of a debate with `seq` greater than `after`, in order."""
    cursor = db.debate_events.find({"debateId": debate_id, "seq": {"$gt": after}}, {"_id": 0, "debateId": 0})
    return await cursor.sort("seq", ASCENDING).to_list()


async def last_seq(db: AsyncDatabase, *, debate_id: str) -> int:
    """The highest stored event sequence number of a debate (-1 when none)."""
    rows = await db.debate_events.find({"debateId": debate_id}, {"seq": 1}).sort("seq", DESCENDING).limit(1).to_list()
    return rows[0]["seq"] if rows else -1


async def get_debate(db: AsyncDatabase, *, debate_id: str, user: str | None = None,
                     workspace: str | None = None) -> dict | None:
    """The debate `debate_id`, restricted to its owner when `user` and `workspace` are given."""
    query: dict = {"_id": debate_id}
    if user is not None:
        query.update(user=user, workspace=workspace)
    return await db.debates.find_one(query)


def encode_cursor(record: dict) -> str:
    payload = json.dumps([record["createdAt"].isoformat(), record["_id"]])
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """Read a cursor made by `encode_cursor`; ValueError when it is not one."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, debate_id = json.loads(raw)
        return datetime.fromisoformat(created), str(debate_id)
    except (ValueError, TypeError) as exc:
        raise ValueError("cursor is not one this API returned") from exc


async def list_debates(
    db: AsyncDatabase, *, user: str, workspace: str, limit: int, cursor: str | None = None, page: int | None = None
) -> tuple[list[dict], str | None, int]:
    """A user's debates, newest first: one page by `cursor` (or 1-based `page`), the next cursor, and the total."""
    owner = {"user": user, "workspace": workspace}
    query: dict = dict(owner)
    if cursor:
        created, debate_id = decode_cursor(cursor)
        query["$or"] = [{"createdAt": {"$lt": created}}, {"createdAt": created, "_id": {"$lt": debate_id}}]
    found = db.debates.find(query, {"streamToken": 0}).sort([("createdAt", DESCENDING), ("_id", DESCENDING)])
    if page and not cursor:
        found = found.skip((page - 1) * limit)
    rows = await found.limit(limit + 1).to_list()
    total = await db.debates.count_documents(owner)
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, encode_cursor(rows[-1]) if more and rows else None, total


async def mark_stale_failed(
    db: AsyncDatabase, *, stale_before: datetime, dead_owners: list[dict] | None = None, error: str
) -> list[str]:
    """Mark `in_progress` debates whose process is gone as `failed`; return their ids.

    Gone means: no heartbeat since `stale_before`, or owned by one of `dead_owners` (each a
    partial match on `owner`, e.g. a host and pid known to be dead).
    """
    conditions: list[dict] = [{"heartbeatAt": {"$lt": stale_before}}]
    conditions += [{f"owner.{key}": value for key, value in owner.items()} for owner in dead_owners or []]
    stale = await db.debates.find({"status": IN_PROGRESS, "$or": conditions}, {"_id": 1}).to_list()
    return [row["_id"] for row in stale if await fail_debate(db, debate_id=row["_id"], error=error)]


async def in_progress_owners(db: AsyncDatabase) -> list[dict]:
    """The distinct owners of debates still `in_progress`."""
    rows = await db.debates.find({"status": IN_PROGRESS}, {"owner": 1}).to_list()
    seen, owners = set(), []
    for row in rows:
        owner = row.get("owner") or {}
        key = (owner.get("instance"), owner.get("host"), owner.get("pid"))
        if key not in seen:
            seen.add(key)
            owners.append(owner)
    return owners


def stale_cutoff(seconds: float) -> datetime:
    return now() - timedelta(seconds=seconds)
