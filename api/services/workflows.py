"""Designer workflows over HTTP: store them, check and start their runs, and answer with a run's result.

A run is the run engine's (`runs.modes.workflow`): it outlives its client, stores its status, final state
and usage, records usage rows and takes the tokens from the workspace allowance.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI

from api.deps import Principal
from api.errors import ApiError
from designer import WorkflowError, WorkflowInputError, WorkflowSpec, prepare_input, validate_workflow
from designer.spec import RoundtableNode
from runs import RunFailure
from runs.modes.roundtable import seated_agents
from runs.modes.workflow import start_workflow
from store import workflows as store
from store import workspaces as ws_store

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


async def workspace_agents(db, workspace: str) -> list[dict[str, Any]]:
    """The workspace's agents in the round-table graph's input shape, for `"agents": "workspace"` nodes."""
    try:
        return await seated_agents(db, workspace=workspace)
    except RunFailure as exc:
        # The conversations API answers 500 here (the seed's contract); for a workflow it is bad input.
        raise ApiError(422, exc.error["message"], code="no_agents") from exc


async def start_run(
    app: FastAPI, principal: Principal, *, workflow_id: str | None = None, document: Any = None,
    input: dict | None = None,
) -> dict:
    """Check the workflow (stored, or the inline `document`), that the caller may run now and that the
    input fits; store the run as `running` and start it; return its `workflow_runs` record. An omitted
    input runs the workflow's `sampleInput`.
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
    return await start_workflow(state.runs, principal.caller, spec=spec, initial=initial, workflow_id=workflow_id,
                                workspace_agents=agents)


async def run_to_end(app: FastAPI, run: dict) -> dict[str, Any]:
    """Wait for a workflow run and return its record; a failed run raises 422 (bad input) or 502 (a node failed).

    A client that hangs up does not stop the run, which is still stored whole.
    """
    finished = await app.state.runs.wait(run["_id"])
    if finished["status"] != "completed":
        error = finished.get("error") or {"message": "The workflow run was cancelled", "status": 502}
        raise ApiError(error.get("status", 502), error["message"], code=error.get("code", "workflow_failed"),
                       extra={"runId": run["_id"], "node": error.get("node"), "usage": error.get("usage")},
                       headers={"X-Run-Id": run["_id"]})
    return public_run(await store.find_run(app.state.db, workspace=finished["workspace"], run_id=run["_id"]))
