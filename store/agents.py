"""Agents of a workspace, the documents linked to them and the memories they keep between debates.

What an agent and a document may hold (lengths, document limits) is checked here too, by the models
and `check_document_room`, so the HTTP API and the CLI refuse the same things with the same words.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.json_schema import SkipJsonSchema
from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from parley.core import clock
from parley.core.limits import MAX_MODEL_ID_CHARS, REASONING_EFFORTS
from parley.store import tools as tool_store

INDEXES: list[tuple[str, list[tuple[str, int]], dict]] = [
    ("agents", [("workspace", 1), ("order", 1)], {}),
    ("agent_documents", [("agentId", 1), ("createdAt", 1)], {}),
    ("agent_memories", [("agentId", 1), ("createdAt", 1)], {}),
]

MAX_DOCUMENT_CHARS = 100_000
MAX_AGENT_DOCUMENT_CHARS = 1_000_000
MAX_AGENT_DOCUMENTS = 50

# Declared in the JSON Schema only: stripping leaves nothing of a blank string, which the length check refuses.
NOT_BLANK = Field(json_schema_extra={"pattern": r"\S"})
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100), NOT_BLANK]
Role = Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)]
Persona = Annotated[str, StringConstraints(strip_whitespace=True, max_length=8000)]
ModelId = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_MODEL_ID_CHARS),
                    NOT_BLANK]


Effort = Literal[REASONING_EFFORTS]
EFFORT_HELP = ("The reasoning effort of the agent's turns (`minimal` … `high`), sent as its model's provider takes "
               "it; a model that takes none is refused (400 `reasoning_unsupported`). None: the model's own.")


class AgentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: Name = Field(description="How the agent is called at the table.")
    role: Role = Field("", description="Its expertise or function, e.g. 'Head of sales'.")
    persona: Persona = Field("", description="Instructions: priorities, tone, what it argues from.")
    model: ModelId | None = Field(None, description="`provider:model`; the deployment default when omitted.")
    reasoning_effort: Effort | None = Field(None, alias="reasoningEffort", description=EFFORT_HELP)


class AgentUpdate(BaseModel):
    # At least one field (`changes` refuses an empty update); a null name is refused, so it is not declared.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, json_schema_extra={"minProperties": 1})

    name: Name | SkipJsonSchema[None] = None
    role: Role | None = None
    persona: Persona | None = None
    model: ModelId | None = None
    reasoning_effort: Effort | None = Field(None, alias="reasoningEffort", description=EFFORT_HELP)

    def changes(self) -> dict[str, Any]:
        """The fields to set, as `update_agent` takes them; ValueError when there is nothing valid to change.

        A null role or persona empties it; a null model means the deployment default; a null name is refused.
        """
        changes = self.model_dump(exclude_unset=True)
        if not changes:
            raise ValueError("Nothing to update: send one of name, role, persona, model, reasoningEffort")
        if changes.get("name", "") is None:
            raise ValueError("name: cannot be null")
        return {k: ("" if v is None and k not in ("model", "reasoning_effort") else v) for k, v in changes.items()}


class DocumentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200), NOT_BLANK]
    text: Annotated[str, StringConstraints(min_length=1)]


class DocumentRefused(ValueError):
    """A document that is too long, or would take an agent past its limits; `code` names which."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def public_agent(doc: dict) -> dict:
    return {
        "id": doc["_id"],
        "workspaceId": doc["workspace"],
        "name": doc["name"],
        "role": doc.get("role", ""),
        "persona": doc.get("persona", ""),
        "model": doc.get("model"),
        "reasoningEffort": doc.get("reasoning_effort"),
        "isDevilsAdvocate": bool(doc.get("isDevilsAdvocate")),
        "createdAt": clock.iso(doc.get("createdAt")),
        "updatedAt": clock.iso(doc.get("updatedAt")),
    }


async def _next_order(db: AsyncDatabase, workspace: str) -> int:
    # A counter, not the clock: two agents created in the same millisecond keep their creation order.
    doc = await db.counters.find_one_and_update(
        {"_id": f"agents:{workspace}"}, {"$inc": {"n": 1}}, upsert=True, return_document=ReturnDocument.AFTER
    )
    return int(doc["n"])


async def create_agent(
    db: AsyncDatabase, *, workspace: str, name: str, role: str, persona: str, model: str | None,
    reasoning_effort: str | None = None,
) -> dict:
    """Store a regular agent at the end of the workspace's creation order."""
    now = clock.now()
    doc = {
        "_id": new_id("agt"), "workspace": workspace, "name": name, "role": role, "persona": persona,
        "model": model, **({"reasoning_effort": reasoning_effort} if reasoning_effort else {}),
        "isDevilsAdvocate": False, "order": await _next_order(db, workspace),
        "createdAt": now, "updatedAt": now,
    }
    await db.agents.insert_one(doc)
    return doc


async def ensure_devils_advocate(db: AsyncDatabase, *, workspace: str, profile: Mapping[str, str]) -> dict:
    """Return the workspace's devil's advocate, creating it on first use from `profile` (its `name`, `role` and
    `persona`; the round table's built-in one) — one per workspace, race-free."""
    found = await db.agents.find_one({"workspace": workspace, "isDevilsAdvocate": True})
    if found:
        return found
    now = clock.now()
    # A deterministic id makes concurrent first uses collide on the primary key instead of creating two.
    digest = hashlib.sha256(workspace.encode()).hexdigest()[:20]
    doc = {
        "_id": f"agt_da_{digest}", "workspace": workspace,
        **{key: profile[key] for key in ("name", "role", "persona")}, "model": None,
        "isDevilsAdvocate": True, "order": await _next_order(db, workspace), "createdAt": now, "updatedAt": now,
    }
    try:
        await db.agents.insert_one(doc)
        return doc
    except DuplicateKeyError:
        return await db.agents.find_one({"_id": doc["_id"]}) or doc


async def list_agents(db: AsyncDatabase, *, workspace: str) -> list[dict]:
    """Every agent of the workspace in creation order."""
    return await db.agents.find({"workspace": workspace}).sort([("order", 1), ("_id", 1)]).to_list(None)


async def get_agent(db: AsyncDatabase, *, workspace: str, agent_id: str) -> dict | None:
    return await db.agents.find_one({"_id": agent_id, "workspace": workspace})


async def update_agent(db: AsyncDatabase, *, workspace: str, agent_id: str, changes: dict[str, Any]) -> dict | None:
    """Apply `changes` (name, role, persona, model) and return the updated agent, or None if unknown."""
    return await db.agents.find_one_and_update(
        {"_id": agent_id, "workspace": workspace},
        {"$set": {**changes, "updatedAt": clock.now()}},
        return_document=ReturnDocument.AFTER,
    )


async def delete_agent(db: AsyncDatabase, *, workspace: str, agent_id: str) -> bool:
    """Delete an agent with its documents, memories and tool grant; False when it does not exist."""
    result = await db.agents.delete_one({"_id": agent_id, "workspace": workspace})
    if result.deleted_count == 0:
        return False
    await db.agent_documents.delete_many({"agentId": agent_id})
    await db.agent_memories.delete_many({"agentId": agent_id})
    await tool_store.delete_grants(db, workspace=workspace, subject_prefix=f"agent:{agent_id}")
    return True


# --- documents ------------------------------------------------------------------------------


def public_document(doc: dict, *, with_text: bool = False) -> dict:
    out = {
        "id": doc["_id"], "agentId": doc["agentId"], "title": doc["title"], "chars": len(doc["text"]),
        "createdAt": clock.iso(doc.get("createdAt")),
    }
    if with_text:
        out["text"] = doc["text"]
    return out


async def document_totals(db: AsyncDatabase, *, agent_id: str) -> tuple[int, int]:
    """How many documents an agent has and their total characters."""
    docs = await db.agent_documents.find({"agentId": agent_id}, {"chars": 1}).to_list(None)
    return len(docs), sum(int(d.get("chars", 0)) for d in docs)


async def check_document_room(db: AsyncDatabase, *, agent_id: str, text: str) -> None:
    """Raise DocumentRefused when `text` is over a document's length or the agent has no room left for it."""
    if len(text) > MAX_DOCUMENT_CHARS:
        raise DocumentRefused(f"text: {len(text)} characters; a document holds at most {MAX_DOCUMENT_CHARS}",
                              "document_too_large")
    count, chars = await document_totals(db, agent_id=agent_id)
    if count >= MAX_AGENT_DOCUMENTS or chars + len(text) > MAX_AGENT_DOCUMENT_CHARS:
        raise DocumentRefused(f"An agent holds at most {MAX_AGENT_DOCUMENTS} documents and "
                              f"{MAX_AGENT_DOCUMENT_CHARS} characters; this one has {count} documents and "
                              f"{chars} characters", "documents_limit")


async def add_document(db: AsyncDatabase, *, workspace: str, agent_id: str, title: str, text: str) -> dict:
    doc = {
        "_id": new_id("doc"), "workspace": workspace, "agentId": agent_id, "title": title, "text": text,
        "chars": len(text), "createdAt": clock.now(),
    }
    await db.agent_documents.insert_one(doc)
    return doc


async def list_documents(db: AsyncDatabase, *, agent_ids: list[str]) -> list[dict]:
    """Documents of the given agents, oldest first."""
    return await db.agent_documents.find({"agentId": {"$in": agent_ids}}).sort("createdAt", 1).to_list(None)


async def delete_document(db: AsyncDatabase, *, agent_id: str, document_id: str) -> bool:
    result = await db.agent_documents.delete_one({"_id": document_id, "agentId": agent_id})
    return result.deleted_count == 1


# --- memories -------------------------------------------------------------------------------


def public_memory(doc: dict) -> dict:
    return {
        "id": doc["_id"], "agentId": doc["agentId"], "content": doc["content"],
        "conversationId": doc.get("conversationId"), "createdAt": clock.iso(doc.get("createdAt")),
    }


async def add_memories(
    db: AsyncDatabase, *, workspace: str, conversation_id: str | None, notes: dict[str, list[str]]
) -> int:
    """Store each agent's new notes; return how many were stored."""
    now = clock.now()
    rows = [
        {"_id": new_id("mem"), "workspace": workspace, "agentId": agent_id, "content": note,
         "conversationId": conversation_id, "createdAt": now}
        for agent_id, agent_notes in notes.items()
        for note in agent_notes
    ]
    if rows:
        await db.agent_memories.insert_many(rows)
    return len(rows)


async def list_memories(db: AsyncDatabase, *, agent_ids: list[str], limit: int | None = None) -> list[dict]:
    """Memories of the given agents, oldest first (the most recent `limit` per call when given)."""
    cursor = db.agent_memories.find({"agentId": {"$in": agent_ids}}).sort([("createdAt", -1), ("_id", -1)])
    if limit:
        cursor = cursor.limit(limit)
    return list(reversed(await cursor.to_list(None)))


async def delete_memories(db: AsyncDatabase, *, agent_id: str, memory_id: str | None = None) -> int:
    """Delete one memory, or all of an agent's; return how many went."""
    query: dict[str, Any] = {"agentId": agent_id}
    if memory_id is not None:
        query["_id"] = memory_id
    return (await db.agent_memories.delete_many(query)).deleted_count
