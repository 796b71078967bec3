"""`POST /v1/chat/completions`: OpenAI-compatible chat completions, with Parley's debate and panel modes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from api.deps import Principal, require_scope
from api.services import panel as panel_service
from api.services.panel import ChatCompletionRequest

router = APIRouter(tags=["chat"])

ChatCaller = Annotated[Principal, Depends(require_scope("chat", write=True))]


@router.post("/v1/chat/completions", summary="Chat completion: one model, a router's list, a debate or a panel")
async def chat_completions(body: ChatCompletionRequest, request: Request, caller: ChatCaller):
    return await panel_service.chat_completion(request.app, body, caller)
