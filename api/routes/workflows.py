"""`/v1/workflows`: the designer's JSON workflows, stored per workspace and run whole or streamed."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Response
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse
from pydantic import ConfigDict, Field, WithJsonSchema

from parley.api.deps import Db, Principal, Services, require_scope
from parley.api.openapi import RUN_ID_HEADER, WORKFLOW_REF, errors, streamed
from parley.api.sse import sse_response
from parley.designer import workflow_json_schema
from parley.services import steering
from parley.services import workflows as service
from parley.services.runs import public_run
from parley.services.steering import BudgetFields, SteerOptions

router = APIRouter(prefix="/v1/workflows", tags=["workflows"])

Reader = Annotated[Principal, Depends(require_scope("workflows"))]
Writer = Annotated[Principal, Depends(require_scope("workflows", write=True))]


class RunRequest(BudgetFields):
    """Input for a run of a stored workflow, and its budget (docs/steering.md)."""

    model_config = ConfigDict(extra="forbid")

    input: dict[str, Any] | None = Field(None, description="Values of declared state keys; omitted: the sampleInput.")

    def budget(self) -> SteerOptions:
        return steering.parse_options(self.model_dump(exclude_none=True), boundary=None)


class InlineRunRequest(RunRequest):
    """A workflow given in the request, and its input."""

    workflow: Annotated[dict[str, Any], WithJsonSchema(WORKFLOW_REF)] = Field(
        ..., description="A workflow document (see GET /v1/workflows/schema).")


# Answers of the routes that start a run.
INVALID_RUN = (422, "The workflow has problems (`errors` lists each, naming its node), or the input does not fit "
                    "its declared state keys.")
STARTS_RUN = errors(INVALID_RUN, (400, "A budget field is invalid (the message names it), or `maxSeconds` is below "
                                        "the minimum (`budget_too_small`)."),
                    (402, "The workspace's token allowance is used up."),
                    (429, "More workflow runs than the workspace's rate allows."))
ENDED_BADLY = errors((502, "The run failed (a model call, a node); the body names the failed node and the run."))


@router.get("/schema", summary="JSON Schema of a workflow document")
async def workflow_schema() -> dict[str, Any]:
    return workflow_json_schema()


@router.post("/validate", summary="Check a workflow document without storing it (200 whether valid or not)",
             responses=errors((422, "The body is not JSON."), 403))
async def validate(document: Annotated[Any, Body()], principal: Reader) -> dict[str, Any]:
    """The same checks as saving; each problem names its node (when it has one) and its JSON path."""
    return await service.validation(document)


@router.post("", status_code=201, summary="Store a workflow (checked first)", responses=errors(
    (422, "The document has problems; `errors` lists each, naming its node and JSON path."), 403))
async def create_workflow(document: Annotated[dict[str, Any], Body(), WithJsonSchema(WORKFLOW_REF)], principal: Writer,
                          db: Db) -> dict[str, Any]:
    return await service.create_workflow(db, principal, document)


@router.get("", summary="The workspace's workflows", responses=errors(403))
async def list_workflows(principal: Reader, db: Db) -> dict[str, Any]:
    return await service.list_workflows(db, principal)


async def _answer(backend: Services, run: dict) -> JSONResponse:
    """The run's final record, once it has ended, with its id in `X-Run-Id`; 202 with the run (`/v1/runs`) as soon as
    it waits for a person at an `await` node."""
    try:
        return JSONResponse(await service.run_to_end(backend, run), headers={"X-Run-Id": run["_id"]})
    except steering.RunWaiting as waiting:
        return JSONResponse(public_run(waiting.record), status_code=202, headers={"X-Run-Id": run["_id"]})


def _stream(backend: Services, run: dict):
    return sse_response(backend.runs.follow(run["_id"]), headers={"X-Run-Id": run["_id"]})


@router.post("/runs", summary="Run an inline workflow and return its final state",
             responses={200: {"description": "The run's record once it has ended.", "headers": RUN_ID_HEADER},
                        202: {"description": "The run waits for a person at an `await` node: the run (`/v1/runs`), "
                                             "to steer with `POST /v1/runs/{id}/input`.", "headers": RUN_ID_HEADER},
                        **STARTS_RUN, **ENDED_BADLY, **errors(403)})
async def run_inline(body: InlineRunRequest, principal: Writer, backend: Services) -> dict[str, Any]:
    run = await service.start_run(backend, principal, document=body.workflow, input=body.input, steer=body.budget())
    return await _answer(backend, run)


@router.post("/runs/stream", summary="Run an inline workflow, streamed as Server-Sent Events",
             response_class=EventSourceResponse,
             responses={**streamed("The run's events.", headers=RUN_ID_HEADER), **STARTS_RUN, **errors(403)})
async def stream_inline(body: InlineRunRequest, principal: Writer, backend: Services):
    run = await service.start_run(backend, principal, document=body.workflow, input=body.input, steer=body.budget())
    return _stream(backend, run)


@router.get("/runs/{run_id}", summary="One run of any workflow of the workspace", responses=errors(403, 404))
async def get_run(run_id: str, principal: Reader, db: Db) -> dict[str, Any]:
    return await service.get_run(db, principal, run_id)


@router.get("/{workflow_id}", summary="One workflow", responses=errors(403, 404))
async def get_workflow(workflow_id: str, principal: Reader, db: Db) -> dict[str, Any]:
    return service.public_workflow(await service.get_workflow(db, principal, workflow_id))


@router.delete("/{workflow_id}", status_code=204, summary="Delete a workflow (its runs stay)",
               responses=errors(403, 404))
async def delete_workflow(workflow_id: str, principal: Writer, db: Db) -> Response:
    await service.delete_workflow(db, principal, workflow_id)
    return Response(status_code=204)


@router.post("/{workflow_id}/runs", summary="Run a stored workflow and return its final state and usage",
             responses={200: {"description": "The run's record once it has ended.", "headers": RUN_ID_HEADER},
                        202: {"description": "The run waits for a person at an `await` node: the run (`/v1/runs`), "
                                             "to steer with `POST /v1/runs/{id}/input`.", "headers": RUN_ID_HEADER},
                        **STARTS_RUN, **ENDED_BADLY, **errors(403, 404)})
async def run_workflow(workflow_id: str, principal: Writer, backend: Services,
                       body: RunRequest | None = None) -> dict[str, Any]:
    run = await service.start_run(backend, principal, workflow_id=workflow_id, input=body.input if body else None,
                                  steer=body.budget() if body else SteerOptions())
    return await _answer(backend, run)


@router.post("/{workflow_id}/runs/stream", summary="Run a stored workflow, streamed as Server-Sent Events",
             response_class=EventSourceResponse,
             responses={**streamed("The run's events.", headers=RUN_ID_HEADER), **STARTS_RUN, **errors(403, 404)})
async def stream_workflow_run(workflow_id: str, principal: Writer, backend: Services,
                              body: RunRequest | None = None):
    run = await service.start_run(backend, principal, workflow_id=workflow_id, input=body.input if body else None,
                                  steer=body.budget() if body else SteerOptions())
    return _stream(backend, run)


@router.get("/{workflow_id}/runs", summary="Runs of a stored workflow, newest first", responses=errors(403, 404))
async def list_runs(workflow_id: str, principal: Reader, db: Db) -> dict[str, Any]:
    return await service.list_runs(db, principal, workflow_id)
