"""`/v1/runs`: every mode's runs, the same way: list them, read one, follow its events, steer it, cancel it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse

from parley.api.deps import CurrentPrincipal, Engine
from parley.api.errors import ApiError
from parley.api.openapi import errors, streamed
from parley.api.sse import EVENT_ID_PATTERN, resume_after, sse_response
from parley.services import runs as service
from parley.services import steering
from parley.services.runs import Kind, Status

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.get("", summary="The runs of the workspace the key may see, of every kind, newest first",
            responses=errors((400, "A query parameter is invalid, or `cursor` is not one this route gave.")))
async def list_runs(
    principal: CurrentPrincipal,
    engine: Engine,
    kind: Annotated[Kind | None, Query(description="Only runs of this kind.")] = None,
    status: Annotated[Status | None, Query(description="Only runs in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=100, description="Runs per page.")] = 20,
    cursor: Annotated[str | None, Query(description="`nextCursor` of the previous page.")] = None,
) -> dict[str, Any]:
    return await service.list_runs(engine, principal, kind=kind, status=status, limit=limit, cursor=cursor)


NO_RUN = (404, "No run with this id in the workspace, or one the key may not see (another user's duel or chat "
                "run, or a kind outside its scopes).")


@router.get("/{run_id}", summary="One run: status, worker, usage, result", responses=errors(NO_RUN))
async def get_run(run_id: str, principal: CurrentPrincipal, engine: Engine) -> dict[str, Any]:
    return service.public_run(await service.visible_run(engine, principal, run_id), detail=True)


@router.get("/{run_id}/events", summary="Replay a run's events, then follow it live until it ends",
            response_class=EventSourceResponse, responses={
    **streamed("The run's events, each with its sequence number as `id:`."),
    **errors((400, "`Last-Event-ID` (or `lastEventId`) is not an integer."), NO_RUN)})
async def run_events(
    run_id: str,
    request: Request,
    principal: CurrentPrincipal,
    engine: Engine,
    last_event_id: Annotated[str | None, Query(alias="lastEventId", json_schema_extra={"pattern": EVENT_ID_PATTERN},
                                                    description="Resume after this event id (an integer).")] = None,
):
    try:
        after = resume_after(request, last_event_id)
    except ValueError as exc:
        raise ApiError(400, "Last-Event-ID must be an integer event id", code="invalid_request") from exc
    await service.visible_run(engine, principal, run_id)
    return sse_response(engine.follow(run_id, after=after), keepalive=request.app.state.sse_keepalive)


@router.post("/{run_id}/cancel", status_code=202, summary="Stop a run; it is stored `cancelled` with what it did",
             responses=errors((403, "The key is read-only, lacks the kind's scope, or is neither the run's owner's "
                                    "nor an admin key (`not_run_owner`)."), NO_RUN,
                              (409, "The run has already ended (or had finished and was being stored); `run` is "
                                    "its record.")))
async def cancel_run(run_id: str, principal: CurrentPrincipal, engine: Engine) -> JSONResponse:
    return JSONResponse(await service.cancel_run(engine, principal, run_id), status_code=202)


@router.post("/{run_id}/input", status_code=202, summary="Steer a running debate: add a message, pause, continue, "
             "guide or end it", responses=errors(
                 (400, "Neither content nor action, an action that takes no content, or a blank message."),
                 (403, "The key is read-only, lacks the kind's scope, or is neither the run's owner's nor an admin "
                       "key (`not_run_owner`)."), NO_RUN,
                 (409, "The run has ended (`run_finished`), takes no input (`run_not_steerable`: a chat completion, "
                       "a workflow without an `await` node), or already waits and was asked to pause "
                       "(`run_waiting`).")))
async def send_input(run_id: str, body: steering.RunInput, principal: CurrentPrincipal, engine: Engine) -> JSONResponse:
    """Store the input (before answering 202), then deliver it to the run on whichever worker executes it; a waiting
    run that `continue`, `guide` or `end` lets go on resumes at once. The answer has the input's `id` and the run."""
    content, action = steering.parse_input(body.model_dump(exclude_none=True))
    record = await service.visible_run(engine, principal, run_id, write=True)
    given, record = await steering.send_input(engine, record, user=principal.user, content=content, action=action)
    return JSONResponse({"input": given, "run": service.public_run(record)}, status_code=202)
