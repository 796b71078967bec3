"""Usage accounting: the ledger of a run's model calls, the callback that fills it and the process metrics, and the
one view of usage every resource shows (`usage_view`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from parley.core import metrics
from parley.llm.caching import was_cached
from parley.llm.failures import was_paid
from parley.llm.guards import CallRefused
from parley.llm.prices import Price
from parley.llm.tokens import approx_tokens


@dataclass
class UsageRecord:
    """Tokens and cost of one model call."""

    model: str
    input_tokens: int
    output_tokens: int
    cost: float
    priced: bool
    label: str | None = None
    estimated: bool = False
    node: str | None = None  # the workflow node that made the call, when a designer workflow did
    tool_calls: int = 0  # the tool calls the model's answer made
    cached_tokens: int = 0  # of `input_tokens`: read from the provider's prompt cache (priced at its cached rate)
    reasoning_tokens: int = 0  # of `output_tokens`: the model's hidden reasoning (priced as output)
    cached_cost: float = 0.0  # of `cost`: what the cached tokens cost
    reasoning_cost: float = 0.0  # of `cost`: what the reasoning tokens cost
    response_cache: bool = False  # answered from the response cache (`llm.caching`): no model was called, cost 0
    failed: bool = False  # the call failed after it was sent, and is billed all the same (`CallRecorder.on_llm_error`)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


# The figures of a record that add up per model (`UsageLedger.by_model`), and their names in a usage view.
_SUMMED = ("input_tokens", "output_tokens", "cost", "cached_tokens", "reasoning_tokens", "cached_cost",
           "reasoning_cost")


@dataclass
class UsageLedger:
    """Collects the usage of every model call of one run; nodes never touch it directly.

    `add` is the one way in: a subclass that must see each call as it happens (to store it, say)
    overrides it.
    """

    records: list[UsageRecord] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)  # workflow nodes that ran, in order, model calls or not

    def add(self, record: UsageRecord) -> None:
        self.records.append(record)

    def for_node(self, node: str) -> UsageLedger:
        """A ledger of one workflow node's calls, each also added to this ledger as it is made."""
        self._saw(node)
        return _NodeLedger(parent=self, node=node)

    def _saw(self, node: str) -> None:
        if node not in self.nodes:
            self.nodes.append(node)

    @property
    def total_tokens(self) -> int:
        return sum(r.total_tokens for r in self.records)

    @property
    def input_tokens(self) -> int:
        return sum(r.input_tokens for r in self.records)

    @property
    def cached_tokens(self) -> int:
        return sum(r.cached_tokens for r in self.records)

    @property
    def reasoning_tokens(self) -> int:
        return sum(r.reasoning_tokens for r in self.records)

    @property
    def total_cost(self) -> float:
        return sum(r.cost for r in self.records)

    @property
    def tool_calls(self) -> int:
        """The tool calls the recorded answers made (run by Parley for a debater, or returned to the caller)."""
        return sum(r.tool_calls for r in self.records)

    def tool_calls_of(self, model: str) -> int:
        return sum(r.tool_calls for r in self.records if r.model == model)

    def by_model(self) -> dict[str, dict[str, float]]:
        """Sum tokens and cost per model id: `input_tokens`, `output_tokens`, `cost`, `cached_tokens`,
        `reasoning_tokens`, `cached_cost`, `reasoning_cost` and `calls`."""
        out: dict[str, dict[str, float]] = {}
        for r in self.records:
            row = out.setdefault(r.model, dict.fromkeys(_SUMMED, 0) | {"calls": 0})
            for name in _SUMMED:
                row[name] += getattr(r, name)
            row["calls"] += 1
        return out

    def by_label(self) -> dict[str, int]:
        """Sum total tokens per label (an agent, a node, a round: whatever the caller tagged)."""
        out: dict[str, int] = {}
        for r in self.records:
            if r.label is not None:
                out[r.label] = out.get(r.label, 0) + r.total_tokens
        return out


@dataclass
class _NodeLedger(UsageLedger):
    parent: UsageLedger = field(default_factory=UsageLedger)
    node: str = ""

    def add(self, record: UsageRecord) -> None:
        record.node = self.node
        super().add(record)
        self.parent.add(record)

    def _saw(self, node: str) -> None:
        super()._saw(node)
        self.parent._saw(node)


COST_DECIMALS = 8  # USD is shown to 8 decimal places: a small model's call costs millionths of a dollar


def usd(cost: float) -> float:
    """A cost as every view shows it: USD rounded to `COST_DECIMALS` places."""
    return round(cost, COST_DECIMALS)


def usage_view(usage: UsageLedger | Iterable[UsageRecord], *, per_model: bool = False,
               per_node: bool = False) -> dict[str, Any]:
    """The usage of a ledger (or of some of its records) as Parley shows it: on a run, a workflow run and each of
    its nodes, a round-table turn.

    Returns:
        `inputTokens`, `outputTokens`, `totalTokens`, `costUsd` (`usd`), `calls`, and `toolCalls` when the answers
        made tool calls; `cachedTokens` (the part of `inputTokens` read from the provider's prompt cache) and
        `cachedCostUsd` (what they cost, at the cached price), `reasoningTokens` (the part of `outputTokens` the
        models spent reasoning) and `reasoningCostUsd`; with `per_model`, also `models`: a row per model in the
        order first called (`model`, `inputTokens`, `outputTokens`, `cachedTokens`, `reasoningTokens`, `costUsd`,
        `cachedCostUsd`, `reasoningCostUsd`, `calls`); with `per_node` (a ledger's workflow nodes), also `nodes`:
        each node that ran (model calls or not), in order, with the same view of its own calls.

    A wire contract spelling usage its own way (OpenAI's `usage`, the panel's `_meta`, the round table's message
    `usage`) takes its figures from this view.

    >>> usage_view([UsageRecord("openai:gpt-5", 10, 4, 0.0001, True)])  # doctest: +NORMALIZE_WHITESPACE
    {'inputTokens': 10, 'outputTokens': 4, 'totalTokens': 14, 'costUsd': 0.0001, 'calls': 1, 'cachedTokens': 0,
     'reasoningTokens': 0, 'cachedCostUsd': 0.0, 'reasoningCostUsd': 0.0}
    """
    ledger = usage if isinstance(usage, UsageLedger) else UsageLedger(list(usage))
    view: dict[str, Any] = {
        "inputTokens": ledger.input_tokens,
        "outputTokens": ledger.total_tokens - ledger.input_tokens,
        "totalTokens": ledger.total_tokens,
        "costUsd": usd(ledger.total_cost),
        "calls": len(ledger.records),
        **({"toolCalls": ledger.tool_calls} if ledger.tool_calls else {}),
        **paid_parts(ledger.records),
    }
    if per_model:
        view["models"] = [
            {"model": model, "inputTokens": int(row["input_tokens"]), "outputTokens": int(row["output_tokens"]),
             "cachedTokens": int(row["cached_tokens"]), "reasoningTokens": int(row["reasoning_tokens"]),
             "costUsd": usd(float(row["cost"])), "cachedCostUsd": usd(float(row["cached_cost"])),
             "reasoningCostUsd": usd(float(row["reasoning_cost"])), "calls": int(row["calls"])}
            for model, row in ledger.by_model().items()
        ]
    if per_node:
        nodes = dict.fromkeys([*ledger.nodes, *(r.node for r in ledger.records if r.node is not None)])
        view["nodes"] = {node: usage_view([r for r in ledger.records if r.node == node], per_model=per_model)
                         for node in nodes}
    return view


def paid_parts(records: Iterable[UsageRecord]) -> dict[str, Any]:
    """What some calls' figures hold besides plain tokens, in a usage view's names: `cachedTokens`,
    `reasoningTokens`, `cachedCostUsd`, `reasoningCostUsd` (a panelist's row in `_meta` shows them too)."""
    records = list(records)
    return {"cachedTokens": sum(r.cached_tokens for r in records),
            "reasoningTokens": sum(r.reasoning_tokens for r in records),
            "cachedCostUsd": usd(sum(r.cached_cost for r in records)),
            "reasoningCostUsd": usd(sum(r.reasoning_cost for r in records))}


@dataclass(frozen=True)
class ReportedUsage:
    """The tokens a server reported for one answer: prompt (`input`) and answer (`output`) tokens, and the parts of
    them read from the prompt cache (`cached`) and spent reasoning (`reasoning`)."""

    input: int = 0
    output: int = 0
    cached: int = 0
    reasoning: int = 0

    def __add__(self, other: ReportedUsage) -> ReportedUsage:
        return ReportedUsage(self.input + other.input, self.output + other.output, self.cached + other.cached,
                             self.reasoning + other.reasoning)

    def __bool__(self) -> bool:
        return bool(self.input or self.output)


def _detail(details: Any, name: str) -> int:
    """A count from LangChain's `input_token_details`/`output_token_details`; a priority or flex call names it
    `<tier>_<name>`, so every key ending in it is counted."""
    if not isinstance(details, dict):
        return 0
    return sum(int(v or 0) for k, v in details.items() if k == name or k.endswith(f"_{name}"))


def usage_from_message(message: Any) -> ReportedUsage:
    """The usage a LangChain message's `usage_metadata` reports (langchain-openai fills it from OpenAI's `usage`,
    streamed or not: `prompt_tokens_details.cached_tokens` as `input_token_details.cache_read`,
    `completion_tokens_details.reasoning_tokens` as `output_token_details.reasoning`)."""
    meta = getattr(message, "usage_metadata", None) or {}
    return ReportedUsage(int(meta.get("input_tokens", 0) or 0), int(meta.get("output_tokens", 0) or 0),
                         _detail(meta.get("input_token_details"), "cache_read"),
                         _detail(meta.get("output_token_details"), "reasoning"))


def usage_from_openai(token_usage: Any) -> ReportedUsage:
    """The usage of OpenAI's `usage` object (a result's raw `token_usage`)."""
    if not isinstance(token_usage, dict):
        return ReportedUsage()
    prompt = token_usage.get("prompt_tokens_details") or {}
    completion = token_usage.get("completion_tokens_details") or {}
    return ReportedUsage(int(token_usage.get("prompt_tokens", 0) or 0),
                         int(token_usage.get("completion_tokens", 0) or 0),
                         int(prompt.get("cached_tokens", 0) or 0) if isinstance(prompt, dict) else 0,
                         int(completion.get("reasoning_tokens", 0) or 0) if isinstance(completion, dict) else 0)


def usage_record(model: str, reported: ReportedUsage, price: Price, **rest: Any) -> UsageRecord:
    """The record of one call that reported `reported`, priced at `price`: cached prompt tokens at its cached rate,
    reasoning tokens as output."""
    cached = min(reported.cached, reported.input)
    reasoning = min(reported.reasoning, reported.output)
    return UsageRecord(model=model, input_tokens=reported.input, output_tokens=reported.output,
                       cost=price.cost(reported.input, reported.output, cached_tokens=cached), priced=price.known,
                       cached_tokens=cached, reasoning_tokens=reasoning,
                       cached_cost=price.cost(cached, 0, cached_tokens=cached),
                       reasoning_cost=price.cost(0, reasoning), **rest)


class CallRecorder(AsyncCallbackHandler):
    """Account for each model call: its token usage in the run's ledger (when there is one), and the
    process metrics (calls, tokens, cost, latency, time to first token) in `core.metrics`.

    Servers that report no usage for streamed calls (llama-cpp-python) get an estimate from the
    prompt and the answer, flagged `estimated`. Time to first token is the first streamed token's;
    a call that was not streamed has none, and counts its whole latency.
    """

    # Awaited in place: langchain-core otherwise wraps each event (every streamed token) in a task of its own.
    run_inline = True

    def __init__(self, ledger: UsageLedger | None, model_id: str, price: Price, label: str | None,
                 metric_label: str) -> None:
        self.ledger, self.model_id, self.price, self.label = ledger, model_id, price, label
        self.metric_label = metric_label  # the `model` label in /metrics: the id itself, or `other`
        # The prompt of each call, estimated only if the server reports no usage (a long transcript costs CPU).
        self._prompts: dict[Any, list[list[BaseMessage]]] = {}
        self._started: dict[Any, float] = {}
        self._first_token: dict[Any, float] = {}
        self._streamed: dict[Any, list[str]] = {}  # what each streamed call has sent so far, billed if it fails

    async def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], *, run_id: Any,
                                  **kwargs: Any) -> None:
        self._started[run_id] = time.perf_counter()
        self._prompts[run_id] = messages

    async def on_llm_new_token(self, token: str, *, run_id: Any, **kwargs: Any) -> None:
        self._first_token.setdefault(run_id, time.perf_counter())
        if token:
            self._streamed.setdefault(run_id, []).append(token)

    async def on_llm_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        """A failed call: billed all the same when the provider was paid for it (`llm.failures.was_paid`: sent and
        not refused, say cut off mid-answer or past its deadline), at an estimate of its prompt and of what it
        streamed before it failed; flagged `estimated` and `failed`."""
        started = self._started.pop(run_id, None)
        self._first_token.pop(run_id, None)
        prompts = self._prompts.pop(run_id, [])
        streamed = "".join(self._streamed.pop(run_id, []))
        record = None
        if was_paid(error):
            estimate = ReportedUsage(sum(approx_tokens(batch) for batch in prompts),
                                     approx_tokens([AIMessage(streamed)]) if streamed else 0)
            record = usage_record(self.model_id, estimate, self.price, label=self.label, estimated=True, failed=True)
            if self.ledger is not None:
                self.ledger.add(record)
        if started is not None and not isinstance(error, CallRefused):  # a refused call asked no model
            metrics.record_model_call(self.metric_label, ok=False, seconds=time.perf_counter() - started,
                                      **({} if record is None else {
                                          "input_tokens": record.input_tokens, "output_tokens": record.output_tokens,
                                          "cost": record.cost}))

    async def on_llm_end(self, response: LLMResult, *, run_id: Any = None, **kwargs: Any) -> None:
        ended = time.perf_counter()
        reported, made = ReportedUsage(), 0
        cached = False
        answer = []
        for generations in response.generations:
            for generation in generations:
                answer.append(generation.text or "")
                if isinstance(generation, ChatGeneration):
                    cached = cached or was_cached(generation.message)
                    reported += usage_from_message(generation.message)
                    calls = getattr(generation.message, "tool_calls", None) or []
                    made += len(calls) + len(getattr(generation.message, "invalid_tool_calls", None) or [])
                    answer.extend(json.dumps(call.get("args", {})) for call in calls)
        if not reported and response.llm_output:
            reported = usage_from_openai(response.llm_output.get("token_usage"))
        estimated = not reported
        prompts = self._prompts.pop(run_id, [])
        self._streamed.pop(run_id, None)
        if estimated:  # nothing reported: the prompt and the visible answer are all there is to count
            reported = ReportedUsage(sum(approx_tokens(batch) for batch in prompts),
                                     approx_tokens([AIMessage("".join(answer))]) if any(answer) else 0)
        record = usage_record(self.model_id, reported, self.price, label=self.label, estimated=estimated,
                              tool_calls=made)
        if cached:  # answered from the response cache: no model was called, nothing is paid
            record = replace(record, cost=0.0, cached_cost=0.0, reasoning_cost=0.0, response_cache=True)
        if self.ledger is not None:
            self.ledger.add(record)
        started = self._started.pop(run_id, ended)
        first_token = self._first_token.pop(run_id, None)
        metrics.record_model_call(
            self.metric_label, ok=True, seconds=ended - started,
            first_token_seconds=None if first_token is None else first_token - started,
            input_tokens=record.input_tokens, output_tokens=record.output_tokens, cost=record.cost,
            cached_tokens=record.cached_tokens, reasoning_tokens=record.reasoning_tokens,
        )


def monotonic_ms() -> float:
    """Milliseconds from a monotonic clock, for latency figures."""
    return time.monotonic() * 1000
