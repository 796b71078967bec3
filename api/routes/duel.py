"""Duel routes (the duel contract, docs/api.md): start a debate as SSE, read debates, replay or follow a debate's
events."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from sse_starlette import EventSourceResponse

from parley.api.deps import AppSettings, Db, Engine, Principal, Services, get_principal, presented_key, require_scope
from parley.api.errors import ApiError
from parley.api.openapi import RUN_ID_HEADER, errors, request_body, streamed
from parley.api.sse import EVENT_ID_PATTERN, resume_after, sse_response
from parley.core.limits import MAX_PAGE, ROUTE_BODY_BYTES
from parley.services import duel as service
from parley.services.duel import DebateBody, DebateNotFound, DebateRequest, public_debate

router = APIRouter(tags=["duel"])

Starter = Annotated[Principal, Depends(require_scope("debate", write=True, denied_status=401))]
Reader = Annotated[Principal, Depends(require_scope("debate", denied_status=401))]


def parse_debate_request(raw: bytes) -> DebateRequest:
    """Validate a `POST /api/debate` body, naming the field at fault."""
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, "Request body must be JSON") from exc
    return service.check_debate_request(body)


def keepalive(request: Request) -> float:
    """Seconds of silence before an SSE stream sends a `: ping` comment (the app's `sse_keepalive`)."""
    return request.app.state.sse_keepalive


@router.post("/api/debate", summary="Start a debate, streamed as Server-Sent Events", response_class=EventSourceResponse,
             openapi_extra=request_body(DebateBody, description="The topic, your persona and the number of rounds."),
             responses={
                 **streamed("The debate's events: `init`, `start`, `chunk`, `message`, … `synthesis`, `done`.", headers={
                     **RUN_ID_HEADER, "X-Debate-Id": {"description": "The debate's id.", "schema": {"type": "string"}},
                     "X-Debate-Events": {"description": "Where to resume its events.", "schema": {"type": "string"}}}),
                 **errors((400, "The body is not a JSON object as declared; the message names the field."),
                          (401, "No key, an unknown key, or one without the `debate` scope."),
                          (402, "The budget (or the workspace's default) is too small for one round and the "
                                "verdict (`budget_too_small`, with `minimum`)."),
                          (403, "The key is read-only."), (413, f"The body exceeds {ROUTE_BODY_BYTES['/api/debate'] // 1024} KB."),
                          (429, "More than 8 debates a minute for this user; `retryAfter` says when to retry."),
                          (500, "The debate could not be started.")),
             })
async def start_debate(request: Request, principal: Starter, backend: Services) -> EventSourceResponse:
    await service.admit_debate(backend, principal.caller, request.client.host if request.client else "unknown")
    debate = parse_debate_request(await request.body())
    record = await service.start_duel(backend.runs, principal.caller, debate)
    return sse_response(backend.runs.follow(record["_id"]), keepalive=keepalive(request), headers={
        "X-Debate-Id": record["_id"], "X-Run-Id": record["_id"], "X-Debate-Events": service.events_url(record)})


@router.get("/api/debates", summary="The caller's debates, newest first",
            responses=errors((400, "A query parameter is invalid, or `cursor` is not one this route gave.")))
async def list_debates(
    principal: Reader,
    db: Db,
    limit: Annotated[int, Query(ge=1, le=100, description="Debates per page.")] = 20,
    cursor: Annotated[str | None, Query(description="`nextCursor` of the previous page.")] = None,
    page: Annotated[int | None, Query(ge=1, le=MAX_PAGE,
                                      description="1-based page number (instead of a cursor).")] = None,
) -> dict[str, Any]:
    try:
        return await service.list_debates(db, principal.caller, limit=limit, cursor=cursor, page=page)
    except ValueError as exc:
        raise ApiError(400, f"Invalid cursor: {exc}") from exc


@router.get("/api/debate/{debate_id}", summary="One of the caller's debates", responses=errors(404))
async def get_debate(debate_id: str, principal: Reader, db: Db) -> dict[str, Any]:
    return public_debate(await service.get_debate(db, principal, debate_id))


async def events_reader(request: Request, db: Db, token: str | None = None) -> Principal | None:
    """The key's principal, or None when the request carries only a stream token (browsers' EventSource)."""
    if token and not presented_key(request):
        return None
    return await require_scope("debate", denied_status=401)(await get_principal(request, db))


@router.get("/api/debate/{debate_id}/events", summary="Replay a debate's events, then follow it live",
            response_class=EventSourceResponse, responses={
    **streamed("The debate's events, each with its sequence number as `id:`."),
    **errors((400, "`Last-Event-ID` (or `lastEventId`) is not an integer."),
             (401, "No key and no stream token, an unknown key, or a wrong or expired stream token (it expires "
                   "PARLEY_STREAM_TOKEN_GRACE seconds, an hour by default, after the debate ended)."), 404, 503)},
    # A browser's EventSource cannot send headers: the debate's stream `token` stands in for the key.
    openapi_extra={"security": [{"bearer": []}, {"apiKey": []}, {}]})
async def debate_events(
    request: Request,
    debate_id: str,
    db: Db,
    engine: Engine,
    settings: AppSettings,
    principal: Annotated[Principal | None, Depends(events_reader)],
    token: Annotated[str | None, Query(description="The debate's stream token (for EventSource); it works while "
                                             "the debate runs and PARLEY_STREAM_TOKEN_GRACE seconds after.")] = None,
    last_event_id: Annotated[str | None, Query(alias="lastEventId", json_schema_extra={"pattern": EVENT_ID_PATTERN},
                                                    description="Resume after this event id (an integer).")] = None,
) -> EventSourceResponse:
    try:
        after = resume_after(request, last_event_id)
    except ValueError as exc:
        raise ApiError(400, "Last-Event-ID must be an integer event id") from exc
    try:
        record = await service.authorise_events(db, debate_id, principal=principal, token=token,
                                                token_grace=settings.parley_stream_token_grace)
    except DebateNotFound as exc:
        if principal is None:  # a wrong stream token is a failed authentication, not a missing debate
            raise ApiError(401, "Unauthorized") from exc
        raise
    return sse_response(engine.follow(record["_id"], after=after), keepalive=keepalive(request))
