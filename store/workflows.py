"""Workflows and their runs.

A workflow's document, a run's input and its output are user JSON, whose keys may be ones MongoDB
refuses or treats specially (`$schema`, dotted names), so they are stored as JSON text and decoded here.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from pymongo import DESCENDING
from pymongo.asynchronous.database import AsyncDatabase

from parley.core import clock

_ENCODED = ("spec", "input", "output")


def _encode(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _decode(doc: dict | None) -> dict | None:
    if doc is None:
        return None
    return {k: json.loads(v) if k in _ENCODED and isinstance(v, str) else v for k, v in doc.items()}


async def insert_workflow(db: AsyncDatabase, *, workspace: str, user: str, spec: dict[str, Any]) -> dict:
    """Store a checked workflow document; return the stored record."""
    now = clock.now()
    doc = {
        "_id": "wf_" + uuid.uuid4().hex[:16],
        "workspace": workspace,
        "user": user,
        "name": spec.get("name", ""),
        "description": spec.get("description", ""),
        "version": spec.get("version", 1),
        "spec": _encode(spec),
        "createdAt": now,
        "updatedAt": now,
    }
    await db.workflows.insert_one(doc)
    return _decode(doc)


async def find_workflow(db: AsyncDatabase, *, workspace: str, workflow_id: str) -> dict | None:
    return _decode(await db.workflows.find_one({"_id": workflow_id, "workspace": workspace}))


async def list_workflows(db: AsyncDatabase, *, workspace: str, limit: int = 100) -> list[dict]:
    cursor = db.workflows.find({"workspace": workspace}).sort("createdAt", DESCENDING).limit(limit)
    return [_decode(doc) async for doc in cursor]


async def delete_workflow(db: AsyncDatabase, *, workspace: str, workflow_id: str) -> bool:
    """Delete a workflow (its runs stay, as the record of what was spent); False when there was none."""
    result = await db.workflows.delete_one({"_id": workflow_id, "workspace": workspace})
    return result.deleted_count == 1


def new_run_id() -> str:
    return "wfr_" + uuid.uuid4().hex[:16]


async def insert_run(
    db: AsyncDatabase, *, run_id: str, workspace: str, user: str, workflow_id: str | None, workflow_name: str,
    input: dict[str, Any],
) -> dict:
    """Store a run as `running`; return the record."""
    doc = {
        "_id": run_id,
        "workspace": workspace,
        "user": user,
        "workflowId": workflow_id,
        "workflowName": workflow_name,
        "status": "running",
        "input": _encode(input),
        "output": None,
        "usage": None,
        "error": None,
        "failedNode": None,
        "createdAt": clock.now(),
        "finishedAt": None,
    }
    await db.workflow_runs.insert_one(doc)
    return _decode(doc)


async def finish_run(
    db: AsyncDatabase, *, run_id: str, status: str, output: dict[str, Any] | None, usage: dict[str, Any] | None,
    error: str | None = None, failed_node: str | None = None,
) -> dict | None:
    """Record how a run ended; return the updated record."""
    await db.workflow_runs.update_one(
        {"_id": run_id},
        {"$set": {"status": status, "output": None if output is None else _encode(output), "usage": usage,
                  "error": error, "failedNode": failed_node, "finishedAt": clock.now()}},
    )
    return _decode(await db.workflow_runs.find_one({"_id": run_id}))


async def find_run(db: AsyncDatabase, *, workspace: str, run_id: str) -> dict | None:
    return _decode(await db.workflow_runs.find_one({"_id": run_id, "workspace": workspace}))


async def list_runs(db: AsyncDatabase, *, workspace: str, workflow_id: str, limit: int = 50) -> list[dict]:
    query = {"workspace": workspace, "workflowId": workflow_id}
    cursor = db.workflow_runs.find(query).sort("createdAt", DESCENDING).limit(limit)
    return [_decode(doc) async for doc in cursor]
