"""Designer workflows over HTTP: store them, run them (whole or streamed), and keep each run's record.

A run executes as a background task that outlives its client: it stores the run's status, final state
and usage, records usage rows and takes the tokens from the workspace allowance, and hands its events to
whoever streams them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from langgraph.graph.state import CompiledStateGraph

from api.deps import Principal
from api.errors import ApiError
from api.services import roundtable
from api.sse import Event
from core.metrics import record_run
from core.telemetry import trace_config
from store import workflows as store
from store import workspaces as ws_store
from store.usage import record_usage
from designer import (
    WorkflowContext,
    WorkflowError,
    WorkflowInputError,
    WorkflowRunError,
    WorkflowSpec,
    compile_workflow,
    prepare_input,
    stream_workflow,
    validate_workflow,
)
from designer.modes import NodeInputError
from designer.run import run_usage
from designer.spec import RoundtableNode
from designer.templates import MissingValue, TemplateError

log = logging.getLogger("parley.workflows")

RUN_RATE_LIMIT = "30/minute"


# --- public shapes --------------------------------------------------------------------------


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def public_workflow(doc: dict) -> dict[str, Any]:
    return {
        "id": doc["_id"],
        "name": doc["name"],
        "description": doc.get("description", ""),
        "version": doc.get("version", 1),
        "user": doc["user"],
        "workflow": doc["spec"],
        "createdAt": _iso(doc.get("createdAt")),
        "updatedAt": _iso(doc.get("updatedAt")),
    }


def public_run(doc: dict) -> dict[str, Any]:
    return {
        "id": doc["_id"],
        "workflowId": doc.get("workflowId"),
        "workflowName": doc.get("workflowName"),
        "status": doc["status"],
        "input": doc.get("input"),
        "output": doc.get("output"),
        "usage": doc.get("usage"),
        "error": doc.get("error"),
        "failedNode": doc.get("failedNode"),
        "createdAt": _iso(doc.get("createdAt")),
        "finishedAt": _iso(doc.get("finishedAt")),
    }


def _jsonable(value: Any) -> Any:
    """State values as plain JSON (a mode may hold datetimes or other objects)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


# --- workflows ------------------------------------------------------------------------------


def check_workflow(document: Any) -> WorkflowSpec:
    """Parse and check a workflow document, or raise a 422 listing every problem."""
    try:
        return validate_workflow(document)
    except WorkflowError as exc:
        raise ApiError(422, str(exc), code="invalid_workflow",
                       extra={"errors": [issue.to_dict() for issue in exc.issues]}) from None


async def create_workflow(db, principal: Principal, document: Any) -> dict[str, Any]:
    spec = check_workflow(document)
    doc = await store.insert_workflow(db, workspace=principal.workspace, user=principal.user, spec=spec.dump())
    return public_workflow(doc)


async def get_workflow(db, principal: Principal, workflow_id: str) -> dict:
    doc = await store.find_workflow(db, workspace=principal.workspace, workflow_id=workflow_id)
    if doc is None:
        raise ApiError(404, f"No workflow '{workflow_id}' in this workspace", code="workflow_not_found")
    return doc


async def list_workflows(db, principal: Principal) -> dict[str, Any]:
    docs = await store.list_workflows(db, workspace=principal.workspace)
    return {"data": [public_workflow(d) for d in docs], "count": len(docs)}


async def delete_workflow(db, principal: Principal, workflow_id: str) -> None:
    if not await store.delete_workflow(db, workspace=principal.workspace, workflow_id=workflow_id):
        raise ApiError(404, f"No workflow '{workflow_id}' in this workspace", code="workflow_not_found")


async def list_runs(db, principal: Principal, workflow_id: str) -> dict[str, Any]:
    await get_workflow(db, principal, workflow_id)
    docs = await store.list_runs(db, workspace=principal.workspace, workflow_id=workflow_id)
    return {"data": [public_run(d) for d in docs], "count": len(docs)}


async def get_run(db, principal: Principal, run_id: str) -> dict[str, Any]:
    doc = await store.find_run(db, workspace=principal.workspace, run_id=run_id)
    if doc is None:
        raise ApiError(404, f"No workflow run '{run_id}' in this workspace", code="run_not_found")
    return public_run(doc)


# --- runs -----------------------------------------------------------------------------------


@dataclass
class PreparedRun:
    """A checked, compiled workflow with its initial state and a stored `running` record."""

    id: str
    workflow_id: str | None
    spec: WorkflowSpec
    graph: CompiledStateGraph
    initial: dict[str, Any]
    context: WorkflowContext
    principal: Principal


async def workspace_agents(db, workspace: str) -> list[dict[str, Any]]:
    """The workspace's agents in the round-table graph's input shape, for `"agents": "workspace"` nodes."""
    try:
        return await roundtable.seated_agents(db, workspace=workspace)
    except ApiError as exc:
        # The conversations API answers 500 here (the seed's contract); for a workflow it is bad input.
        raise ApiError(422, exc.message, code="no_agents") from exc


async def start_run(
    app: FastAPI, principal: Principal, *, workflow_id: str | None = None, document: Any = None,
    input: dict | None = None,
) -> PreparedRun:
    """Check the workflow (stored, or the inline `document`), that the caller may run now and that the
    input fits; store the run as `running`. An omitted input runs the workflow's `sampleInput`.
    """
    state = app.state
    if workflow_id is not None:
        document = (await get_workflow(state.db, principal, workflow_id))["spec"]
    spec = check_workflow(document)
    decision = await state.ratelimiter.hit(RUN_RATE_LIMIT, "workflow-runs", principal.workspace, principal.user)
    if not decision.allowed:
        raise ApiError(429, "Too many workflow runs; try again later", code="rate_limited",
                       headers={"Retry-After": str(decision.retry_after)})
    try:
        initial = prepare_input(spec, spec.sample_input if input is None else input)
    except WorkflowInputError as exc:
        raise ApiError(422, str(exc), code="invalid_input",
                       extra={"errors": [issue.to_dict() for issue in exc.issues]}) from None
    workspace = await ws_store.get_workspace(state.db, principal.workspace)
    if workspace.get("allowanceTokens") == 0:
        raise ApiError(402, "The workspace's token allowance is used up", code="allowance_exhausted")
    agents = None
    if any(isinstance(n, RoundtableNode) and n.config.agents == "workspace" for n in spec.nodes):
        agents = await workspace_agents(state.db, principal.workspace)
    record = await store.insert_run(state.db, workspace=principal.workspace, user=principal.user,
                                    workflow_id=workflow_id, workflow_name=spec.name, input=initial)
    return PreparedRun(
        id=record["_id"],
        workflow_id=workflow_id,
        spec=spec,
        graph=compile_workflow(spec),
        initial=initial,
        context=WorkflowContext(models=state.factory, workspace_agents=agents),
        principal=principal,
    )


def _is_input_problem(exc: WorkflowRunError) -> bool:
    return isinstance(exc.__cause__, MissingValue | NodeInputError | TemplateError)


async def _settle(app: FastAPI, run: PreparedRun) -> dict[str, Any]:
    """Record the run's usage rows and take its tokens from the allowance; return the run's usage."""
    db, ctx = app.state.db, run.context
    await record_usage(db, workspace=run.principal.workspace, user=run.principal.user, request_id=run.id,
                       mode="workflow", ledger=ctx.ledger)
    if ctx.ledger.total_tokens:
        await ws_store.consume_allowance(db, run.principal.workspace, ctx.ledger.total_tokens)
    return run_usage(ctx)


async def execute(app: FastAPI, run: PreparedRun, emit: Callable[[str, dict[str, Any]], None]) -> dict:
    """Run the workflow to its end, handing each event to `emit`; store and return the finished record."""
    db = app.state.db
    emit("run_start", {"runId": run.id, "workflowId": run.workflow_id, "name": run.spec.name})
    try:
        final: dict[str, Any] = {}
        config = trace_config(run.id, "workflow", run.principal.workspace, run.principal.user)
        async for event in stream_workflow(run.spec, run.initial, context=run.context, graph=run.graph,
                                           config=config):
            name = event.pop("event")
            if name == "done":
                final = _jsonable(event["state"])
                continue
            if name == "node_end":
                event["output"] = _jsonable(event["output"])
            emit(name, event)
    except WorkflowRunError as exc:
        usage = await _settle(app, run)
        log.warning("workflow run %s failed: %s", run.id, exc)
        record_run("workflow", "failed")
        record = await store.finish_run(db, run_id=run.id, status="failed", output=None, usage=usage,
                                        error=str(exc), failed_node=exc.node)
        emit("error", {"runId": run.id, "error": str(exc), "node": exc.node,
                       "code": "invalid_input" if _is_input_problem(exc) else "workflow_failed"})
        record["inputProblem"] = _is_input_problem(exc)
        return record
    except asyncio.CancelledError:
        record_run("workflow", "cancelled")
        await asyncio.shield(store.finish_run(db, run_id=run.id, status="failed", output=None,
                                              usage=run_usage(run.context), error="cancelled"))
        raise
    except Exception as exc:  # a fault of Parley itself: the client still gets an `error` event, the log the cause
        log.exception("workflow run %s crashed", run.id)
        record_run("workflow", "failed")
        record = await store.finish_run(db, run_id=run.id, status="failed", output=None,
                                        usage=run_usage(run.context), error=f"internal error: {exc}")
        emit("error", {"runId": run.id, "error": f"internal error: {exc}", "node": None, "code": "internal_error"})
        return record
    usage = await _settle(app, run)
    record = await store.finish_run(db, run_id=run.id, status="completed", output=final, usage=usage)
    record_run("workflow", "completed")
    emit("done", {"runId": run.id, "state": final, "usage": usage})
    return record


def _spawn(app: FastAPI, coro) -> asyncio.Task:
    task = asyncio.create_task(coro)
    app.state.background.add(task)
    task.add_done_callback(app.state.background.discard)
    return task


async def run_to_end(app: FastAPI, run: PreparedRun) -> dict[str, Any]:
    """Run a workflow and return its record; a failed run raises 422 (bad input) or 502 (a node failed)."""
    # Shielded: a client that hangs up does not cancel the run, which is still stored whole.
    record = await asyncio.shield(_spawn(app, execute(app, run, lambda name, data: None)))
    if record["status"] != "completed":
        status = 422 if record.get("inputProblem") else 502
        raise ApiError(status, record.get("error") or "The workflow failed",
                       code="invalid_input" if status == 422 else "workflow_failed",
                       extra={"runId": run.id, "node": record.get("failedNode"), "usage": record.get("usage")})
    return public_run(record)


async def run_events(app: FastAPI, run: PreparedRun) -> AsyncIterator[Event]:
    """Run a workflow in the background and yield its events, numbered, as they happen."""
    queue: asyncio.Queue[tuple[str, dict] | None] = asyncio.Queue()
    task = _spawn(app, execute(app, run, lambda name, data: queue.put_nowait((name, data))))
    task.add_done_callback(lambda _: queue.put_nowait(None))
    seq = 0
    while (item := await queue.get()) is not None:
        seq += 1
        yield Event(item[0], item[1], seq)
