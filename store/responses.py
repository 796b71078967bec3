"""Stored responses of the Responses API (`POST /v1/responses` with `store: true`): what a later request needs to
continue the conversation (`previous_response_id`) and what `GET /v1/responses/{id}` echoes, one document each.

    {_id: "resp_…", run, workspace, user, previous, messages, echo, bytes, createdAt, expiresAt}

A response stores what its turn added, never the conversation again: `messages` are its own input (as chat
messages, its instructions left out: they do not carry over), its answer is its run's result (`run`), and what came
before is the response it continued (`previous`). The conversation is put back together by walking that chain
(`conversation`). A response is deleted `RESPONSE_TTL_DAYS` after the last response continuing it was made (a TTL
index; storing a response moves its chain's expiry on; reads skip an expired one the index has not removed yet).

What a workspace's responses hold is counted (`bytes`, the JSON size of a document's messages and echo) in
`stored_bytes` (`{_id: workspace, responses}`), raised with `$inc` before a response is stored, only while the total
stays within the workspace's bound (`reserve`), and lowered when one is deleted. Expiry does not lower it: when it
would refuse, it is counted again from the live documents (`recount`, at most once a minute) before it does.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from parley.core import clock
from parley.core.limits import RESPONSE_TTL_DAYS, STORED_BYTES_RECOUNT_SECONDS

INDEXES: list[tuple[str, list[tuple[str, int]], dict]] = [
    ("responses", [("expiresAt", 1)], {"expireAfterSeconds": 0}),
    ("responses", [("workspace", 1), ("expiresAt", 1)], {}),
]


class ChainBroken(LookupError):
    """A response of the conversation a stored response continues is gone (deleted, or expired): `missing`."""

    def __init__(self, response_id: str, missing: str) -> None:
        super().__init__(f"response '{response_id}' continues response '{missing}', which is gone (deleted, or "
                         f"expired {RESPONSE_TTL_DAYS} days after the conversation was last continued)")
        self.response_id, self.missing = response_id, missing


class TooLong(ValueError):
    """The conversation a stored response continues holds more than one request may (`limit`)."""


def stored_size(messages: list[dict[str, Any]], echo: dict[str, Any]) -> int:
    """The bytes a response's document is counted for: the JSON of its messages and echo (its ids and dates are a
    few dozen bytes more)."""
    return len(json.dumps([messages, echo], ensure_ascii=False, separators=(",", ":"), default=str).encode())


async def reserve(db: AsyncDatabase, *, workspace: str, size: int, limit: int) -> bool:
    """Add `size` bytes to what the workspace's responses hold, if the total stays within `limit`; False (nothing
    added) when it would not, even counted again from the live responses (`recount`, unless the count is younger
    than `STORED_BYTES_RECOUNT_SECONDS`)."""
    for attempt in range(2):
        taken = await db.stored_bytes.update_one({"_id": workspace, "responses": {"$lte": limit - size}},
                                                 {"$inc": {"responses": size}})
        if taken.matched_count:
            return True
        counted = await db.stored_bytes.find_one({"_id": workspace}, projection={"countedAt": 1})
        if attempt or counted and counted.get("countedAt") and (
                clock.now() - counted["countedAt"]).total_seconds() < STORED_BYTES_RECOUNT_SECONDS:
            return False
        await recount(db, workspace=workspace)
    return False


async def release(db: AsyncDatabase, *, workspace: str, size: int) -> None:
    """Take `size` bytes off what the workspace's responses hold (a response deleted, or not stored after all)."""
    await db.stored_bytes.update_one({"_id": workspace}, {"$inc": {"responses": -size}})


async def recount(db: AsyncDatabase, *, workspace: str) -> int:
    """Count again what the workspace's live responses hold (expired ones the counter still holds drop out) and
    store it. A response stored while this counts may be left out: the count is low by at most that much, until
    the next recount."""
    rows = await (await db.responses.aggregate([
        {"$match": {"workspace": workspace, "expiresAt": {"$gt": clock.now()}}},
        {"$group": {"_id": None, "bytes": {"$sum": "$bytes"}}}])).to_list()
    total = int(rows[0]["bytes"]) if rows else 0
    counted = {"$set": {"responses": total, "countedAt": clock.now()}}
    try:
        await db.stored_bytes.update_one({"_id": workspace}, counted, upsert=True)
    except DuplicateKeyError:  # made at the same moment by another recount
        await db.stored_bytes.update_one({"_id": workspace}, counted)
    return total


async def stored_bytes(db: AsyncDatabase, *, workspace: str) -> int:
    """What the workspace's responses hold, as counted (expired ones included until the next recount)."""
    doc = await db.stored_bytes.find_one({"_id": workspace})
    return int(doc["responses"]) if doc else 0


async def add_response(db: AsyncDatabase, *, response_id: str, run_id: str, workspace: str, user: str,
                       previous: str | None, messages: list[dict[str, Any]], echo: dict[str, Any], size: int,
                       chain: list[str]) -> None:
    """Store a response (`size` bytes, `reserve`d already), to be read back and continued until it expires; the
    responses it continues (`chain`) are kept at least as long."""
    at = clock.now()
    expires = at + timedelta(days=RESPONSE_TTL_DAYS)
    await db.responses.insert_one({
        "_id": response_id, "run": run_id, "workspace": workspace, "user": user, "previous": previous,
        "messages": messages, "echo": echo, "bytes": size, "createdAt": at, "expiresAt": expires})
    if chain:
        await db.responses.update_many({"_id": {"$in": chain}, "workspace": workspace},
                                       {"$max": {"expiresAt": expires}})


async def find_response(db: AsyncDatabase, *, response_id: str, workspace: str) -> dict | None:
    """The workspace's stored response `response_id`, None when there is none or it has expired. Who of the
    workspace may see it is its run's rule (`services.runs.visible_run`)."""
    return await db.responses.find_one({"_id": response_id, "workspace": workspace,
                                        "expiresAt": {"$gt": clock.now()}})


async def delete_response(db: AsyncDatabase, *, response_id: str) -> bool:
    """Delete a stored response, its bytes taken off its workspace's count; False when it was gone already."""
    doc = await db.responses.find_one_and_delete({"_id": response_id}, projection={"workspace": 1, "bytes": 1})
    if doc is None:
        return False
    if doc.get("bytes"):
        await release(db, workspace=doc["workspace"], size=doc["bytes"])
    return True


def answer_message(run: dict[str, Any]) -> dict[str, Any]:
    """A completed response's answer, as the chat message the conversation goes on from."""
    answer = dict(run["result"]["choices"][0]["message"])
    answer.pop("refusal", None)
    return answer


async def conversation(db: AsyncDatabase, *, response_id: str, workspace: str, max_messages: int,
                       max_bytes: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The conversation of the stored response `response_id` followed by its answer, put back together from its
    chain (oldest first), and the ids of that chain. Each earlier response is one read; the walk stops once the
    messages pass `max_messages` or their stored bytes `max_bytes`.

    Raises:
        ChainBroken: a response of the chain is gone, or one's run has no answer.
        TooLong: the conversation holds more than `max_messages` messages or `max_bytes` bytes.
    """
    docs: list[dict] = []
    messages = size = 0
    at: str | None = response_id
    while at is not None:
        doc = await db.responses.find_one({"_id": at, "workspace": workspace, "expiresAt": {"$gt": clock.now()}},
                                          projection={"previous": 1, "run": 1, "messages": 1, "bytes": 1})
        if doc is None:
            raise ChainBroken(response_id, at)
        docs.append(doc)
        messages += len(doc["messages"]) + 1
        size += doc.get("bytes", 0)
        if messages > max_messages:
            raise TooLong(f"{messages} messages or more, more than one request may ({max_messages})")
        if size > max_bytes:
            raise TooLong(f"{size:,} bytes or more, more than one may be ({max_bytes:,})")
        # One stored before turns were (no `bytes`) holds its whole conversation: the walk ends there.
        at = doc.get("previous") if "bytes" in doc else None
    docs.reverse()
    runs = {run["_id"]: run async for run in db.runs.find(
        {"_id": {"$in": [doc["run"] for doc in docs]}}, projection={"status": 1, "result.choices": 1})}
    out: list[dict[str, Any]] = []
    for doc in docs:
        run = runs.get(doc["run"])
        if run is None or run.get("status") != "completed":
            raise ChainBroken(response_id, doc["_id"])
        out += [*doc["messages"], answer_message(run)]
    return out, [doc["_id"] for doc in docs]
