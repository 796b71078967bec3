"""`/v1/responses`: OpenAI's Responses API over every model and router, a response being a chat completion's run.

Translating the request, starting the run and reading its answer are the services' (`services.responses`); this
module answers with the `response` object as JSON, or streams its events as the Responses API's SSE events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from parley.api.deps import Principal, Services, require_scope
from parley.api.openapi import RUN_ID_HEADER, errors, streamed
from parley.api.sse import RunStream
from parley.runs import RunEngine
from parley.services import responses as responses_service
from parley.services.responses import ResponsesRequest, ResponseStream, Started

router = APIRouter(tags=["responses"])

Writer = Annotated[Principal, Depends(require_scope("chat", write=True))]
Reader = Annotated[Principal, Depends(require_scope("chat"))]
ResponseId = Annotated[str, Path(min_length=1, max_length=200, description="The response's id (`resp_…`).")]


@router.post("/v1/responses", summary="Create a response: one model, a router's list, a debate or a panel",
             responses={
                 **streamed("A `response` object, or with `stream: true` the Responses API's events "
                            "(`response.created` … `response.completed`).", json_too=True, headers=RUN_ID_HEADER),
                 **errors((400, "The body is invalid (the message names the field; a tool that is not a function, "
                                "an unsupported parameter, a conversation whose calls and outputs do not fit), a "
                                "previous response with no answer, or a router that cannot fill its panel."),
                          (402, "The workspace's credit cannot cover the request's estimated cost."), 403,
                          (404, "`router/<id>` names no router of the workspace, `previous_response_id` no "
                                "stored response the key may see (`response_not_found`), or one whose conversation "
                                "misses a response deleted or expired (`response_chain_broken`)."),
                          (413, "The response would take the workspace's stored responses past "
                                "`PARLEY_WORKSPACE_MAX_STORED_BYTES` (`storage_quota_exceeded`); nothing is stored."),
                          (500, "An unexpected failure while answering; the server log has the cause."),
                          (502, "The model endpoint failed, or too few panelists answered.")),
             })
async def create_response(body: ResponsesRequest, backend: Services, caller: Writer):
    # A JSON body, or an SSE response when `stream` is set; either carries the run's id in `X-Run-Id`. (No
    # docstring: FastAPI would publish it as the operation's description.)
    started = await responses_service.start_response(backend, caller, body)
    headers = {"X-Run-Id": started.run_id}
    if body.stream:
        return stream_response(backend.runs, started, headers)
    return JSONResponse(await responses_service.response_of(backend, started), headers=headers)


@router.get("/v1/responses/{response_id}", summary="A stored response, in whatever state its run is",
            responses=errors((404, "No stored response with this id that the key may see (one made with "
                                   "`store: false` is not kept).")))
async def get_response(response_id: ResponseId, backend: Services, caller: Reader) -> dict[str, Any]:
    return await responses_service.retrieve(backend, caller, response_id)


@router.delete("/v1/responses/{response_id}", summary="Delete a stored response (its run stays)",
               responses=errors(403, (404, "No stored response with this id that the key may see.")))
async def delete_response(response_id: ResponseId, backend: Services, caller: Writer) -> dict[str, Any]:
    return await responses_service.delete(backend, caller, response_id)


def _event(payload: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(event=payload["type"], data=json.dumps(payload, ensure_ascii=False, separators=(",", ":")))


def stream_response(engine: RunEngine, started: Started, headers: dict[str, str]) -> EventSourceResponse:
    """Relay the run's events as the Responses API's events (`ResponseStream`) and progress comments; a client that
    hangs up before the answer is complete cancels the run (`api.sse.RunStream`)."""
    plan = started.record["input"]["plan"]
    run = RunStream(engine, started.run_id)

    async def relay() -> AsyncIterator[ServerSentEvent]:
        stream = ResponseStream(started)
        yield ServerSentEvent(comment=f"parley {plan['router_mode']} {started.response_id}")
        for payload in stream.opening():
            yield _event(payload)
        async for event in run.events():
            for out in stream.translate(event):
                yield ServerSentEvent(comment=out) if isinstance(out, str) else _event(out)

    return run.response(relay(), headers)
