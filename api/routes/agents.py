"""`/v1/agents`: a workspace's round-table agents, their documents and their memories."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from api.deps import Db, Factory, Principal, require_scope
from api.errors import ApiError
from store import agents as store
from nodes.models import ModelError

router = APIRouter(prefix="/v1/agents", tags=["agents"])

Reader = Annotated[Principal, Depends(require_scope("conversations"))]
Writer = Annotated[Principal, Depends(require_scope("conversations", write=True))]

MAX_DOCUMENT_CHARS = 100_000
MAX_AGENT_DOCUMENT_CHARS = 1_000_000
MAX_AGENT_DOCUMENTS = 50

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
Role = Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)]
Persona = Annotated[str, StringConstraints(strip_whitespace=True, max_length=8000)]
ModelId = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class AgentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name = Field(description="How the agent is called at the table.")
    role: Role = Field("", description="Its expertise or function, e.g. 'Head of sales'.")
    persona: Persona = Field("", description="Instructions: priorities, tone, what it argues from.")
    model: ModelId | None = Field(None, description="`provider:model`; the deployment default when omitted.")


class AgentUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name | None = None
    role: Role | None = None
    persona: Persona | None = None
    model: ModelId | None = None


class DocumentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
    text: Annotated[str, StringConstraints(min_length=1)]


def _check_model(factory, model: str | None) -> None:
    if model is None:
        return
    try:
        factory.resolve(model)
    except ModelError as exc:
        raise ApiError(400, f"model: {exc}", code="invalid_model") from exc


async def _agent_or_404(db, principal: Principal, agent_id: str) -> dict:
    agent = await store.get_agent(db, workspace=principal.workspace, agent_id=agent_id)
    if agent is None:
        raise ApiError(404, "Agent not found")
    return agent


@router.post("", status_code=201, summary="Create an agent")
async def create_agent(body: AgentCreate, principal: Writer, db: Db, factory: Factory) -> dict:
    _check_model(factory, body.model)
    agent = await store.create_agent(db, workspace=principal.workspace, **body.model_dump())
    return {"agent": store.public_agent(agent)}


@router.get("", summary="List the workspace's agents in creation order")
async def list_agents(principal: Reader, db: Db) -> dict:
    return {"agents": [store.public_agent(a) for a in await store.list_agents(db, workspace=principal.workspace)]}


@router.get("/{agent_id}", summary="Get an agent")
async def get_agent(agent_id: str, principal: Reader, db: Db) -> dict:
    return {"agent": store.public_agent(await _agent_or_404(db, principal, agent_id))}


@router.patch("/{agent_id}", summary="Change an agent's name, role, persona or model")
async def update_agent(agent_id: str, body: AgentUpdate, principal: Writer, db: Db, factory: Factory) -> dict:
    changes = body.model_dump(exclude_unset=True)
    if not changes:
        raise ApiError(400, "Nothing to update: send one of name, role, persona, model", code="invalid_request")
    if changes.get("name", "") is None:
        raise ApiError(400, "name: cannot be null", code="invalid_request")
    _check_model(factory, changes.get("model"))
    agent = await store.update_agent(db, workspace=principal.workspace, agent_id=agent_id,
                                     changes={k: ("" if v is None and k != "model" else v) for k, v in changes.items()})
    if agent is None:
        raise ApiError(404, "Agent not found")
    return {"agent": store.public_agent(agent)}


@router.delete("/{agent_id}", status_code=204, summary="Delete an agent with its documents and memories")
async def delete_agent(agent_id: str, principal: Writer, db: Db) -> Response:
    if not await store.delete_agent(db, workspace=principal.workspace, agent_id=agent_id):
        raise ApiError(404, "Agent not found")
    return Response(status_code=204)


@router.post("/{agent_id}/documents", status_code=201, summary="Link a document to an agent")
async def add_document(agent_id: str, body: DocumentCreate, principal: Writer, db: Db) -> dict:
    await _agent_or_404(db, principal, agent_id)
    if len(body.text) > MAX_DOCUMENT_CHARS:
        raise ApiError(413, f"text: {len(body.text)} characters; a document holds at most {MAX_DOCUMENT_CHARS}",
                       code="document_too_large")
    count, chars = await store.document_totals(db, agent_id=agent_id)
    if count >= MAX_AGENT_DOCUMENTS or chars + len(body.text) > MAX_AGENT_DOCUMENT_CHARS:
        raise ApiError(413, f"An agent holds at most {MAX_AGENT_DOCUMENTS} documents and {MAX_AGENT_DOCUMENT_CHARS} "
                       f"characters; this one has {count} documents and {chars} characters",
                       code="documents_limit")
    doc = await store.add_document(db, workspace=principal.workspace, agent_id=agent_id, title=body.title,
                                   text=body.text)
    return {"document": store.public_document(doc, with_text=True)}


@router.get("/{agent_id}/documents", summary="List an agent's documents")
async def list_documents(agent_id: str, principal: Reader, db: Db) -> dict:
    await _agent_or_404(db, principal, agent_id)
    return {"documents": [store.public_document(d) for d in await store.list_documents(db, agent_ids=[agent_id])]}


@router.get("/{agent_id}/documents/{document_id}", summary="Get one document with its text")
async def get_document(agent_id: str, document_id: str, principal: Reader, db: Db) -> dict:
    await _agent_or_404(db, principal, agent_id)
    doc = next((d for d in await store.list_documents(db, agent_ids=[agent_id]) if d["_id"] == document_id), None)
    if doc is None:
        raise ApiError(404, "Document not found")
    return {"document": store.public_document(doc, with_text=True)}


@router.delete("/{agent_id}/documents/{document_id}", status_code=204, summary="Unlink and delete a document")
async def delete_document(agent_id: str, document_id: str, principal: Writer, db: Db) -> Response:
    await _agent_or_404(db, principal, agent_id)
    if not await store.delete_document(db, agent_id=agent_id, document_id=document_id):
        raise ApiError(404, "Document not found")
    return Response(status_code=204)


@router.get("/{agent_id}/memories", summary="List what an agent remembers from earlier debates")
async def list_memories(agent_id: str, principal: Reader, db: Db) -> dict:
    await _agent_or_404(db, principal, agent_id)
    memories = await store.list_memories(db, agent_ids=[agent_id])
    return {"memories": [store.public_memory(m) for m in reversed(memories)]}


@router.delete("/{agent_id}/memories", status_code=204, summary="Forget everything an agent remembers")
async def delete_memories(agent_id: str, principal: Writer, db: Db) -> Response:
    await _agent_or_404(db, principal, agent_id)
    await store.delete_memories(db, agent_id=agent_id)
    return Response(status_code=204)


@router.delete("/{agent_id}/memories/{memory_id}", status_code=204, summary="Forget one memory")
async def delete_memory(agent_id: str, memory_id: str, principal: Writer, db: Db) -> Response:
    await _agent_or_404(db, principal, agent_id)
    if not await store.delete_memories(db, agent_id=agent_id, memory_id=memory_id):
        raise ApiError(404, "Memory not found")
    return Response(status_code=204)
