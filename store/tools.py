"""Agents' tools: the MCP servers a workspace's admin registered (`tool_servers`) and the tools granted to each
subject (`tool_grants`: a round-table agent, a duel side, a workflow's node).

A server's secrets (the values of its `env` and `headers`) are stored for Parley to use and never leave this module
in a public view (`public_server`): only their names do.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from parley.core import clock

INDEXES: list[tuple[str, list[tuple[str, int]], dict]] = [
    ("tool_servers", [("workspace", 1), ("name", 1)], {"unique": True}),
    ("tool_grants", [("workspace", 1), ("subject", 1)], {"unique": True}),
]


def public_server(doc: dict[str, Any]) -> dict[str, Any]:
    """A server as the API shows it: the names of its env variables and headers, never their values."""
    out = {
        "id": doc["_id"], "name": doc["name"], "transport": doc["transport"],
        "allowedTools": list(doc.get("allowedTools") or []),
        "tools": [{"name": t["name"], "description": t.get("description", ""), "parameters": t.get("parameters")}
                  for t in doc.get("tools") or []],
        "listedAt": clock.iso(doc.get("listedAt")), "createdAt": clock.iso(doc.get("createdAt")),
        "updatedAt": clock.iso(doc.get("updatedAt")),
    }
    if doc["transport"] == "stdio":
        out |= {"command": doc.get("command"), "args": list(doc.get("args") or []),
                "envNames": sorted(doc.get("env") or {})}
    else:
        out |= {"url": doc.get("url"), "headerNames": sorted(doc.get("headers") or {})}
    return out


async def insert_server(db: AsyncDatabase, *, workspace: str, server: dict[str, Any]) -> dict[str, Any] | None:
    """Store a new server (its `name` unique in the workspace); None when the name is taken."""
    now = clock.now()
    doc = {"_id": "tls_" + uuid.uuid4().hex[:16], **server, "workspace": workspace, "listedAt": now,
           "createdAt": now, "updatedAt": now}
    try:
        await db.tool_servers.insert_one(doc)
    except DuplicateKeyError:
        return None
    return doc


async def count_servers(db: AsyncDatabase, *, workspace: str) -> int:
    return await db.tool_servers.count_documents({"workspace": workspace})


async def list_servers(db: AsyncDatabase, *, workspace: str, names: list[str] | None = None) -> list[dict[str, Any]]:
    """The workspace's servers by name (only those named, when `names` is given), with their secrets."""
    query: dict[str, Any] = {"workspace": workspace}
    if names is not None:
        query["name"] = {"$in": names}
    return await db.tool_servers.find(query).sort("name", 1).to_list(None)


async def get_server(db: AsyncDatabase, *, workspace: str, name: str) -> dict[str, Any] | None:
    return await db.tool_servers.find_one({"workspace": workspace, "name": name})


async def replace_server(db: AsyncDatabase, *, workspace: str, name: str,
                         server: dict[str, Any]) -> dict[str, Any] | None:
    """Replace what server `name` holds (its id and creation time kept); None when there is no such server."""
    now = clock.now()
    return await db.tool_servers.find_one_and_update(
        {"workspace": workspace, "name": name}, {"$set": {**server, "listedAt": now, "updatedAt": now}},
        return_document=ReturnDocument.AFTER)


async def delete_server(db: AsyncDatabase, *, workspace: str, name: str) -> bool:
    """Delete server `name` and take its tools out of every grant of the workspace; False when there is none."""
    if (await db.tool_servers.delete_one({"workspace": workspace, "name": name})).deleted_count == 0:
        return False
    await db.tool_grants.update_many({"workspace": workspace},
                                     {"$pull": {"tools": {"$regex": "^" + re.escape(name) + "/"}}})
    return True


# --- grants ---------------------------------------------------------------------------------


def public_grant(doc: dict[str, Any]) -> dict[str, Any]:
    return {"subject": doc["subject"], "tools": list(doc.get("tools") or []),
            "updatedAt": clock.iso(doc.get("updatedAt"))}


async def set_grant(db: AsyncDatabase, *, workspace: str, subject: str, tools: list[str]) -> dict[str, Any] | None:
    """Grant `subject` exactly `tools` (none: the grant is removed, and None returned)."""
    if not tools:
        await db.tool_grants.delete_one({"workspace": workspace, "subject": subject})
        return None
    return await db.tool_grants.find_one_and_update(
        {"workspace": workspace, "subject": subject},
        {"$set": {"tools": tools, "updatedAt": clock.now()}},
        upsert=True, return_document=ReturnDocument.AFTER)


async def list_grants(db: AsyncDatabase, *, workspace: str, subjects: list[str] | None = None) -> list[dict[str, Any]]:
    """The workspace's grants by subject (only those of `subjects`, when given)."""
    query: dict[str, Any] = {"workspace": workspace}
    if subjects is not None:
        query["subject"] = {"$in": subjects}
    return await db.tool_grants.find(query).sort("subject", 1).to_list(None)


async def grants_of(db: AsyncDatabase, *, workspace: str, subjects: list[str]) -> dict[str, list[str]]:
    """The tools granted to each of `subjects` that has a grant."""
    return {g["subject"]: list(g["tools"]) for g in await list_grants(db, workspace=workspace, subjects=subjects)}


async def delete_grants(db: AsyncDatabase, *, workspace: str, subject_prefix: str) -> int:
    """Remove the grants of a subject that is gone (`agent:<id>`) and of its parts (`workflow:<id>:…`)."""
    query = {"workspace": workspace, "$or": [{"subject": subject_prefix},
                                             {"subject": {"$regex": "^" + re.escape(subject_prefix) + ":"}}]}
    return (await db.tool_grants.delete_many(query)).deleted_count
