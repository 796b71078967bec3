"""Duel debates: one `debates` record per debate, its id also the id of the run that stages it.

A record moves `in_progress` → `completed`, `failed` or `cancelled`. Its events are the run's
(`store.runs`); which worker runs it is the run's business too. While it is in progress its opponent and messages
are written once, as the run's `init` and `message` events (each stored before anyone is shown it): a record read
then gets them from there (`get_debate`, `list_debates`); its end writes them into the record with the rest.
"""

from __future__ import annotations

from pymongo import DESCENDING
from pymongo.asynchronous.database import AsyncDatabase

from parley.core.clock import now
from parley.store.cursors import encode_cursor, older_than
from parley.store.runs import all_events

IN_PROGRESS, COMPLETED, FAILED, CANCELLED = "in_progress", "completed", "failed", "cancelled"


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


async def complete_debate(db: AsyncDatabase, *, debate_id: str, opponent_profile: dict | None, synthesis: dict,
                          verdicts: list[dict], messages: list[dict], stopped_by: str | None = None) -> None:
    """Store a debate's end: its opponent, messages, synthesis, both verdicts, and why it ended early, if it did."""
    early = {"stoppedBy": stopped_by} if stopped_by else {}
    await db.debates.update_one(
        {"_id": debate_id},
        {"$set": {"opponentProfile": opponent_profile, "synthesis": synthesis, "verdicts": verdicts,
                  "messages": messages, "status": COMPLETED, "updatedAt": now(), **early}},
    )


async def end_debate(db: AsyncDatabase, *, debate_id: str, status: str, error: str | None,
                     opponent_profile: dict | None = None, messages: list[dict] | None = None) -> bool:
    """Mark a debate still `in_progress` as `failed` or `cancelled`, with the opponent and messages it had (those
    its record holds when not given); False when it had already ended."""
    told = {"opponentProfile": opponent_profile, "messages": messages} if messages is not None else {}
    result = await db.debates.update_one(
        {"_id": debate_id, "status": IN_PROGRESS},
        {"$set": {"status": status, "error": error, **told, "updatedAt": now()}},
    )
    return result.modified_count == 1


def progress(events: list[dict]) -> tuple[dict | None, list[dict]]:
    """A debate's opponent and messages as its run's events (`store.runs.all_events`) tell them: the last `init`
    that stands, and every `message` and `human` (a person's message, `role: "human"`) that stands, in order."""
    standing = [event for event in events if not event.get("void")]
    opening = [event["data"]["opponentProfile"] for event in standing if event["event"] == "init"]
    said = [event["data"] if event["event"] == "message" else human_message(event["data"])
            for event in standing if event["event"] in ("message", "human")]
    return (opening[-1] if opening else None), said


def human_message(event: dict) -> dict:
    """A person's message as the debate's messages list it, from its `human` event (which adds where it stood)."""
    return {key: event[key] for key in ("role", "senderType", "name", "content", "timestamp", "id")}


async def _with_progress(db: AsyncDatabase, record: dict | None) -> dict | None:
    """`record`, with the opponent and messages of its run's events while it is in progress."""
    if record is None or record.get("status") != IN_PROGRESS:
        return record
    opponent, messages = progress(await all_events(db, run_id=record["_id"]))
    return {**record, "opponentProfile": opponent, "messages": messages}


async def get_debate(db: AsyncDatabase, *, debate_id: str, visible: dict | None = None) -> dict | None:
    """The debate `debate_id`, restricted by `visible` (`{"workspace", "user"?}`: whose debates the caller sees)
    when given."""
    return await _with_progress(db, await db.debates.find_one({"_id": debate_id, **(visible or {})}))


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
    rows = [await _with_progress(db, row) for row in rows[:limit]]
    return rows, encode_cursor(rows[-1]) if more and rows else None, total


async def fail_runless(db: AsyncDatabase, *, error: str) -> int:
    """Mark `in_progress` debates that have no run as `failed`: left by Parley 0.1, whose debates were not runs
    and so cannot be resumed. Return how many."""
    marked = 0
    async for debate in db.debates.find({"status": IN_PROGRESS}, {"_id": 1}):
        if await db.runs.count_documents({"_id": debate["_id"]}, limit=1) == 0:
            marked += await end_debate(db, debate_id=debate["_id"], status=FAILED, error=error)
    return marked
