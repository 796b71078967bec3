"""`POST /v1/chat/completions`: OpenAI-compatible chat completions, with Parley's debate and panel modes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from api.deps import Principal, require_scope
from api.openapi import RUN_ID_HEADER, errors, streamed
from api.services import panel as panel_service
from api.services.panel import ChatCompletionRequest

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
async def chat_completions(body: ChatCompletionRequest, request: Request, caller: ChatCaller):
    return await panel_service.chat_completion(request.app, body, caller)
