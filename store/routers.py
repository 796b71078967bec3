"""Routers: a workspace's named fallback lists of models, with their debate settings."""

from __future__ import annotations

from typing import Any

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from parley.core import clock
from parley.store import tools as tool_store


def _public(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    if doc is None:
        return None
    doc = dict(doc)
    doc.pop("_id", None)
    return doc


async def insert_router(db: AsyncDatabase, *, workspace: str, router: dict[str, Any]) -> dict[str, Any] | None:
    """Store a new router (`router["id"]` unique in the workspace); None when that id is taken."""
    now = clock.now()
    doc = {**router, "workspace": workspace, "createdAt": now, "updatedAt": now}
    try:
        await db.routers.insert_one(doc)
    except DuplicateKeyError:
        return None
    return _public(doc)


async def get_router(db: AsyncDatabase, *, workspace: str, router_id: str) -> dict[str, Any] | None:
    return _public(await db.routers.find_one({"workspace": workspace, "id": router_id}))


async def list_routers(db: AsyncDatabase, *, workspace: str, limit: int = 0) -> list[dict[str, Any]]:
    """A workspace's routers by id (the first `limit`; 0: all)."""
    cursor = db.routers.find({"workspace": workspace}).sort("id", 1).limit(limit)
    return [_public(doc) async for doc in cursor]


async def count_routers(db: AsyncDatabase, *, workspace: str) -> int:
    return await db.routers.count_documents({"workspace": workspace})


async def update_router(
    db: AsyncDatabase, *, workspace: str, router_id: str, changes: dict[str, Any]
) -> dict[str, Any] | None:
    """Apply `changes` to a router; None when it does not exist."""
    doc = await db.routers.find_one_and_update(
        {"workspace": workspace, "id": router_id},
        {"$set": {**changes, "updatedAt": clock.now()}},
        return_document=ReturnDocument.AFTER,
    )
    return _public(doc)


async def delete_router(db: AsyncDatabase, *, workspace: str, router_id: str) -> bool:
    """Delete a router with its panelists' tool grant (a router created again under its id starts with none)."""
    result = await db.routers.delete_one({"workspace": workspace, "id": router_id})
    if result.deleted_count == 0:
        return False
    await tool_store.delete_grants(db, workspace=workspace, subject_prefix=f"router:{router_id}")
    return True
