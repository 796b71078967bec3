"""OpenAI-compatible chat completions over panels: resolve the router, reserve credit, run the panel graph,
answer as JSON or as `chat.completion.chunk` events, then settle the credit and record usage.

Billing: every request whose models have a price reserves an estimate of its cost before any model is
called (402 when the workspace's balance cannot cover it) and settles to the actual cost afterwards,
failures included, so nothing beyond what was used is ever charged. The estimate of one call is
prompt tokens x input price + output cap x output price for the priciest model involved; a debate
reserves panel size + 1 such calls (about 4x), a raw panel panel-size calls (about 3x), a single-model
request one. Unpriced models cost 0, so requests using only them need no credit at all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask

from api.errors import ApiError
from api.services.routers import load_router
from api.sse import KEEPALIVE_SECONDS, SSE_HEADERS, CountedEventSourceResponse
from core.metrics import record_run
from core.telemetry import trace_config
from store import usage as usage_store
from store import workspaces as ws_store
from graphs.panel import graph as panel_graph
from nodes.models import ModelFactory, approx_tokens
from nodes.panel import (
    DEFAULT_MIN_SUCCESSES,
    DEFAULT_PANEL_SIZE,
    AllModelsFailedError,
    PanelContext,
    PanelError,
    TooFewFamiliesError,
    TooFewPanelistsError,
    pick_panelists,
    to_messages,
)

log = logging.getLogger("parley.panel")

# Output tokens assumed for the estimate when the request sets no cap.
ESTIMATE_OUTPUT_TOKENS = 1024

RouterMode = Literal["debate", "panel", "fallback", "direct"]


# --- request --------------------------------------------------------------------------------


class ChatMessage(BaseModel):
    """One message of the conversation, as OpenAI's API takes it."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _has_content(self) -> ChatMessage:
        if self.content is None or (isinstance(self.content, str) and not self.content.strip()):
            raise ValueError(f"a {self.role} message needs non-empty content")
        return self


class ChatCompletionRequest(BaseModel):
    """`POST /v1/chat/completions`: OpenAI's body plus Parley's `debate` and `panel` flags."""

    # Fields other OpenAI clients send (top_p, user, seed, ...) are accepted and not acted on.
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, description="`router/<id>`, `router/debate`, or a `provider:model` id.")
    messages: list[ChatMessage] = Field(min_length=1)
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
        for unsupported in ("tools", "functions", "tool_choice", "function_call"):
            if extra.get(unsupported):
                raise ValueError(f"'{unsupported}' is not supported by Parley's chat completions")
        return self

    @property
    def output_cap(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def openai_messages(self) -> list[dict[str, Any]]:
        return [m.model_dump(exclude_none=True) for m in self.messages]


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
    amount, per_call = estimate_cost(app.state.factory, plan, body)
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


# --- running --------------------------------------------------------------------------------


@dataclass
class Run:
    """One request in flight: who pays, what was reserved, and the usage ledger of its model calls."""

    app: FastAPI
    plan: Plan
    body: ChatCompletionRequest
    workspace: str
    user: str
    reserved: float
    context: PanelContext
    id: str
    created: int = field(default_factory=lambda: int(time.time()))
    started: float = field(default_factory=time.monotonic)

    @property
    def latency_ms(self) -> int:
        return round((time.monotonic() - self.started) * 1000)

    def graph_input(self) -> dict[str, Any]:
        return {
            "messages": self.body.openai_messages(),
            "models": self.plan.models,
            "panel_size": self.plan.panel_size,
            "allow_same_family": self.plan.allow_same_family,
            "arbitrators": self.plan.arbitrators,
            "mode": self.plan.mode,
            "system_prompt": self.plan.system_prompt,
            "arbitrator_prompt": self.plan.arbitrator_prompt,
            "temperature": self.body.temperature,
            "max_tokens": self.body.output_cap,
            "min_successes": min(DEFAULT_MIN_SUCCESSES, self.plan.panel_size),
        }

    async def finish(self) -> None:
        """Settle the reservation to the actual cost and store per-model usage rows."""
        ledger = self.context.ledger
        db = self.app.state.db
        if self.reserved > 0 or ledger.total_cost > 0:
            await ws_store.settle_credit(db, self.workspace, reserved=self.reserved, actual=ledger.total_cost)
        usage_mode = "chat" if self.plan.mode == "single" else self.plan.mode
        await usage_store.record_usage(db, workspace=self.workspace, user=self.user, request_id=self.id,
                                       mode=usage_mode, ledger=ledger)

    async def finish_shielded(self) -> None:
        """Run `finish` so that a cancelled request (a client gone mid-stream) still settles its credit."""
        await _shielded(self.app, self.finish())


async def _shielded(app: FastAPI, work: Awaitable[None]) -> None:
    task = asyncio.ensure_future(work)
    app.state.background.add(task)
    task.add_done_callback(app.state.background.discard)
    await asyncio.shield(task)


def api_error(exc: PanelError) -> ApiError:
    """Map a panel failure to the HTTP error the contract names."""
    if isinstance(exc, TooFewPanelistsError):
        return ApiError(502, str(exc), code="too_few_panelists",
                        extra={"panelists": [{k: v for k, v in p.items() if k not in ("answer", "index", "model_id")}
                                             for p in exc.panelists]})
    if isinstance(exc, AllModelsFailedError):
        code = "arbitrator_failed" if exc.role == "arbitrator" else "all_models_failed"
        return ApiError(502, str(exc), code=code, extra={"attempts": exc.attempts})
    if isinstance(exc, TooFewFamiliesError):
        return ApiError(400, str(exc), code="too_few_families")
    return ApiError(502, str(exc), code="panel_failed")


def response_model(run: Run, result: dict[str, Any]) -> str:
    if run.plan.mode == "panel":
        return "panel"
    if run.plan.mode == "debate":
        return result.get("arbitrator") or run.plan.arbitrators[0]
    return result.get("model_used") or run.plan.models[0]


def usage_body(run: Run) -> dict[str, int]:
    ledger = run.context.ledger
    return {"prompt_tokens": ledger.input_tokens, "completion_tokens": ledger.total_tokens - ledger.input_tokens,
            "total_tokens": ledger.total_tokens}


def meta_body(run: Run, result: dict[str, Any]) -> dict[str, Any]:
    """The `_meta` object of the seed contract: cost, tokens, latency and who answered.

    A panel filled by resampling (allowSameFamily) says so with `sameFamily: true`; its panelists' `model`
    is each seat's label (`local:smollm2`, `local:smollm2 #2`, ...).
    """
    ledger = run.context.ledger
    cost, tokens = round(ledger.total_cost, 8), ledger.total_tokens
    meta: dict[str, Any] = {"modelUsed": response_model(run, result), "routerMode": run.plan.router_mode,
                            "cost": cost, "tokensUsed": tokens, "latency": run.latency_ms}
    panelists = [{**p, "cost": round(p["cost"], 8)} for p in result.get("panelists", [])]
    same_family = {"sameFamily": True} if result.get("same_family") else {}
    if run.plan.mode == "debate":
        meta["debate"] = {"arbitrator": meta["modelUsed"], "panelists": panelists,
                          "totalTokens": tokens, "totalCost": cost, **same_family}
    elif run.plan.mode == "panel":
        meta["panel"] = {"models": panelists, "totalTokens": tokens, "totalCost": cost, **same_family}
    elif result.get("attempts"):
        meta["fallbacks"] = [{"model": a["model"], "error": a["error"]} for a in result["attempts"]]
    return meta


def completion_id(plan: Plan) -> str:
    if plan.mode == "panel":
        return f"panel-{int(time.time() * 1000)}"
    return "chatcmpl-" + uuid.uuid4().hex[:24]


async def chat_completion(
    app: FastAPI, body: ChatCompletionRequest, *, workspace: str, user: str
) -> dict[str, Any] | EventSourceResponse:
    """Answer one chat completion: a JSON body, or an SSE response when `stream` is set."""
    plan = await plan_request(app, body, workspace=workspace)
    reserved = await reserve(app, plan, body, workspace=workspace)
    run = Run(app=app, plan=plan, body=body, workspace=workspace, user=user, reserved=reserved,
              context=PanelContext(models=app.state.factory), id=completion_id(plan))
    if body.stream:
        return stream_response(run)
    try:
        config = trace_config(run.id, "panel", workspace, user)
        result = await panel_graph.ainvoke(run.graph_input(), config, context=run.context)
        record_run("panel", "completed")
    except PanelError as exc:
        log.warning("chat completion %s failed: %s", run.id, exc)
        record_run("panel", "failed")
        raise api_error(exc) from exc
    finally:
        await run.finish_shielded()
    return {
        "id": run.id,
        "object": "chat.completion",
        "created": run.created,
        "model": response_model(run, result),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result["answer"]},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": usage_body(run),
        "_meta": meta_body(run, result),
    }


# --- streaming ------------------------------------------------------------------------------


def _data(payload: dict[str, Any]) -> ServerSentEvent:
    # OpenAI's stream has no `event:` names: the SDK reads every `data:` line as a chunk.
    return ServerSentEvent(data=json.dumps(payload, ensure_ascii=False, separators=(",", ":")))


def _error_event(err: ApiError) -> ServerSentEvent:
    # The SDK raises `openai.APIError` with this message when a stream carries an `error` object.
    return _data({"error": {"message": err.message, "type": err.type, "code": err.code, **err.extra}})


def _comment(text: str) -> ServerSentEvent:
    return ServerSentEvent(comment=text)


def _progress(event: dict[str, Any]) -> str | None:
    """An SSE comment line for a graph event, or None for events that are not progress."""
    kind = event.get("event")
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


class _MidAnswerFailure(PanelError):
    """A model failed after some of its answer was streamed; the client cannot be given a clean answer."""


def stream_response(run: Run) -> EventSourceResponse:
    """Start the run now and relay its events over SSE.

    The run is a task of its own, not the response's generator: a client that hangs up before the
    first byte never starts that generator, and the credit must be settled all the same. When the
    response ends (finished, or the client gone) the run is cancelled if still going; it settles in
    its own `finally`.
    """
    events: asyncio.Queue[ServerSentEvent | None] = asyncio.Queue()
    driver = asyncio.ensure_future(drive_stream(run, events))
    run.app.state.background.add(driver)
    driver.add_done_callback(run.app.state.background.discard)

    async def relay() -> AsyncIterator[ServerSentEvent]:
        while (event := await events.get()) is not None:
            yield event

    async def stop_driver() -> None:
        driver.cancel()  # no-op when it already finished; otherwise nobody is reading the answer any more
        await asyncio.wait([driver])

    return CountedEventSourceResponse(relay(), ping=KEEPALIVE_SECONDS, headers=SSE_HEADERS,
                                      background=BackgroundTask(stop_driver))


async def drive_stream(run: Run, events: asyncio.Queue[ServerSentEvent | None]) -> None:
    """Run the graph, turning its events into `chat.completion.chunk` events and progress comments."""
    model = response_model(run, {})
    base = {"id": run.id, "object": "chat.completion.chunk", "created": run.created}
    started_answer = False
    result: dict[str, Any] = {}
    config = trace_config(run.id, "panel", run.workspace, run.user)

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> ServerSentEvent:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _data({**base, "model": model, "choices": [choice], **extra})

    events.put_nowait(_comment(f"parley {run.plan.router_mode} {run.id}"))
    try:
        async for kind, data in panel_graph.astream(run.graph_input(), config, context=run.context,
                                                     stream_mode=["custom", "values"]):
            if kind == "values":
                result = data
                continue
            event = data.get("event")
            if event == "chunk":
                delta = {"content": data["content"]}
                if not started_answer:
                    delta = {"role": "assistant", **delta}
                    started_answer = True
                events.put_nowait(chunk(delta))
                continue
            if event == "fallback" and data.get("partial") and started_answer:
                raise _MidAnswerFailure(
                    f"{data['model']} failed after part of its answer was streamed: {data['error']} "
                    f"({data['detail']}). Retry the request, or call without streaming to let the next "
                    "candidate answer in full.")
            if event == "answering" and run.plan.mode != "panel":
                model = data["model"]
            line = _progress(data)
            if line:
                events.put_nowait(_comment(line))
        events.put_nowait(chunk({}, "stop", usage=usage_body(run), _meta=meta_body(run, result)))
        events.put_nowait(ServerSentEvent(data="[DONE]"))
        record_run("panel", "completed")
    except asyncio.CancelledError:  # the client hung up mid-answer
        record_run("panel", "cancelled")
        raise
    except PanelError as exc:
        log.warning("streamed chat completion %s failed: %s", run.id, exc)
        record_run("panel", "failed")
        interrupted = isinstance(exc, _MidAnswerFailure)
        events.put_nowait(_error_event(
            ApiError(502, str(exc), code="answer_interrupted") if interrupted else api_error(exc)))
    except Exception:  # the 200 status is already sent: the client must still learn the answer is incomplete
        log.exception("streamed chat completion %s crashed", run.id)
        record_run("panel", "failed")
        events.put_nowait(_error_event(
            ApiError(500, "Internal error while answering; see the server log", code="internal_error")))
    finally:
        await run.finish_shielded()
        events.put_nowait(None)
