"""Panel runs (the panel contract, docs/api.md): the panel graph behind one chat completion.

The run's events are the graph's own (`panelists`, `panelist` with each answer, `answering`, `fallback`,
`chunk`, `tool_call` with each piece of a tool call the answer makes; a debate's `decision`, with `review` and
`verdict` under the `rank` and `best-of-n` rules; `tool_call` and `tool_result` with a `speaker` for each tool a
panelist calls while it answers; `queued` when a call waits for its endpoint) and a last `done` carrying the whole `chat.completion` body,
`_meta` included (or `error`).
The credit reserved before the run (its `bill`, `services.billing`) is settled to the actual cost whatever way
it ends, and one usage row is written per model.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from parley.core import clock
from parley.core.limits import MAX_CHAT_MESSAGES, MAX_RESPONSE_CONVERSATION_BYTES
from parley.graphs.panel import graph as panel_graph
from parley.graphs.panel.steps import (
    AllModelsFailedError,
    InvalidStructuredAnswerError,
    PanelContext,
    PanelError,
    TooFewFamiliesError,
    TooFewPanelistsError,
    candidate_failures,
    is_panelist,
)
from parley.llm.usage import UsageLedger, usage_view, usd
from parley.runs.modes.base import Emit, ModeRun, Outcome, RunFailure, with_checkpointer
from parley.store import responses as responses_store

PROGRESS = ("panelists", "panelist", "answering", "fallback", "decision", "review", "verdict", "queued", "depth",
            "analysis")


class AnswerInterrupted(PanelError):
    """A model failed after some of its answer was streamed; the client cannot be given a clean answer."""


def response_model(plan: dict[str, Any], result: dict[str, Any]) -> str:
    """The `model` of the answer: "panel" for a raw panel, the model whose answer a debate returns (its arbitrator's,
    or the panelist's its rule chose), the model that answered otherwise (the first candidate before anyone has)."""
    if plan["mode"] == "panel" or result.get("degraded") or (result.get("decision") or {}).get("decidedBy") == "none":
        return "panel"
    if plan["mode"] == "debate":
        return (result.get("decision") or {}).get("model") or result.get("arbitrator") or plan["arbitrators"][0]
    return result.get("model_used") or plan["models"][0]


def answer_choice(result: dict[str, Any]) -> dict[str, Any]:
    """The completion's one choice: the answer's text, or its tool calls (content null when it says nothing else,
    `finish_reason` "tool_calls"), in OpenAI's shape."""
    calls = result.get("tool_calls") or []
    message: dict[str, Any] = {"role": "assistant", "content": result["answer"] or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls" if calls else "stop"}


def usage_body(ledger: UsageLedger) -> dict[str, Any]:
    """OpenAI's `usage` of the completion: the figures of `llm.usage.usage_view`, in OpenAI's names (the cached and
    reasoning parts in `prompt_tokens_details.cached_tokens` and `completion_tokens_details.reasoning_tokens`)."""
    view = usage_view(ledger)
    return {"prompt_tokens": view["inputTokens"], "completion_tokens": view["outputTokens"],
            "total_tokens": view["totalTokens"],
            "prompt_tokens_details": {"cached_tokens": view["cachedTokens"]},
            "completion_tokens_details": {"reasoning_tokens": view["reasoningTokens"]}}


def meta_body(plan: dict[str, Any], result: dict[str, Any], ledger: UsageLedger, latency_ms: int) -> dict[str, Any]:
    """The `_meta` object of the panel contract: cost, tokens, latency and who answered.

    Tokens and cost count what was paid: `cachedTokens` (prompt tokens read from the provider's prompt cache, at its
    cached price) and `reasoningTokens` (output spent reasoning), with what each cost (`cachedCostUsd`,
    `reasoningCostUsd`), in total and in a debate's or panel's totals; each panelist's row has its own
    `cachedTokens` and `reasoningTokens`.

    A panel filled by resampling (allowSameFamily) says so with `sameFamily: true`; its panelists' `model`
    is each seat's label (`local:smollm2`, `local:smollm2 #2`, ...). A debate adds its `rule` and `decision`
    (how it decided: `graphs.panel.rules`). Debates and raw panels add `analysis` (the disagreement map:
    `nodes.analysis`), `adaptive` (adaptive depth's path, when asked) and `status` (`status_body`).
    """
    view = usage_view(ledger)
    cost, tokens = view["costUsd"], view["totalTokens"]
    paid = {key: view[key] for key in ("cachedTokens", "reasoningTokens", "cachedCostUsd", "reasoningCostUsd")}
    meta: dict[str, Any] = {"modelUsed": response_model(plan, result), "routerMode": plan["router_mode"],
                            "cost": cost, "tokensUsed": tokens, **paid, "latency": latency_ms}
    panelists = [{**p, "cost": usd(p["cost"])} for p in result.get("panelists", [])]
    same_family = {"sameFamily": True} if result.get("same_family") else {}
    if plan["mode"] == "debate":
        meta["debate"] = {"arbitrator": meta["modelUsed"], "panelists": panelists,
                          "totalTokens": tokens, "totalCost": cost, **paid, **same_family}
    elif plan["mode"] == "panel":
        meta["panel"] = {"models": panelists, "totalTokens": tokens, "totalCost": cost, **paid, **same_family}
    elif result.get("attempts"):
        meta["fallbacks"] = [{"model": a["model"], "error": a["error"]} for a in result["attempts"]]
    if plan.get("housekeeping"):
        meta["housekeeping"] = plan["housekeeping"]
    if plan["mode"] == "debate" and result.get("decision"):
        meta["rule"], meta["decision"] = result["decision"]["rule"], result["decision"]
    if plan["mode"] != "single":
        if result.get("analysis"):
            meta["analysis"] = result["analysis"]
        if result.get("adaptive"):
            meta["adaptive"] = result["adaptive"]
        meta["status"] = status_body(result)
    return meta


def status_body(result: dict[str, Any]) -> dict[str, Any]:
    """What became of the request, machine-readable: `answered` (as asked) or `degraded` (the labelled answers came
    back because every arbitrator failed: `reason`), and every model that failed on the way (`failed`: panelists
    that did not answer, arbitrator candidates that did not either)."""
    failed = list(result.get("failures") or [])
    if not result.get("degraded"):  # the candidates that failed before the one that answered
        failed += candidate_failures(result.get("attempts") or [])
    return {"outcome": "degraded" if result.get("degraded") else "answered", "reason": result.get("degraded"),
            "failed": failed}


def panel_error(exc: BaseException) -> dict[str, Any]:
    """The error a failed panel run answers with: its HTTP status, message, machine code and details."""
    if isinstance(exc, RunFailure):  # what the engine says (past its deadline, say)
        return dict(exc.error)
    if isinstance(exc, AnswerInterrupted):
        return {"message": str(exc), "status": 502, "code": "answer_interrupted"}
    if isinstance(exc, TooFewPanelistsError):
        panelists = [{k: v for k, v in p.items() if k not in ("answer", "index", "model_id")} for p in exc.panelists]
        return {"message": str(exc), "status": 502, "code": "too_few_panelists", "panelists": panelists}
    if isinstance(exc, AllModelsFailedError):
        code = "arbitrator_failed" if exc.role == "arbitrator" else "all_models_failed"
        return {"message": str(exc), "status": 502, "code": code, "attempts": exc.attempts}
    if isinstance(exc, TooFewFamiliesError):
        return {"message": str(exc), "status": 400, "code": "too_few_families"}
    if isinstance(exc, InvalidStructuredAnswerError):
        return {"message": str(exc), "status": 502, "code": "invalid_structured_answer", "model": exc.model,
                "detail": exc.problem}
    if isinstance(exc, PanelError):
        return {"message": str(exc), "status": 502, "code": "panel_failed"}
    return {"message": "Internal error while answering; see the server log", "status": 500, "code": "internal_error"}


class PanelRun(ModeRun):
    """One chat completion: a debate (panel + arbitrator), a raw panel, or one model with fallbacks."""

    kind = "panel"
    checkpointed = False  # about a second long: after a crash it starts over rather than save every step
    store_every = 2.0  # its events serve listeners elsewhere (the route follows it from memory): a batch every 2 s
    steerable = False  # one question, answered in about a second: no boundary to take a person's input at

    def __init__(self, record: dict[str, Any], services: Any) -> None:
        super().__init__(record, services)
        self.plan = self.input["plan"]
        self.answering = False  # some of the answer has streamed
        self.earlier: list[dict[str, Any]] = []  # the stored conversation it continues (`prepare`)

    def graph(self, checkpointer: BaseCheckpointSaver | None) -> Pregel:
        return with_checkpointer(panel_graph, checkpointer)

    def context(self, ledger: UsageLedger) -> PanelContext:
        return PanelContext(models=self.services.factory, ledger=ledger, tools=self.tool_access(),
                            streamed=bool(self.input.get("streamed")))

    async def prepare(self) -> None:
        """A stored response's conversation that the run continues (`history`: the run's input names the response
        instead of holding it), read back from its chain."""
        if not (history := self.input.get("history")):
            return
        try:
            self.earlier, _ = await responses_store.conversation(
                self.services.db, response_id=history["response"], workspace=self.record["workspace"],
                max_messages=MAX_CHAT_MESSAGES, max_bytes=MAX_RESPONSE_CONVERSATION_BYTES)
        except responses_store.ChainBroken as exc:
            raise RunFailure(f"The conversation this response continues cannot be read: {exc}", status=404,
                             code="response_chain_broken") from None
        except responses_store.TooLong as exc:
            raise RunFailure(f"The conversation this response continues holds {exc}", status=400,
                             code="conversation_too_long") from None

    def graph_input(self) -> dict[str, Any]:
        graph = dict(self.input["graph"])
        if self.earlier:
            at = self.input["history"]["at"]
            graph["messages"] = [*graph["messages"][:at], *self.earlier, *graph["messages"][at:]]
        return graph

    def translate(self, mode: str, part: Any) -> Iterable[Emit]:
        kind = part.get("event")
        if kind in ("tool_call", "tool_result") and is_panelist(part.get("speaker")):
            yield Emit(kind, {k: v for k, v in part.items() if k != "event"})  # a step, not the answer
        elif kind == "chunk":
            self.answering = True
            yield Emit("chunk", {"content": part["content"]})
        elif kind == "tool_call":
            self.answering = True
            yield Emit("tool_call", {key: part[key] for key in ("index", "id", "name", "arguments")})
        elif kind == "fallback" and part.get("partial") and self.answering and self.input.get("streamed"):
            raise AnswerInterrupted(
                f"{part['model']} failed after part of its answer was streamed: {part['error']} ({part['detail']}). "
                "Retry the request, or call without streaming to let the next candidate answer in full.")
        elif kind in PROGRESS:
            if kind == "fallback" and part.get("partial"):
                self.answering = False  # the next candidate's answer starts over
            yield Emit(kind, {k: v for k, v in part.items() if k != "event"})

    @property
    def latency_ms(self) -> int:
        return round((clock.now() - self.record["createdAt"]).total_seconds() * 1000)

    async def completed(self, state: dict[str, Any], ledger: UsageLedger) -> Outcome:
        await self.settle(ledger)
        completion = {
            "id": self.input["completion"]["id"],
            "object": "chat.completion",
            "created": self.input["completion"]["created"],
            "model": response_model(self.plan, state),
            "choices": [answer_choice(state)],
            "usage": usage_body(ledger),
            "_meta": meta_body(self.plan, state, ledger, self.latency_ms),
        }
        return Outcome("completed", [Emit("done", {"completion": completion})], result=completion)

    async def failed(self, exc: BaseException, ledger: UsageLedger) -> Outcome:
        await self.settle(ledger)
        error = panel_error(exc)
        return Outcome("failed", [Emit("error", {"error": error})], error=error)

    async def cancelled(self, ledger: UsageLedger) -> Outcome:
        await self.settle(ledger)
        return Outcome("cancelled", [Emit("cancelled", {"message": "Chat completion cancelled"})])
