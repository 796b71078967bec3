"""`/v1/agents`: a workspace's round-table agents, their documents and their memories."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from parley.api.deps import Db, Factory, Principal, require_scope
from parley.api.errors import ApiError
from parley.api.openapi import errors
from parley.llm.failures import ModelError
from parley.store import agents as store
from parley.store.agents import AgentCreate, AgentUpdate, DocumentCreate, DocumentRefused

router = APIRouter(prefix="/v1/agents", tags=["agents"], responses=errors(403))

Reader = Annotated[Principal, Depends(require_scope("conversations"))]
Writer = Annotated[Principal, Depends(require_scope("conversations", write=True))]


def _check_model(factory, model: str | None) -> None:
    if model is None:
        return
    try:
        factory.resolve(model)
    except ModelError as exc:
        raise ApiError(400, f"model: {exc}", code="invalid_model") from exc


def _check_reasoning(factory, model: str | None, effort: str | None) -> None:
    if problem := factory.reasoning_problem(model, effort):
        raise ApiError(400, f"reasoningEffort: {problem}", code="reasoning_unsupported")


async def _agent_or_404(db, principal: Principal, agent_id: str) -> dict:
    agent = await store.get_agent(db, workspace=principal.workspace, agent_id=agent_id)
    if agent is None:
        raise ApiError(404, "Agent not found")
    return agent


@router.post("", status_code=201, summary="Create an agent",
             responses=errors((400, "A field is invalid, or `model` names no known model.")))
async def create_agent(body: AgentCreate, principal: Writer, db: Db, factory: Factory) -> dict:
    _check_model(factory, body.model)
    _check_reasoning(factory, body.model, body.reasoning_effort)
    agent = await store.create_agent(db, workspace=principal.workspace, **body.model_dump())
    return {"agent": store.public_agent(agent)}


@router.get("", summary="List the workspace's agents in creation order")
async def list_agents(principal: Reader, db: Db) -> dict:
    return {"agents": [store.public_agent(a) for a in await store.list_agents(db, workspace=principal.workspace)]}


@router.get("/{agent_id}", summary="Get an agent", responses=errors(404))
async def get_agent(agent_id: str, principal: Reader, db: Db) -> dict:
    return {"agent": store.public_agent(await _agent_or_404(db, principal, agent_id))}


@router.patch("/{agent_id}", summary="Change an agent's name, role, persona or model", responses=errors(
    (400, "A field is invalid, `name` is null, nothing is to change, or `model` names no known model."), 404))
async def update_agent(agent_id: str, body: AgentUpdate, principal: Writer, db: Db, factory: Factory) -> dict:
    try:
        changes = body.changes()
    except ValueError as exc:
        raise ApiError(400, str(exc), code="invalid_request") from exc
    _check_model(factory, changes.get("model"))
    if "model" in changes or changes.get("reasoning_effort"):
        current = await _agent_or_404(db, principal, agent_id)
        _check_reasoning(factory, changes.get("model", current.get("model")),
                         changes.get("reasoning_effort", current.get("reasoning_effort")))
    agent = await store.update_agent(db, workspace=principal.workspace, agent_id=agent_id, changes=changes)
    if agent is None:
        raise ApiError(404, "Agent not found")
    return {"agent": store.public_agent(agent)}


@router.delete("/{agent_id}", status_code=204, summary="Delete an agent with its documents and memories",
               responses=errors(404))
async def delete_agent(agent_id: str, principal: Writer, db: Db) -> Response:
    if not await store.delete_agent(db, workspace=principal.workspace, agent_id=agent_id):
        raise ApiError(404, "Agent not found")
    return Response(status_code=204)


@router.post("/{agent_id}/documents", status_code=201, summary="Link a document to an agent", responses=errors(
    404, (413, "The text is too long, or the agent would hold too many documents or characters.")))
async def add_document(agent_id: str, body: DocumentCreate, principal: Writer, db: Db) -> dict:
    await _agent_or_404(db, principal, agent_id)
    try:
        await store.check_document_room(db, agent_id=agent_id, text=body.text)
    except DocumentRefused as exc:
        raise ApiError(413, str(exc), code=exc.code) from exc
    doc = await store.add_document(db, workspace=principal.workspace, agent_id=agent_id, title=body.title,
                                   text=body.text)
    return {"document": store.public_document(doc, with_text=True)}


@router.get("/{agent_id}/documents", summary="List an agent's documents", responses=errors(404))
async def list_documents(agent_id: str, principal: Reader, db: Db) -> dict:
    await _agent_or_404(db, principal, agent_id)
    return {"documents": [store.public_document(d) for d in await store.list_documents(db, agent_ids=[agent_id])]}


@router.get("/{agent_id}/documents/{document_id}", summary="Get one document with its text",
            responses=errors(404))
async def get_document(agent_id: str, document_id: str, principal: Reader, db: Db) -> dict:
    await _agent_or_404(db, principal, agent_id)
    doc = next((d for d in await store.list_documents(db, agent_ids=[agent_id]) if d["_id"] == document_id), None)
    if doc is None:
        raise ApiError(404, "Document not found")
    return {"document": store.public_document(doc, with_text=True)}


@router.delete("/{agent_id}/documents/{document_id}", status_code=204, summary="Unlink and delete a document",
               responses=errors(404))
async def delete_document(agent_id: str, document_id: str, principal: Writer, db: Db) -> Response:
    await _agent_or_404(db, principal, agent_id)
    if not await store.delete_document(db, agent_id=agent_id, document_id=document_id):
        raise ApiError(404, "Document not found")
    return Response(status_code=204)


@router.get("/{agent_id}/memories", summary="List what an agent remembers from earlier debates",
            responses=errors(404))
async def list_memories(agent_id: str, principal: Reader, db: Db) -> dict:
    await _agent_or_404(db, principal, agent_id)
    memories = await store.list_memories(db, agent_ids=[agent_id])
    return {"memories": [store.public_memory(m) for m in reversed(memories)]}


@router.delete("/{agent_id}/memories", status_code=204, summary="Forget everything an agent remembers",
               responses=errors(404))
async def delete_memories(agent_id: str, principal: Writer, db: Db) -> Response:
    await _agent_or_404(db, principal, agent_id)
    await store.delete_memories(db, agent_id=agent_id)
    return Response(status_code=204)


@router.delete("/{agent_id}/memories/{memory_id}", status_code=204, summary="Forget one memory",
               responses=errors(404))
async def delete_memory(agent_id: str, memory_id: str, principal: Writer, db: Db) -> Response:
    await _agent_or_404(db, principal, agent_id)
    if not await store.delete_memories(db, agent_id=agent_id, memory_id=memory_id):
        raise ApiError(404, "Memory not found")
    return Response(status_code=204)
