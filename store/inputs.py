"""What people send running runs (`POST /v1/runs/{id}/input`): each input stored before it is acknowledged, in
`run_inputs`, one document each.

    {_id: "in_<ObjectId>", runId, user, content?, action?, at}

A run's inputs are read in the order they were stored: by `at`, then by id (an ObjectId's counter grows within a
worker, so inputs one worker stores in one millisecond keep their order). Which of them a run has consumed is
the run's own business (its graph state, `nodes.steer`): nothing here is updated once stored. A run's inputs are
deleted with it nowhere: they are its audit trail, as its events are.
"""

from __future__ import annotations

from typing import Any

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase

from parley.core import clock

INDEXES: list[tuple[str, list[tuple[str, int]], dict]] = [
    ("run_inputs", [("runId", 1), ("at", 1), ("_id", 1)], {}),
]


def delivered(doc: dict[str, Any]) -> dict[str, Any]:
    """An input as it is delivered to a run (`nodes.inbox`) and shown to clients."""
    row = {"id": doc["_id"], "user": doc.get("user"), "at": clock.iso(doc["at"])}
    for key in ("content", "action"):
        if doc.get(key) is not None:
            row[key] = doc[key]
    return row


async def add_input(db: AsyncDatabase, *, run_id: str, user: str, content: str | None, action: str | None) -> dict:
    """Store one input of a run; return it as delivered."""
    doc = {"_id": f"in_{ObjectId()}", "runId": run_id, "user": user, "at": clock.now()}
    if content is not None:
        doc["content"] = content
    if action is not None:
        doc["action"] = action
    await db.run_inputs.insert_one(doc)
    return delivered(doc)


async def remove_input(db: AsyncDatabase, *, input_id: str) -> None:
    """Take back an input that no run will read (its run ended before the input could be noted)."""
    await db.run_inputs.delete_one({"_id": input_id})


async def list_inputs(db: AsyncDatabase, *, run_id: str) -> list[dict]:
    """Every input of a run, as delivered, in the order they were stored."""
    rows = await db.run_inputs.find({"runId": run_id}).sort([("at", 1), ("_id", 1)]).to_list()
    return [delivered(row) for row in rows]
