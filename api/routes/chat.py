"""`POST /v1/chat/completions`: OpenAI-compatible chat completions, with Parley's debate and panel modes.

Planning, billing and starting the request's run are the services' (`services.panel`); this module answers with
the run's result as JSON, or relays its events as OpenAI's `chat.completion.chunk` stream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from parley.api.deps import Principal, Services, require_scope
from parley.api.errors import ApiError, run_error
from parley.api.openapi import RUN_ID_HEADER, errors, streamed
from parley.api.sse import RunStream
from parley.runs import RunEngine
from parley.runs.modes.panel import response_model
from parley.services import panel as panel_service
from parley.services.panel import ChatCompletionRequest
from parley.services.progress import progress_line

router = APIRouter(tags=["chat"])

ChatCaller = Annotated[Principal, Depends(require_scope("chat", write=True))]


@router.post("/v1/chat/completions", summary="Chat completion: one model, a router's list, a debate or a panel",
             responses={
                 **streamed("A `chat.completion`, or with `stream: true` its `chat.completion.chunk` events.",
                            json_too=True, headers=RUN_ID_HEADER),
                 **errors((400, "The body is invalid, `debate`/`panel` without a router, or a router whose models "
                                "cannot fill a panel of distinct families."),
                          (402, "The workspace's credit cannot cover the request's estimated cost."), 403,
                          (404, "`router/<id>` names no router of the workspace."),
                          (500, "An unexpected failure while answering; the server log has the cause."),
                          (502, "The model endpoint failed, or too few panelists answered.")),
             })
async def chat_completions(body: ChatCompletionRequest, backend: Services, caller: ChatCaller):
    # A JSON body, or an SSE response when `stream` is set; either carries the run's id in `X-Run-Id`. (No
    # docstring: FastAPI would publish it as the operation's description.)
    record = await panel_service.start_completion(backend, caller.caller, body)
    headers = {"X-Run-Id": record["_id"]}
    if body.stream:
        return stream_response(backend.runs, record, headers)
    return JSONResponse(await panel_service.completion_of(backend, record), headers=headers)


# --- streaming ------------------------------------------------------------------------------


def _data(payload: dict[str, Any]) -> ServerSentEvent:
    # OpenAI's stream has no `event:` names: the SDK reads every `data:` line as a chunk.
    return ServerSentEvent(data=json.dumps(payload, ensure_ascii=False, separators=(",", ":")))


def _error_event(err: ApiError) -> ServerSentEvent:
    # The SDK raises `openai.APIError` with this message when a stream carries an `error` object.
    return _data({"error": {"message": err.message, "type": err.type, "code": err.code, **err.extra}})


def tool_call_delta(piece: dict[str, Any]) -> dict[str, Any]:
    """A piece of a tool call as OpenAI streams it: `delta.tool_calls[0]` with its `index`, the call's `id`, type and
    name in its first piece, a fragment of its JSON arguments in every piece."""
    call: dict[str, Any] = {"index": piece["index"]}
    if piece.get("id"):
        call |= {"id": piece["id"], "type": "function"}
    call["function"] = {"name": piece["name"], "arguments": piece["arguments"]} if piece.get("name") else {
        "arguments": piece["arguments"]}
    return {"tool_calls": [call]}


def stream_response(engine: RunEngine, record: dict, headers: dict[str, str]) -> EventSourceResponse:
    """Relay the run's events as `chat.completion.chunk` events and progress comments; a client that hangs up before
    the answer is complete cancels the run (`api.sse.RunStream`)."""
    plan, completion = record["input"]["plan"], record["input"]["completion"]
    base = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"]}
    run = RunStream(engine, record["_id"])

    async def relay() -> AsyncIterator[ServerSentEvent]:
        model = response_model(plan, {})
        started = False

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> ServerSentEvent:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return _data({**base, "model": model, "choices": [choice], **extra})

        yield ServerSentEvent(comment=f"parley {plan['router_mode']} {completion['id']}")
        async for event in run.events():
            data = event.data
            if event.event == "chunk" or (event.event == "tool_call" and "speaker" not in data):
                delta = {"content": data["content"]} if event.event == "chunk" else tool_call_delta(data)
                if not started:
                    delta, started = {"role": "assistant", "content": None, **delta}, True
                yield chunk(delta)
            elif event.event == "done":
                done = data["completion"]
                yield chunk({}, done["choices"][0]["finish_reason"], usage=done["usage"], _meta=done["_meta"])
                yield ServerSentEvent(data="[DONE]")
            elif event.event == "error":  # the run's own error, or the stream's (storage failed: no id)
                yield _error_event(run_error(data.get("error") or data))
            elif event.event == "cancelled":
                yield _error_event(ApiError(499, data["message"], code="cancelled"))
            else:
                if event.event in ("answering", "decision") and plan["mode"] != "panel":
                    model = data.get("model") or model  # who is about to answer, or whose answer was chosen
                if line := progress_line("panel", event.event, data):
                    yield ServerSentEvent(comment=line)

    return run.response(relay(), headers)
