"""Designer workflows: store them, check and start their runs, and a run's result.

A run is the run engine's (`runs.modes.workflow`): it outlives its client, stores its status, final state
and usage; when it ends its usage rows are recorded and its tokens taken from the workspace allowance, which
must not be used up when it starts (`services.billing`).
"""

from __future__ import annotations

import asyncio

import logging
from typing import Any

from parley.core import clock
from parley.designer import WorkflowError, WorkflowInputError, WorkflowSpec, prepare_input, validate_workflow
from parley.designer.spec import RoundtableNode
from parley.llm.budget import Spend
from parley.runs import Caller, RunEngine
from parley.runs.modes.workflow import jsonable
from parley.services import billing, steering
from parley.services import tools as tool_service
from parley.services.access import Principal
from parley.services.backend import Backend
from parley.services.errors import CannotStart, NotFound, RunFailed, Unprocessable
from parley.services.roundtable import seated_agents
from parley.services.steering import RunWaiting, SteerOptions
from parley.services.tools import workflow_subject
from parley.store import workflows as store

log = logging.getLogger("parley.workflows")

RUN_RATE_LIMIT = "30/minute"


# --- public shapes --------------------------------------------------------------------------


def public_workflow(doc: dict) -> dict[str, Any]:
    """A stored workflow as the API shows it."""
    return {
        "id": doc["_id"],
        "name": doc["name"],
        "description": doc.get("description", ""),
        "version": doc.get("version", 1),
        "user": doc["user"],
        "workflow": doc["spec"],
        "createdAt": clock.iso(doc.get("createdAt")),
        "updatedAt": clock.iso(doc.get("updatedAt")),
    }


def public_workflow_run(doc: dict) -> dict[str, Any]:
    """A workflow run's result record (`store.workflows`: its input, output, usage and failed node) as
    `/v1/workflows/.../runs` shows it; the run itself, as every mode's, is `services.runs.public_run`."""
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
        "createdAt": clock.iso(doc.get("createdAt")),
        "finishedAt": clock.iso(doc.get("finishedAt")),
    }


# --- workflows ------------------------------------------------------------------------------


async def check_workflow(document: Any) -> WorkflowSpec:
    """Parse and check a workflow document on a worker thread (a large one is CPU work, bounded by
    `MAX_WORKFLOW_NODES`), or raise `Unprocessable` listing every problem."""
    try:
        return await asyncio.to_thread(validate_workflow, document)
    except WorkflowError as exc:
        raise Unprocessable(str(exc), code="invalid_workflow",
                            errors=[issue.to_dict() for issue in exc.issues]) from None


async def validation(document: Any) -> dict[str, Any]:
    """What `POST /v1/workflows/validate` answers: whether the document is valid, and each problem."""
    try:
        await check_workflow(document)
    except Unprocessable as exc:
        return {"valid": False, "errors": exc.details["errors"]}
    return {"valid": True, "errors": []}


async def create_workflow(db, principal: Principal, document: Any) -> dict[str, Any]:
    spec = await check_workflow(document)
    doc = await store.insert_workflow(db, workspace=principal.workspace, user=principal.user, spec=spec.dump())
    return public_workflow(doc)


async def get_workflow(db, principal: Principal, workflow_id: str) -> dict:
    doc = await store.find_workflow(db, workspace=principal.workspace, workflow_id=workflow_id)
    if doc is None:
        raise NotFound(f"No workflow '{workflow_id}' in this workspace", code="workflow_not_found")
    return doc


async def list_workflows(db, principal: Principal) -> dict[str, Any]:
    docs = await store.list_workflows(db, workspace=principal.workspace)
    return {"data": [public_workflow(d) for d in docs], "count": len(docs)}


async def delete_workflow(db, principal: Principal, workflow_id: str) -> None:
    if not await store.delete_workflow(db, workspace=principal.workspace, workflow_id=workflow_id):
        raise NotFound(f"No workflow '{workflow_id}' in this workspace", code="workflow_not_found")


async def list_runs(db, principal: Principal, workflow_id: str) -> dict[str, Any]:
    await get_workflow(db, principal, workflow_id)
    docs = await store.list_runs(db, workspace=principal.workspace, workflow_id=workflow_id)
    return {"data": [public_workflow_run(d) for d in docs], "count": len(docs)}


async def get_run(db, principal: Principal, run_id: str) -> dict[str, Any]:
    doc = await store.find_run(db, workspace=principal.workspace, run_id=run_id)
    if doc is None:
        raise NotFound(f"No workflow run '{run_id}' in this workspace", code="run_not_found")
    return public_workflow_run(doc)


# --- runs -----------------------------------------------------------------------------------


async def workspace_agents(db, workspace: str) -> list[dict[str, Any]]:
    """The workspace's agents in the round-table graph's input shape, for `"agents": "workspace"` nodes."""
    try:
        return await seated_agents(db, workspace=workspace)
    except CannotStart as exc:
        # The conversations API answers 500 here (the round-table contract); for a workflow it is bad input.
        raise Unprocessable(exc.message, code="no_agents") from exc


async def start_workflow(
    engine: RunEngine, caller: Caller, *, spec: WorkflowSpec, initial: dict[str, Any], workflow_id: str | None,
    workspace_agents: list[dict[str, Any]] | None, steer: SteerOptions = SteerOptions(),
) -> dict:
    """Store the workflow run as `running` and start it (with the steering options `steer`: its budget); return the
    `workflow_runs` record."""
    run_id = store.new_run_id()
    node_tools = {}
    if workflow_id is not None:  # grants are made to a stored workflow's nodes
        subjects = {workflow_subject(workflow_id, node.id): node.id for node in spec.nodes}
        granted = await tool_service.grants_of(engine.db, workspace=caller.workspace, subjects=list(subjects))
        node_tools = {subjects[subject]: tools for subject, tools in granted.items()}
    record = await store.insert_run(engine.db, run_id=run_id, workspace=caller.workspace, user=caller.user,
                                    workflow_id=workflow_id, workflow_name=spec.name, input=initial)
    await engine.submit(
        "workflow", caller=caller, run_id=run_id, title=spec.name,
        ref={"workflowId": workflow_id, "workflowRunId": run_id},
        input={"workflow": spec.dump(), "initial": jsonable(initial), "workflowId": workflow_id,
               "workspaceAgents": workspace_agents, **({"nodeTools": node_tools} if node_tools else {}),
               "bill": billing.Bill(usage="workflow", takes_allowance=True).dump(),
               **({"steer": steer.dump()} if steer.dump() else {})},
    )
    return record


async def start_run(
    backend: Backend, principal: Principal, *, workflow_id: str | None = None, document: Any = None,
    input: dict | None = None, steer: SteerOptions = SteerOptions(),
) -> dict:
    """Check the workflow (stored, or the inline `document`), that the caller may run now and that the
    input fits; store the run as `running` and start it; return its `workflow_runs` record. An omitted
    input runs the workflow's `sampleInput`.

    Raises:
        NotFound: no such stored workflow.
        Unprocessable: the workflow or its input has problems (`errors` lists them), or it seats the
            workspace's agents and there are none.
        RateLimited: over `RUN_RATE_LIMIT` for the workspace's user.
        PaymentRequired: the workspace's token allowance is used up.
        InvalidRequest: `maxSeconds` (asked, or the workspace's default) below the minimum.
    """
    if workflow_id is not None:
        document = (await get_workflow(backend.db, principal, workflow_id))["spec"]
    spec = await check_workflow(document)
    await backend.admit(RUN_RATE_LIMIT, "workflow-runs", principal.workspace, principal.user,
                        message="Too many workflow runs; try again later")
    try:
        initial = prepare_input(spec, spec.sample_input if input is None else input)
    except WorkflowInputError as exc:
        raise Unprocessable(str(exc), code="invalid_input", errors=[issue.to_dict() for issue in exc.issues]) from None
    await billing.require_allowance(backend.db, principal.workspace)
    limits = await steering.budget_for(backend.db, principal.workspace, steer.budget)
    # No step of a workflow can be estimated before it runs: only the floor of `maxSeconds` is checked.
    steering.require_minimum(limits, Spend(), what=f"workflow '{spec.name}'")
    agents = None
    if any(isinstance(n, RoundtableNode) and n.config.agents == "workspace" for n in spec.nodes):
        agents = await workspace_agents(backend.db, principal.workspace)
    return await start_workflow(backend.runs, principal.caller, spec=spec, initial=initial, workflow_id=workflow_id,
                                workspace_agents=agents,
                                steer=SteerOptions(budget=limits, response_cache=steer.response_cache))


async def run_to_end(backend: Backend, run: dict) -> dict[str, Any]:
    """Wait for a workflow run and return its record.

    A client that hangs up does not stop the run, which is still stored whole.

    Raises:
        RunFailed: the run failed (bad input: 422, a node failed: 502) or was cancelled; its error names the
            run, the failed node and the usage.
        RunWaiting: the run waits for a person at an `await` node.
    """
    finished = await backend.runs.wait(run["_id"], or_waiting=True)
    if finished["status"] == "waiting":
        raise RunWaiting(finished)
    if finished["status"] != "completed":
        error = finished.get("error") or {"message": "The workflow run was cancelled", "status": 502}
        raise RunFailed({"message": error["message"], "status": error.get("status", 502),
                         "code": error.get("code", "workflow_failed"), "runId": run["_id"], "node": error.get("node"),
                         "usage": error.get("usage")}, run_id=run["_id"])
    result = await store.find_run(backend.db, workspace=finished["workspace"], run_id=run["_id"])
    return public_workflow_run(result)
