"""MCP tasks (`api/mcp_tasks.py`): the runs an MCP client started with a task-augmented `tools/call`, in `mcp_tasks`,
one document each, under the run's id (a task's id is its run's).

    {_id: <run id>, tool, kind, workspace, user, ttlMs, createdAt, expiresAt}

`kind`, `workspace` and `user` are the run's, so the runs' visibility query (`services.access.visible_runs`) selects
tasks as it selects runs. A task is gone once `expiresAt` has passed (the TTL index deletes it soon after; every read
here leaves it out at once); its run is not: runs are kept as they always are.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from parley.core.clock import now
from parley.store.cursors import newest_first

INDEXES: list[tuple[str, list[tuple[str, int]], dict]] = [
    ("mcp_tasks", [("workspace", 1), ("createdAt", -1), ("_id", -1)], {}),
    ("mcp_tasks", [("workspace", 1), ("user", 1), ("createdAt", -1), ("_id", -1)], {}),
    ("mcp_tasks", [("expiresAt", 1)], {"expireAfterSeconds": 0}),
]


async def create_task(db: AsyncDatabase, *, run: dict, tool: str, ttl_ms: int) -> dict:
    """Store the task of the run `run` (its record), started by `tool`, kept `ttl_ms` from now; return it."""
    at = now()
    doc = {"_id": run["_id"], "tool": tool, "kind": run["kind"], "workspace": run["workspace"], "user": run["user"],
           "ttlMs": ttl_ms, "createdAt": at, "expiresAt": at + timedelta(milliseconds=ttl_ms)}
    await db.mcp_tasks.insert_one(doc)
    return doc


async def get_task(db: AsyncDatabase, *, task_id: str, workspace: str) -> dict | None:
    """The task `task_id` of the workspace, None when there is none (or it has expired)."""
    return await db.mcp_tasks.find_one({"_id": task_id, "workspace": workspace, "expiresAt": {"$gt": now()}})


async def list_tasks(db: AsyncDatabase, *, visible: dict[str, Any], limit: int,
                     cursor: str | None = None) -> tuple[list[dict], str | None]:
    """The unexpired tasks matching `visible` (the runs' visibility query), newest first: one page and the cursor of
    the next (None at the end).

    Raises:
        ValueError: `cursor` is not one this list gave.
    """
    return await newest_first(db.mcp_tasks, [visible, {"expiresAt": {"$gt": now()}}], limit=limit, cursor=cursor)


async def runs_of(db: AsyncDatabase, task_ids: list[str]) -> dict[str, dict]:
    """The run records of tasks, by id (without their input and result)."""
    rows = await db.runs.find({"_id": {"$in": task_ids}}, {"input": 0, "result": 0}).to_list()
    return {row["_id"]: row for row in rows}
