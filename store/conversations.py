"""Conversations (round tables), their messages, their debate-round records and idempotent message runs.

What a title and a question may hold is checked here too (`ConversationCreate`, `MessageCreate`), so
the HTTP API and the CLI refuse the same things.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from parley.core import clock
from parley.store.agents import new_id
from parley.store.cursors import encode_cursor, older_than

INDEXES: list[tuple[str, list[tuple[str, int]], dict]] = [
    ("conversations", [("workspace", 1), ("createdAt", -1), ("_id", -1)], {}),
    ("conversations", [("deleting", 1)], {}),
    ("conversation_messages", [("conversationId", 1), ("seq", 1)], {}),
    ("debate_rounds", [("conversationId", 1), ("exchange", 1), ("roundNumber", 1)], {}),
    ("idempotency_keys", [("createdAt", 1)], {}),
]


MAX_TITLE_CHARS = 500
# Declared in the JSON Schema only: stripping leaves nothing of a blank string, which the length check refuses.
NOT_BLANK = Field(json_schema_extra={"pattern": r"\S"})


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TITLE_CHARS), NOT_BLANK]


class MessageCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=20_000), NOT_BLANK]


def public_conversation(doc: dict) -> dict:
    return {
        "id": doc["_id"],
        "userId": doc["user"],
        "workspaceId": doc["workspace"],
        "title": doc["title"],
        "createdAt": clock.iso(doc["createdAt"]),
        "tokensUsed": int(doc.get("tokensUsed", 0)),
        "shareToken": doc.get("shareToken"),
        "isPublic": bool(doc.get("isPublic", False)),
        "goalOverride": doc.get("goalOverride"),
    }


def public_message(doc: dict) -> dict:
    out = {"id": doc["_id"], "senderType": doc["senderType"], "content": doc["content"]}
    for key in ("agentId", "agentName", "agentRole"):
        if doc.get(key) is not None:
            out[key] = doc[key]
    if doc.get("metadata") is not None:
        out["metadata"] = doc["metadata"]
    out["createdAt"] = clock.iso(doc["createdAt"])
    return out


def public_round(doc: dict) -> dict:
    """A round record as the API shows it; only debate rounds (1 and up) carry a `convergenceScore`."""
    out = {"id": doc["_id"], "exchange": doc["exchange"], "roundNumber": doc["roundNumber"]}
    if doc["roundNumber"] >= 1:
        out["convergenceScore"] = float(doc["convergenceScore"])
    return {**out, "usage": doc.get("usage", {}), "createdAt": clock.iso(doc["createdAt"])}


def public_rounds(docs: list[dict]) -> dict[str, list[dict]]:
    """Split round records the round-table contract's way: `debates` are the scored debate rounds, as its
    clients expect (`d.convergenceScore.toFixed(2)`); round 0 (initial positions, nothing to score yet) goes
    to `initialRounds`."""
    return {
        "debates": [public_round(d) for d in docs if d["roundNumber"] >= 1],
        "initialRounds": [public_round(d) for d in docs if d["roundNumber"] == 0],
    }


async def create_conversation(db: AsyncDatabase, *, workspace: str, user: str, title: str) -> dict:
    doc = {
        "_id": new_id("conv"), "workspace": workspace, "user": user, "title": title,
        "createdAt": clock.now(), "tokensUsed": 0, "shareToken": None, "isPublic": False,
        "goalOverride": None, "messageSeq": 0, "exchanges": 0,
    }
    await db.conversations.insert_one(doc)
    return doc


async def get_conversation(db: AsyncDatabase, *, workspace: str, conversation_id: str) -> dict | None:
    return await db.conversations.find_one(
        {"_id": conversation_id, "workspace": workspace, "deleting": {"$ne": True}}
    )


async def list_conversations(
    db: AsyncDatabase, *, workspace: str, limit: int | None = None, cursor: str | None = None
) -> tuple[list[dict], str | None]:
    """Conversations newest first, each with `messageCount`; with `limit`, also the next page's cursor."""
    query: dict[str, Any] = {"workspace": workspace, "deleting": {"$ne": True}}
    if cursor:
        query.update(older_than(cursor))
    found = db.conversations.find(query).sort([("createdAt", -1), ("_id", -1)])
    if limit:
        found = found.limit(limit + 1)
    docs = await found.to_list(None)
    next_cursor = None
    if limit and len(docs) > limit:
        docs = docs[:limit]
        next_cursor = encode_cursor(docs[-1])
    counts: dict[str, int] = {}
    if docs:
        pipeline = [
            {"$match": {"conversationId": {"$in": [d["_id"] for d in docs]}}},
            {"$group": {"_id": "$conversationId", "n": {"$sum": 1}}},
        ]
        async for row in await db.conversation_messages.aggregate(pipeline):
            counts[row["_id"]] = int(row["n"])
    for doc in docs:
        doc["messageCount"] = counts.get(doc["_id"], 0)
    return docs, next_cursor


async def reserve_seq(db: AsyncDatabase, *, conversation_id: str, count: int) -> int | None:
    """Reserve `count` message sequence numbers; return the first, or None if the conversation is gone."""
    doc = await db.conversations.find_one_and_update(
        {"_id": conversation_id, "deleting": {"$ne": True}},
        {"$inc": {"messageSeq": count}},
        return_document=ReturnDocument.AFTER,
    )
    return None if doc is None else int(doc["messageSeq"]) - count + 1


async def start_exchange(db: AsyncDatabase, *, conversation: dict, content: str) -> tuple[int, dict]:
    """Store the user's question as a new exchange; return the exchange number and the message."""
    doc = await db.conversations.find_one_and_update(
        {"_id": conversation["_id"]}, {"$inc": {"exchanges": 1, "messageSeq": 1}},
        return_document=ReturnDocument.AFTER,
    )
    exchange = int(doc["exchanges"])
    message = {
        "_id": new_id("msg"), "conversationId": conversation["_id"], "workspace": conversation["workspace"],
        "seq": int(doc["messageSeq"]), "exchange": exchange, "senderType": "user", "content": content,
        "createdAt": clock.now(),
    }
    await db.conversation_messages.insert_one(message)
    return exchange, message


async def add_messages(db: AsyncDatabase, *, conversation: dict, messages: list[dict]) -> bool:
    """Append messages (without ids or sequence numbers) in order; False if the conversation was deleted."""
    first = await reserve_seq(db, conversation_id=conversation["_id"], count=len(messages))
    if first is None:
        return False
    now = clock.now()
    rows = [
        {"_id": new_id("msg"), "conversationId": conversation["_id"], "workspace": conversation["workspace"],
         "seq": first + i, "createdAt": now, **m}
        for i, m in enumerate(messages)
    ]
    if rows:
        await db.conversation_messages.insert_many(rows)
    return True


async def list_messages(db: AsyncDatabase, *, conversation_id: str) -> list[dict]:
    return await db.conversation_messages.find({"conversationId": conversation_id}).sort("seq", 1).to_list(None)


async def conclusions(db: AsyncDatabase, *, conversation_id: str) -> list[dict]:
    """The conversation's concluded questions, oldest first: each `{exchange, question}` with its synthesis's fields
    (a question without a synthesis, failed or still being debated, is left out)."""
    rows = await db.conversation_messages.find(
        {"conversationId": conversation_id, "senderType": {"$in": ["user", "synthesizer"]}},
        {"exchange": 1, "senderType": 1, "content": 1, "metadata": 1}).sort("seq", 1).to_list(None)
    questions = {r.get("exchange", 0): r["content"] for r in rows if r["senderType"] == "user"}
    return [{**(r.get("metadata") or {}), "exchange": r.get("exchange", 0),
             "question": questions.get(r.get("exchange", 0), "")} for r in rows if r["senderType"] == "synthesizer"]


async def add_rounds(db: AsyncDatabase, *, conversation_id: str, exchange: int, rounds: list[dict]) -> None:
    now = clock.now()
    rows = [
        {"_id": new_id("rnd"), "conversationId": conversation_id, "exchange": exchange,
         "roundNumber": r["roundNumber"], "convergenceScore": r.get("convergenceScore"),
         "usage": r.get("usage", {}), "createdAt": now}
        for r in rounds
    ]
    if rows:
        await db.debate_rounds.insert_many(rows)


async def list_rounds(db: AsyncDatabase, *, conversation_id: str) -> list[dict]:
    return await db.debate_rounds.find({"conversationId": conversation_id}).sort(
        [("exchange", 1), ("roundNumber", 1)]
    ).to_list(None)


async def add_tokens(db: AsyncDatabase, *, conversation_id: str, tokens: int) -> None:
    await db.conversations.update_one({"_id": conversation_id}, {"$inc": {"tokensUsed": tokens}})


async def delete_conversation(db: AsyncDatabase, *, workspace: str, conversation_id: str) -> bool:
    """Delete a conversation with its messages and round records; False when it does not exist.

    The row is first marked `deleting` (so it disappears from reads at once), then its children go,
    then the row: a crash midway leaves a marked row that `finish_deletions` completes at start-up.
    """
    marked = await db.conversations.update_one(
        {"_id": conversation_id, "workspace": workspace, "deleting": {"$ne": True}}, {"$set": {"deleting": True}}
    )
    if marked.matched_count == 0:
        return False
    await _purge(db, conversation_id)
    return True


async def _purge(db: AsyncDatabase, conversation_id: str) -> None:
    await db.conversation_messages.delete_many({"conversationId": conversation_id})
    await db.debate_rounds.delete_many({"conversationId": conversation_id})
    await db.idempotency_keys.delete_many({"conversationId": conversation_id})
    await db.conversations.delete_one({"_id": conversation_id})


async def finish_deletions(db: AsyncDatabase) -> int:
    """Complete deletions a stopped process left halfway; return how many."""
    pending = await db.conversations.find({"deleting": True}, {"_id": 1}).to_list(None)
    for doc in pending:
        await _purge(db, doc["_id"])
    return len(pending)


# --- idempotency ----------------------------------------------------------------------------
# A key is the caller's own: the same Idempotency-Key sent by two users of a workspace names two requests.


def _key_id(workspace: str, user: str, conversation_id: str, key: str) -> str:
    return f"{workspace}:{user}:{conversation_id}:{key}"


async def claim_idempotency_key(
    db: AsyncDatabase, *, workspace: str, user: str, conversation_id: str, key: str, fingerprint: str
) -> dict | None:
    """Claim `key` for a new run; None when claimed now, else the existing record (running or done)."""
    record = {
        "_id": _key_id(workspace, user, conversation_id, key), "conversationId": conversation_id, "status": "running",
        "fingerprint": fingerprint, "result": None, "createdAt": clock.now(),
    }
    try:
        await db.idempotency_keys.insert_one(record)
        return None
    except DuplicateKeyError:
        return await db.idempotency_keys.find_one({"_id": record["_id"]})


async def get_idempotency_record(db: AsyncDatabase, *, workspace: str, user: str, conversation_id: str, key: str) -> dict | None:
    return await db.idempotency_keys.find_one({"_id": _key_id(workspace, user, conversation_id, key)})


async def complete_idempotency_key(
    db: AsyncDatabase, *, workspace: str, user: str, conversation_id: str, key: str, result: dict
) -> None:
    await db.idempotency_keys.update_one(
        {"_id": _key_id(workspace, user, conversation_id, key)},
        {"$set": {"status": "done", "result": result, "completedAt": clock.now()}},
    )


async def set_idempotency_run(
    db: AsyncDatabase, *, workspace: str, user: str, conversation_id: str, key: str, run_id: str
) -> None:
    """Note the run a key started, so a retry can follow it."""
    await db.idempotency_keys.update_one({"_id": _key_id(workspace, user, conversation_id, key)}, {"$set": {"runId": run_id}})


async def release_idempotency_key(db: AsyncDatabase, *, workspace: str, user: str, conversation_id: str, key: str) -> None:
    """Forget a key whose run failed, so a retry runs the debate again."""
    await db.idempotency_keys.delete_one({"_id": _key_id(workspace, user, conversation_id, key), "status": "running"})


async def release_stale_keys(db: AsyncDatabase, *, older_than: datetime) -> int:
    """Release keys claimed before `older_than` whose run never started (their process stopped while setting
    it up); a key whose run started follows that run, which is resumed wherever it stopped."""
    result = await db.idempotency_keys.delete_many(
        {"status": "running", "runId": None, "createdAt": {"$lt": older_than}}
    )
    return result.deleted_count
