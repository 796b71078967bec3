"""Stored responses of the Responses API (`POST /v1/responses` with `store: true`): what a later request needs to
continue the conversation (`previous_response_id`) and what `GET /v1/responses/{id}` echoes, one document each.

    {_id: "resp_…", run, workspace, user, previous, messages, echo, createdAt, expiresAt}

`messages` is the conversation the response answered, as chat messages (its instructions left out: they do not
carry over); its answer is its run's result (`run`), read from there. A response is deleted `RESPONSE_TTL_DAYS`
after it was made (a TTL index; reads skip an expired one the index has not removed yet).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from parley.core import clock
from parley.core.limits import RESPONSE_TTL_DAYS

INDEXES: list[tuple[str, list[tuple[str, int]], dict]] = [
    ("responses", [("expiresAt", 1)], {"expireAfterSeconds": 0}),
]


async def add_response(db: AsyncDatabase, *, response_id: str, run_id: str, workspace: str, user: str,
                       previous: str | None, messages: list[dict[str, Any]], echo: dict[str, Any]) -> None:
    """Store a response, to be read back and continued until it expires."""
    at = clock.now()
    await db.responses.insert_one({
        "_id": response_id, "run": run_id, "workspace": workspace, "user": user, "previous": previous,
        "messages": messages, "echo": echo, "createdAt": at, "expiresAt": at + timedelta(days=RESPONSE_TTL_DAYS)})


async def find_response(db: AsyncDatabase, *, response_id: str, workspace: str) -> dict | None:
    """The workspace's stored response `response_id`, None when there is none or it has expired. Who of the
    workspace may see it is its run's rule (`services.runs.visible_run`)."""
    return await db.responses.find_one({"_id": response_id, "workspace": workspace,
                                        "expiresAt": {"$gt": clock.now()}})


async def delete_response(db: AsyncDatabase, *, response_id: str) -> bool:
    """Delete a stored response; False when it was gone already."""
    return (await db.responses.delete_one({"_id": response_id})).deleted_count == 1
