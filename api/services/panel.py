"""OpenAI-compatible chat completions over panels: resolve the router, reserve credit, start the panel run,
answer as JSON or as `chat.completion.chunk` events (the run settles the credit and records usage).

Billing: every request whose models have a price reserves an estimate of its cost before any model is
called (402 when the workspace's balance cannot cover it) and settles to the actual cost afterwards,
failures included, so nothing beyond what was used is ever charged. The estimate of one call is
prompt tokens x input price + output cap x output price for the priciest model involved; a debate
reserves panel size + 1 such calls (about 4x), a raw panel panel-size calls (about 3x), a single-model
request one. Unpriced models cost 0, so requests using only them need no credit at all.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask

from api.deps import Principal
from api.errors import ApiError, run_error
from api.services.routers import load_router
from api.sse import KEEPALIVE_SECONDS, SSE_HEADERS, CountedEventSourceResponse
from core.limits import DEFAULT_MIN_SUCCESSES, DEFAULT_PANEL_SIZE, MAX_CHAT_MESSAGES
from llm.client import off_loop
from llm.factory import ModelFactory
from llm.tokens import approx_tokens
from nodes.panel import TooFewFamiliesError, pick_panelists, to_messages
from runs import RunEngine
from runs.modes.panel import response_model, start_panel
from store import workspaces as ws_store

log = logging.getLogger("parley.panel")

# Output tokens assumed for the estimate when the request sets no cap.
ESTIMATE_OUTPUT_TOKENS = 1024

RouterMode = Literal["debate", "panel", "fallback", "direct"]


# --- request --------------------------------------------------------------------------------


def _content_required(schema: dict[str, Any]) -> None:
    schema["required"] = [*schema.get("required", []), "content"]


UNSUPPORTED = ("tools", "functions", "tool_choice", "function_call")


def _declare_no_tools(schema: dict[str, Any]) -> None:
    """`_no_tools` refuses these fields unless they are empty (falsy): say so in the JSON Schema."""
    for name in UNSUPPORTED:
        schema["properties"][name] = {"enum": [None, False, 0, "", [], {}],
                                      "description": "Not supported: only an empty value is accepted."}


class ChatMessage(BaseModel):
    """One message of the conversation, as OpenAI's API takes it."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_content_required)

    role: Literal["system", "developer", "user", "assistant"]
    # `_has_content` refuses a missing, null or blank content, so only non-blank text or parts are declared.
    content: Annotated[str | list[dict[str, Any]] | None, WithJsonSchema({"anyOf": [
        {"type": "string", "pattern": r"\S"}, {"type": "array", "items": {"type": "object"}}]})] = None
    name: str | None = None

    @model_validator(mode="after")
    def _has_content(self) -> ChatMessage:
        if self.content is None or (isinstance(self.content, str) and not self.content.strip()):
            raise ValueError(f"a {self.role} message needs non-empty content")
        return self



class ChatCompletionRequest(BaseModel):
    """`POST /v1/chat/completions`: OpenAI's body plus Parley's `debate` and `panel` flags."""

    # Fields other OpenAI clients send (top_p, user, seed, ...) are accepted and not acted on.
    model_config = ConfigDict(extra="allow", json_schema_extra=_declare_no_tools)

    model: str = Field(min_length=1, description="`router/<id>`, `router/debate`, or a `provider:model` id.")
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_CHAT_MESSAGES)
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int | None = Field(None, ge=1, le=1, description="Parley answers with one choice.")
    debate: bool | None = Field(None, description="Debate this request (true) or not (false), whatever the router says")
    panel: bool | None = Field(None, description="Return every panelist's answer, labelled, without arbitration.")

    @model_validator(mode="after")
    def _no_tools(self) -> ChatCompletionRequest:
        extra = self.model_extra or {}
        for unsupported in UNSUPPORTED:
            if extra.get(unsupported):
                raise ValueError(f"'{unsupported}' is not supported by Parley's chat completions")
        return self

    @property
    def output_cap(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def openai_messages(self) -> list[dict[str, Any]]:
        # Only what a model reads: other keys a client sends are accepted (as OpenAI's API does) and dropped.
        return [m.model_dump(include={"role", "content", "name"}, exclude_none=True) for m in self.messages]


# --- planning -------------------------------------------------------------------------------


@dataclass
class Plan:
    """What one request will do, decided before any model is called."""

    mode: Literal["debate", "panel", "single"]
    router_mode: RouterMode
    models: list[str]
    panelists: list[str] = field(default_factory=list)
    arbitrators: list[str] = field(default_factory=list)
    panel_size: int = DEFAULT_PANEL_SIZE
    allow_same_family: bool = False
    system_prompt: str | None = None
    arbitrator_prompt: str | None = None

    @property
    def calls(self) -> int:
        """Model calls the request makes when nothing fails."""
        if self.mode == "debate":
            return len(self.panelists) + 1
        return len(self.panelists) if self.mode == "panel" else 1

    @property
    def priced_models(self) -> list[str]:
        if self.mode == "single":
            return self.models
        return self.panelists + (self.arbitrators if self.mode == "debate" else [])


async def plan_request(app: FastAPI, body: ChatCompletionRequest, *, workspace: str) -> Plan:
    """Resolve the target (router, preset or plain model) and the mode; 400/404 for what cannot run."""
    settings = app.state.settings
    if not body.model.startswith("router/"):
        if body.debate or body.panel:
            raise ApiError(400, f"'debate' and 'panel' need a router: use model 'router/debate' or 'router/<id>', "
                                f"not '{body.model}'", code="router_required")
        return Plan(mode="single", router_mode="direct", models=[body.model])

    router_id = body.model.removeprefix("router/")
    router = await load_router(app.state.db, settings, workspace=workspace, router_id=router_id)
    debate = router.get("debate", False) if body.debate is None else body.debate
    mode = "panel" if body.panel else "debate" if debate else "single"
    plan = Plan(
        mode=mode,
        router_mode="fallback" if mode == "single" else mode,
        models=list(router["models"]),
        arbitrators=list(dict.fromkeys(m for m in (router.get("arbitrator"), settings.arbitrator_model) if m)),
        panel_size=router.get("panel_size", DEFAULT_PANEL_SIZE),
        allow_same_family=router.get("allow_same_family", False),
        system_prompt=router.get("system_prompt"),
        arbitrator_prompt=router.get("arbitrator_prompt"),
    )
    if mode != "single":
        try:
            plan.panelists = pick_panelists(plan.models, plan.panel_size, allow_same_family=plan.allow_same_family)
        except TooFewFamiliesError as exc:
            raise ApiError(400, f"Router '{router['id']}' cannot run a {mode}: {exc}", code="too_few_families") from exc
    return plan


def estimate_cost(factory: ModelFactory, plan: Plan, body: ChatCompletionRequest) -> tuple[float, float]:
    """Return (reservation, estimate of one call) in USD."""
    prompt_tokens = approx_tokens(to_messages(body.openai_messages(), plan.system_prompt))
    output_tokens = body.output_cap or ESTIMATE_OUTPUT_TOKENS
    per_call = max((factory.price(m).cost(prompt_tokens, output_tokens) for m in plan.priced_models), default=0.0)
    return per_call * plan.calls, per_call


async def reserve(app: FastAPI, plan: Plan, body: ChatCompletionRequest, *, workspace: str) -> float:
    """Reserve the estimated cost from the workspace's credit; 402 when the balance cannot cover it."""
    # Converting and counting a long conversation takes a while: not on the loop that serves every other request.
    amount, per_call = await off_loop(len(body.messages), estimate_cost, app.state.factory, plan, body)
    if amount <= 0:
        return 0.0
    if await ws_store.reserve_credit(app.state.db, workspace, amount):
        return amount
    balance = (await ws_store.get_workspace(app.state.db, workspace)).get("creditUsd", 0.0)
    what = {"debate": "a debate", "panel": "a panel", "single": "this request"}[plan.mode]
    raise ApiError(
        402,
        f"Insufficient credits: {what} reserves ${amount:.6f} ({plan.calls} x ${per_call:.6f}, the estimated cost of "
        f"one call) and workspace '{workspace}' has ${balance:.6f}. "
        f"Add credit with `parley workspaces credit {workspace} --add USD`.",
        code="insufficient_credits",
    )


# --- running ----------------------------------------------------------------------------------


def graph_input(plan: Plan, body: ChatCompletionRequest) -> dict[str, Any]:
    """The panel graph's input for this request."""
    return {
        "messages": body.openai_messages(),
        "models": plan.models,
        "panel_size": plan.panel_size,
        "allow_same_family": plan.allow_same_family,
        "arbitrators": plan.arbitrators,
        "mode": plan.mode,
        "system_prompt": plan.system_prompt,
        "arbitrator_prompt": plan.arbitrator_prompt,
        "temperature": body.temperature,
        "max_tokens": body.output_cap,
        "min_successes": min(DEFAULT_MIN_SUCCESSES, plan.panel_size),
    }


async def chat_completion(app: FastAPI, body: ChatCompletionRequest, principal: Principal) -> Any:
    """Answer one chat completion: a JSON body, or an SSE response when `stream` is set. Either carries the
    run's id in `X-Run-Id`."""
    plan = await plan_request(app, body, workspace=principal.workspace)
    reserved = await reserve(app, plan, body, workspace=principal.workspace)
    engine: RunEngine = app.state.runs
    question = next((m.content for m in reversed(body.messages) if m.role == "user" and isinstance(m.content, str)),
                    body.model)
    async with ws_store.released_on_failure(app.state.db, principal.workspace, credit=reserved):
        record = await start_panel(engine, principal.caller, graph_input=graph_input(plan, body),
                                   plan=dataclasses.asdict(plan), reserved=reserved, question=question,
                                   streamed=body.stream)
    headers = {"X-Run-Id": record["_id"]}
    if body.stream:
        return stream_response(engine, record, headers)
    finished = await engine.wait(record["_id"])
    if finished["status"] != "completed":
        log.warning("chat completion %s failed: %s", record["_id"], (finished.get("error") or {}).get("message"))
        raise run_error(finished.get("error") or {"message": "The request was cancelled", "status": 499},
                        run_id=record["_id"])
    return JSONResponse(finished["result"], headers=headers)


# --- streaming ------------------------------------------------------------------------------


def _data(payload: dict[str, Any]) -> ServerSentEvent:
    # OpenAI's stream has no `event:` names: the SDK reads every `data:` line as a chunk.
    return ServerSentEvent(data=json.dumps(payload, ensure_ascii=False, separators=(",", ":")))


def _error_event(err: ApiError) -> ServerSentEvent:
    # The SDK raises `openai.APIError` with this message when a stream carries an `error` object.
    return _data({"error": {"message": err.message, "type": err.type, "code": err.code, **err.extra}})


def _progress(kind: str, event: dict[str, Any]) -> str | None:
    """An SSE comment line for a progress event of the run, or None for events that are not progress."""
    if kind == "panelists":
        return "panel: " + ", ".join(event["models"])
    if kind == "panelist":
        if event["success"]:
            return f"panelist {event['model']} answered in {event['latencyMs']} ms ({event['tokens']} tokens)"
        return f"panelist {event['model']} failed: {event['error']} ({event.get('detail', '')})"
    if kind == "answering":
        return f"{event['role']} {event['model']} is answering"
    if kind == "fallback":
        return f"{event['role']} {event['model']} failed: {event['error']} ({event['detail']}); trying the next one"
    return None


def stream_response(engine: RunEngine, record: dict, headers: dict[str, str]) -> EventSourceResponse:
    """Relay the run's events as `chat.completion.chunk` events and progress comments.

    A client that hangs up before the answer is complete cancels the run (nobody reads the answer any
    more); the run still settles its credit for what was used.
    """
    run_id, plan, completion = record["_id"], record["input"]["plan"], record["input"]["completion"]
    base = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"]}

    async def relay() -> AsyncIterator[ServerSentEvent]:
        model = response_model(plan, {})
        started = False

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> ServerSentEvent:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return _data({**base, "model": model, "choices": [choice], **extra})

        yield ServerSentEvent(comment=f"parley {plan['router_mode']} {completion['id']}")
        async for batch in engine.follow(run_id):
            for event in batch:
                data = event.data
                if event.event == "chunk":
                    delta = {"content": data["content"]}
                    if not started:
                        delta, started = {"role": "assistant", **delta}, True
                    yield chunk(delta)
                elif event.event == "done":
                    done = data["completion"]
                    yield chunk({}, "stop", usage=done["usage"], _meta=done["_meta"])
                    yield ServerSentEvent(data="[DONE]")
                elif event.event == "error":  # the run's own error, or the stream's (storage failed)
                    yield _error_event(run_error(data.get("error") or data))
                elif event.event == "cancelled":
                    yield _error_event(ApiError(499, data["message"], code="cancelled"))
                else:
                    if event.event == "answering" and plan["mode"] != "panel":
                        model = data["model"]
                    if line := _progress(event.event, data):
                        yield ServerSentEvent(comment=line)

    async def cancel_unfinished() -> None:
        await engine.cancel(run_id)  # a run that has ended is left as it is

    return CountedEventSourceResponse(relay(), ping=KEEPALIVE_SECONDS, headers={**SSE_HEADERS, **headers},
                                      background=BackgroundTask(cancel_unfinished))
