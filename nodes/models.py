"""Model layer: provider table, model families, prices, usage accounting and the one chat-model factory.

Every model call in Parley goes through `ModelFactory.chat` or `ModelFactory.structured`, which
build `langchain_openai.ChatOpenAI` clients for an OpenAI-compatible endpoint. Provider quirks
(token-limit parameter, structured-output method, context window) live in `BUILTIN_PROVIDERS`
and nowhere else.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, trim_messages
from langchain_core.output_parsers import PydanticOutputParser
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.runnables import Runnable, RunnableBinding, RunnableConfig
from langchain_core.runnables.config import ensure_config, merge_configs
from langchain_openai import ChatOpenAI
from openai import DefaultAsyncHttpxClient
from pydantic import BaseModel, Field

from core import metrics
from core.limits import OFF_LOOP_MESSAGES
from core.settings import Settings, get_settings
from nodes.failures import (
    IncompleteAnswerError,
    ModelDeadlineError,
    ModelError,
    ModelIdleError,
    register_secret,
    scrub_failure,
)

SchemaT = TypeVar("SchemaT", bound=BaseModel)
ResultT = TypeVar("ResultT")

DEFAULT_PROVIDER = "openai"


class Provider(BaseModel):
    """How to reach one provider and which OpenAI-API dialect it speaks."""

    base_url: str | None = Field(None, description="Endpoint; None means OPENAI_BASE_URL (or OpenAI's).")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the key.")
    token_param: Literal["max_completion_tokens", "max_tokens"] = Field(
        "max_completion_tokens",
        description="Which field carries the output cap: OpenAI's current one, or the legacy `max_tokens` that "
        "servers such as llama-cpp-python and older vLLM honour instead.",
    )
    structured_method: Literal["json_schema", "json_object_schema", "function_calling"] = Field(
        "json_schema",
        description="`json_schema` (OpenAI structured outputs), `json_object_schema` "
        "(`{type: json_object, schema}`, llama-cpp-python's grammar mode) or `function_calling`.",
    )
    stream_usage: bool = Field(True, description="Whether the server honours `stream_options.include_usage`.")
    context_window: int | None = Field(None, description="Tokens the model accepts; prompts are trimmed to fit.")
    max_output_tokens: int | None = Field(None, description="Hard cap on output tokens, whatever a node asks.")
    max_temperature: float | None = Field(None, description="Temperatures above this are lowered to it.")
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="Extra request fields the server understands (sampling knobs)."
    )


# The embedded model is tiny: a hard output cap, a cool temperature ceiling and a context guard keep
# it from rambling or overflowing llama.cpp's 2048-token window.
BUILTIN_PROVIDERS: dict[str, Provider] = {
    "openai": Provider(),
    "local": Provider(
        api_key_env="PARLEY_LOCAL_API_KEY",
        token_param="max_tokens",
        stream_usage=False,  # llama-cpp-python ignores stream_options; usage is estimated instead
        structured_method="json_object_schema",
        context_window=2048,
        max_output_tokens=768,
        max_temperature=1.0,
        # SmolLM2-135M loops on a phrase without a repetition penalty (llama.cpp's own field).
        extra_body={"repeat_penalty": 1.3},
    ),
}


# --- model families -------------------------------------------------------------------------

# Words that name a size, tier or release channel of a model rather than its lineage.
_VARIANT_WORDS = {
    "mini", "nano", "pro", "flash", "lite", "turbo", "preview", "latest", "exp", "experimental",
    "instruct", "chat", "it", "hf", "sonnet", "opus", "haiku", "maverick", "scout", "large",
    "medium", "small", "tiny", "plus", "max", "coder", "vision", "online", "fast", "thinking",
    "base", "free", "beta", "nitro", "fp8", "gguf", "awq", "q4", "q8",
}
_DATE = re.compile(r"[-@_]?(\d{4}-\d{2}-\d{2}|\d{4}_\d{2}_\d{2})|-\d{2}-\d{2}$")
_NOISE_TOKEN = re.compile(
    r"^(\d{4,8}"  # date stamps and version tags: 0125, 1106, 20240620
    r"|v\d+(\.\d+)*"  # v1, v2.5
    r"|\d+(\.\d+)?[bm]"  # parameter counts: 8b, 1.5b, 135m
    r"|a\d+(\.\d+)?b"  # active parameters: a22b
    r"|\d+x\d+(\.\d+)?b"  # mixture sizes: 8x7b
    r"|e\d+b"  # effective sizes: e4b
    r"|\d+k"  # context sizes: 4k, 128k
    r")$"
)


def split_model_id(model_id: str) -> tuple[str | None, str]:
    """Split `provider:model` into its parts; a bare name has no provider."""
    head, sep, tail = model_id.partition(":")
    if sep and re.fullmatch(r"[a-z][a-z0-9_.-]*", head) and tail:
        return head, tail
    return None, model_id


def model_family(model_id: str) -> str:
    """Return the family of a model: equal for variants of one lineage, different across lineages.

    Variant suffixes (size tiers such as -mini/-pro/-flash, release channels such as -preview,
    date stamps, version tags, parameter counts, `:free`-style routing tags and vendor paths) are
    stripped, and dots become dashes so `claude-3.5` and `claude-3-5` agree.

    >>> model_family("openai:gpt-5-mini") == model_family("openai:gpt-5")
    True
    >>> model_family("anthropic:claude-sonnet-4-5-20250929")
    'claude-4-5'
    """
    _, name = split_model_id(model_id.strip())
    name = name.lower().split("@", 1)[0]  # Vertex-style "@20240620" stamps
    name = name.split(":", 1)[0]  # routing tags like ":free" or Bedrock's ":0"
    name = name.rsplit("/", 1)[-1]  # gateway vendor paths: "meta-llama/llama-4-scout"
    name = re.sub(r"^[a-z]+\.(?=[a-z])", "", name)  # Bedrock vendor prefixes: "anthropic.claude-…"
    name = _DATE.sub("", name)
    name = re.sub(r"(?<=\d)\.(?=\d)", "-", name)
    tokens = [t for t in re.split(r"[-_\s]+", name) if t]
    kept = [t for t in tokens if t not in _VARIANT_WORDS and not _NOISE_TOKEN.match(t)]
    return "-".join(kept or tokens) or name


# --- prices and usage -----------------------------------------------------------------------

# USD per one million (input, output) tokens, keyed by model name without provider.
BUILTIN_PRICES: dict[str, tuple[float, float]] = {
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "claude-opus-4-5": (5.00, 25.00),
    "claude-sonnet-4-5": (3.00, 15.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "gemini-2.5-pro": (1.25, 10.00),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-flash-lite": (0.10, 0.40),
    "gemini-2.0-flash": (0.10, 0.40),
    "llama-4-maverick": (0.27, 0.85),
    "llama-4-scout": (0.18, 0.59),
    "mistral-large-latest": (2.00, 6.00),
    "mistral-small-latest": (0.20, 0.60),
    "deepseek-chat": (0.27, 1.10),
    "deepseek-reasoner": (0.55, 2.19),
    "qwen3-235b-a22b": (0.20, 0.60),
    "smollm2": (0.0, 0.0),
}


@dataclass(frozen=True)
class Price:
    """USD per one million input and output tokens; `known` is False for models missing from the table."""

    input: float
    output: float
    known: bool

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


def lookup_price(model_id: str, prices: dict[str, tuple[float, float]]) -> Price:
    """Find a model's price by exact name, then by the longest table entry it starts with."""
    _, name = split_model_id(model_id)
    name = name.lower()
    if name in prices:
        return Price(*prices[name], known=True)
    prefixes = [key for key in prices if name.startswith(key)]
    if prefixes:
        return Price(*prices[max(prefixes, key=len)], known=True)
    return Price(0.0, 0.0, known=False)


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

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


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
    def total_cost(self) -> float:
        return sum(r.cost for r in self.records)

    def by_model(self) -> dict[str, dict[str, float]]:
        """Sum tokens and cost per model id."""
        out: dict[str, dict[str, float]] = {}
        for r in self.records:
            row = out.setdefault(r.model, {"input_tokens": 0, "output_tokens": 0, "cost": 0.0, "calls": 0})
            row["input_tokens"] += r.input_tokens
            row["output_tokens"] += r.output_tokens
            row["cost"] += r.cost
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


def usage_from_message(message: Any) -> tuple[int, int]:
    """Read (input, output) tokens from a LangChain message's usage metadata."""
    meta = getattr(message, "usage_metadata", None) or {}
    return int(meta.get("input_tokens", 0) or 0), int(meta.get("output_tokens", 0) or 0)


class _CallRecorder(AsyncCallbackHandler):
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

    async def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], *, run_id: Any,
                                  **kwargs: Any) -> None:
        self._started[run_id] = time.perf_counter()
        self._prompts[run_id] = messages

    async def on_llm_new_token(self, token: str, *, run_id: Any, **kwargs: Any) -> None:
        self._first_token.setdefault(run_id, time.perf_counter())

    async def on_llm_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        started = self._started.pop(run_id, None)
        self._first_token.pop(run_id, None)
        self._prompts.pop(run_id, None)
        if started is not None:
            metrics.record_model_call(self.metric_label, ok=False, seconds=time.perf_counter() - started)

    async def on_llm_end(self, response: LLMResult, *, run_id: Any = None, **kwargs: Any) -> None:
        ended = time.perf_counter()
        input_tokens = output_tokens = 0
        answer = []
        for generations in response.generations:
            for generation in generations:
                answer.append(generation.text or "")
                if isinstance(generation, ChatGeneration):
                    i, o = usage_from_message(generation.message)
                    input_tokens += i
                    output_tokens += o
                    calls = getattr(generation.message, "tool_calls", None) or []
                    answer.extend(json.dumps(call.get("args", {})) for call in calls)
        if not (input_tokens or output_tokens) and response.llm_output:
            token_usage = response.llm_output.get("token_usage") or {}
            input_tokens = int(token_usage.get("prompt_tokens", 0) or 0)
            output_tokens = int(token_usage.get("completion_tokens", 0) or 0)
        estimated = not (input_tokens or output_tokens)
        prompts = self._prompts.pop(run_id, [])
        if estimated:
            input_tokens = sum(approx_tokens(batch) for batch in prompts)
            output_tokens = approx_tokens([AIMessage("".join(answer))]) if any(answer) else 0
        record = UsageRecord(
            model=self.model_id,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cost=self.price.cost(input_tokens, output_tokens),
            priced=self.price.known,
            label=self.label,
            estimated=estimated,
        )
        if self.ledger is not None:
            self.ledger.add(record)
        started = self._started.pop(run_id, ended)
        first_token = self._first_token.pop(run_id, None)
        metrics.record_model_call(
            self.metric_label, ok=True, seconds=ended - started,
            first_token_seconds=None if first_token is None else first_token - started,
            input_tokens=input_tokens, output_tokens=output_tokens, cost=record.cost,
        )


class _Recorded(RunnableBinding):
    """A model runnable whose call recorder joins the callbacks the call inherits.

    `with_config(callbacks=[...])` would replace them instead: a model called inside a graph node
    (without an explicit config, as nodes do) would lose the node's callback manager, so its span
    would start a trace of its own instead of sitting under its node and run.
    """

    def _merge_configs(self, *configs: RunnableConfig | None) -> RunnableConfig:
        return merge_configs(ensure_config(merge_configs(*configs)), self.config)


# --- the chat client ------------------------------------------------------------------------


_HAS_CHUNK_TIMEOUT = "stream_chunk_timeout" in ChatOpenAI.model_fields
# A long conversation's request messages, converted off the event loop for the call about to build its request.
_CONVERTED: ContextVar[tuple[list[BaseMessage], list[dict]] | None] = ContextVar("parley_converted", default=None)


class _RecentConversions:
    """The request messages of the last few long conversations, by the identity of their LangChain messages:
    a panel's panelists are sent one conversation, converted once. An entry holds its messages, so no id in
    its key can be reused while it is kept."""

    SIZE = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, ...], tuple[list[BaseMessage], list[dict]]] = OrderedDict()

    def get(self, messages: list[BaseMessage]) -> list[dict] | None:
        with self._lock:
            entry = self._entries.get(tuple(map(id, messages)))
        return None if entry is None else [dict(m) for m in entry[1]]

    def put(self, messages: list[BaseMessage], converted: list[dict]) -> None:
        with self._lock:
            self._entries[tuple(map(id, messages))] = (list(messages), [dict(m) for m in converted])
            while len(self._entries) > self.SIZE:
                self._entries.popitem(last=False)


_RECENT = _RecentConversions()


class _BoundedChatOpenAI(ChatOpenAI):
    """`ChatOpenAI` whose every call, streamed or not, ends: within `call_deadline` seconds in all, with a
    finish_reason when streamed, and with any upstream text in its failure capped and redacted.

    Every model call of every mode goes through one of these (`ModelFactory._build`), so these guarantees
    hold everywhere. The gap allowed between streamed chunks is langchain-openai's `stream_chunk_timeout`,
    set from the per-read timeout; keep-alive comments do not reset it.
    """

    call_deadline: float = Field(300.0, gt=0, exclude=True)
    parley_model_id: str = Field("", exclude=True)

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                       **kwargs: Any) -> Any:
        deadline = asyncio.get_running_loop().time() + self.call_deadline
        await self._convert_off_loop(messages)
        source = super()._astream(messages, stop, run_manager, **kwargs)
        chunks, finished = 0, False
        try:
            while True:
                bound = asyncio.timeout_at(deadline)
                try:
                    async with bound:
                        chunk = await anext(source)
                except StopAsyncIteration:
                    break
                except TimeoutError as exc:
                    raise self._timed_out(exc, bound.expired(), chunks) from exc
                chunks += 1
                finished = finished or bool((chunk.generation_info or {}).get("finish_reason"))
                yield chunk
        except Exception as exc:
            scrub_failure(exc, self._secrets())
            raise
        finally:
            await source.aclose()
        if not finished:  # the SDK takes a stream that just stops for a complete one
            raise IncompleteAnswerError(self._model_id, chunks)

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                         **kwargs: Any) -> Any:
        if self.streaming:  # answered through `_astream`, which keeps the deadline itself
            return await super()._agenerate(messages, stop, run_manager, **kwargs)
        await self._convert_off_loop(messages)
        bound = asyncio.timeout(self.call_deadline)
        try:
            async with bound:
                return await super()._agenerate(messages, stop, run_manager, **kwargs)
        except TimeoutError as exc:
            raise self._timed_out(exc, bound.expired(), None) from exc
        except Exception as exc:
            scrub_failure(exc, self._secrets())
            raise

    async def _convert_off_loop(self, messages: list[BaseMessage]) -> None:
        """Turn a long conversation into the request's message dicts on a worker thread (`_get_request_payload`
        takes them from there): langchain-openai does it on the event loop, at ~20 µs a message."""
        if len(messages) < OFF_LOOP_MESSAGES:
            return
        if (converted := _RECENT.get(messages)) is None:
            payload = await asyncio.to_thread(lambda: super(_BoundedChatOpenAI, self)._get_request_payload(messages))
            if "messages" not in payload:
                return
            converted = payload["messages"]
            _RECENT.put(messages, converted)
        _CONVERTED.set((messages, converted))

    def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict:
        converted = _CONVERTED.get()
        payload = None
        if converted is not None and converted[0] is input_:  # this call's conversation, converted off the loop
            _CONVERTED.set(None)
            payload = super()._get_request_payload([], stop=stop, **kwargs)
            if "messages" not in payload:  # the Responses API shapes its input otherwise
                payload = None
            else:
                payload["messages"] = converted[1]
        if payload is None:
            payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        if "messages" in payload:
            # The openai SDK walks every request against its parameter types, on the event loop: ~0.15 ms a
            # message (0.3 s for a 2,000-message conversation, per call), and chat messages have nothing it
            # changes. Given as `extra_body`, they are sent as they are, in the same place of the same JSON body.
            payload["extra_body"] = {**(payload.get("extra_body") or {}), "messages": payload["messages"]}
            payload["messages"] = []
        return payload

    @property
    def _model_id(self) -> str:
        return self.parley_model_id or self.model_name

    def _timed_out(self, exc: TimeoutError, deadline_passed: bool, chunks: int | None) -> Exception:
        if deadline_passed:
            return ModelDeadlineError(self._model_id, self.call_deadline)
        # langchain-openai's StreamChunkTimeoutError: no chunk within stream_chunk_timeout.
        return ModelIdleError(self._model_id, getattr(exc, "timeout_s", None) or self.stream_chunk_timeout or 0,
                              getattr(exc, "chunks_received", chunks))

    def _secrets(self) -> tuple[str, ...]:
        key = self.openai_api_key
        return (key.get_secret_value(),) if key is not None else ()


# --- context-size guard ---------------------------------------------------------------------


def approx_text_tokens(text: str) -> int:
    """Estimate the tokens of a text: ~4 ASCII characters a token, one token per other character (CJK)."""
    ascii_chars = len(text.encode("ascii", "ignore"))  # counted in C: a long transcript costs microseconds
    return ascii_chars // 4 + (len(text) - ascii_chars)


def approx_tokens(messages: Sequence[BaseMessage]) -> int:
    """Estimate prompt tokens: each message's text (see `approx_text_tokens`) plus 4 for its framing."""
    total = 0
    for message in messages:
        text = message.content if isinstance(message.content, str) else json.dumps(message.content)
        total += 4 + approx_text_tokens(text)
    return total


async def off_loop(messages: int, fn: Callable[..., ResultT], /, *args: Any, **kwargs: Any) -> ResultT:
    """`fn(*args, **kwargs)` for a conversation of `messages` messages: on a worker thread from
    `OFF_LOOP_MESSAGES` up, in place below that (a thread hop costs more than a short conversation)."""
    if messages >= OFF_LOOP_MESSAGES:
        return await asyncio.to_thread(fn, *args, **kwargs)
    return fn(*args, **kwargs)


def clip_text(text: str, max_tokens: int, marker: str = " [...]") -> str:
    """Cut `text` to about `max_tokens` (by `approx_text_tokens`), at a word boundary, ending in `marker`."""
    if approx_text_tokens(text) <= max_tokens:
        return text
    budget = max(0, max_tokens - approx_text_tokens(marker)) * 4  # in quarter tokens: an ASCII char costs 1
    spent, end = 0, 0
    for end, ch in enumerate(text):
        spent += 1 if ord(ch) < 128 else 4
        if spent > budget:
            break
    head = text[:end]
    cut = head.rstrip()
    if (space := cut.rfind(" ")) > len(cut) // 2:  # keep whole words unless that loses too much
        cut = cut[:space]
    return cut.rstrip() + marker


def answer_reserve(max_tokens: int | None) -> int:
    """Tokens of the context window kept free for an answer capped at `max_tokens` (plus its framing)."""
    return (max_tokens or 256) + 32


def prompt_limit(window: int, reserve: int) -> int:
    """Tokens a prompt may take in a `window`-token context that keeps `reserve` tokens for the answer."""
    return max(64, window - reserve)


def context_guard(window: int, reserve: int) -> Runnable:
    """Trim a prompt to `window - reserve` tokens, keeping the system message and the latest turns."""
    return trim_messages(
        max_tokens=prompt_limit(window, reserve),
        token_counter=approx_tokens,
        strategy="last",
        include_system=True,
        allow_partial=True,
    )


# --- the factory ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedModel:
    """A model id resolved against the provider table."""

    model_id: str
    provider_name: str
    provider: Provider
    model_name: str
    base_url: str | None
    api_key: str


def load_json_overrides(path: Path) -> dict[str, Any]:
    """Read an optional JSON config file under PARLEY_HOME; a broken file is an error, not silence."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelError(f"{path} must hold a JSON object")
    return data


class ModelFactory:
    """Build every chat model Parley uses, from the provider table and deployment settings.

    Args:
        settings: deployment settings (endpoint, key, default model, PARLEY_HOME).
        providers: provider table; defaults to the built-in one merged with `PARLEY_HOME/providers.json`.
        prices: price table; defaults to the built-in one merged with `PARLEY_HOME/prices.json`.
        local_base_url: where the embedded model server listens, when it runs.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        providers: dict[str, Provider] | None = None,
        prices: dict[str, tuple[float, float]] | None = None,
        local_base_url: str | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        if providers is None:
            providers = dict(BUILTIN_PROVIDERS)
            for name, raw in load_json_overrides(self.settings.providers_file).items():
                base = providers.get(name, Provider()).model_dump()
                providers[name] = Provider.model_validate({**base, **raw})
        self.providers = providers
        if prices is None:
            prices = dict(BUILTIN_PRICES)
            for name, pair in load_json_overrides(self.settings.prices_file).items():
                prices[name.lower()] = (float(pair[0]), float(pair[1]))
        self.prices = prices
        self.local_base_url = local_base_url or os.environ.get("PARLEY_LOCAL_BASE_URL")
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, dict]] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def default_model(self) -> str:
        return self.settings.default_model

    def resolve(self, model_id: str | None = None) -> ResolvedModel:
        """Resolve `provider:model` (or a bare name, or None for the default) to an endpoint and quirks."""
        model_id = model_id or self.default_model
        provider_name, model_name = split_model_id(model_id)
        provider_name = provider_name or DEFAULT_PROVIDER
        provider = self.provider(model_id)
        if provider_name == "local":
            base_url = provider.base_url or self.local_base_url
            if not base_url:
                raise ModelError(
                    f"{model_id} needs the embedded model server, which is not running; "
                    "start Parley with `parley serve` or set OPENAI_BASE_URL/OPENAI_API_KEY"
                )
            api_key = os.environ.get(provider.api_key_env, "sk-local")
        else:
            base_url = provider.base_url or self.settings.openai_base_url
            key_from_env = os.environ.get(provider.api_key_env)
            if provider.api_key_env == "OPENAI_API_KEY":
                key_from_env = key_from_env or self.settings.openai_api_key
            # Self-hosted endpoints (vLLM, llama.cpp) take any key; the SDK insists on one.
            api_key = key_from_env or ("sk-none" if base_url else "")
            if not api_key:
                raise ModelError(f"{model_id}: no API key (set {provider.api_key_env}) and no OPENAI_BASE_URL")
        register_secret(api_key)  # an endpoint that echoes it back must not get it into a message
        return ResolvedModel(model_id, provider_name, provider, model_name, base_url, api_key)

    def provider(self, model_id: str | None = None) -> Provider:
        """The provider entry (quirks) `model_id` uses; unlike `resolve`, this needs no endpoint or key."""
        provider_name = split_model_id(model_id or self.default_model)[0] or DEFAULT_PROVIDER
        return self.providers.get(provider_name) or self.providers.get(DEFAULT_PROVIDER) or Provider()

    def prompt_budget(self, model_id: str | None = None, max_tokens: int | None = None) -> int | None:
        """Tokens a prompt to `model_id` may take before the context guard trims it (None: no limit).

        `max_tokens` is the output cap the call will ask for; the provider's own cap applies on top,
        as it does in `chat`.
        """
        quirks = self.provider(model_id)
        if quirks.context_window is None:
            return None
        return prompt_limit(quirks.context_window, answer_reserve(_output_cap(quirks, max_tokens)))

    def price(self, model_id: str) -> Price:
        return lookup_price(model_id, self.prices)

    def metric_label(self, model_id: str) -> str:
        """The `model` label of `model_id` in `/metrics`: the id itself when the deployment knows it, else `other`.

        Requests name models freely, and every distinct label is a series `/metrics` keeps for good, so only
        ids the deployment configured get their own: the settings' models (default, `router/debate` preset,
        arbitrator), and the price table's names (built in and `prices.json`, exactly as written there) under
        a provider of the provider table or of those models. Models of a workspace's own routers count as
        `other` unless they are among these.
        """
        configured = {self.default_model, self.settings.arbitrator_model, *self.settings.debate_models}
        if model_id in configured:
            return model_id
        provider, name = split_model_id(model_id)
        providers = {*self.providers, *(split_model_id(m)[0] for m in configured)}
        if (provider is None or provider in providers) and name in self.prices:
            return model_id
        return metrics.OTHER_MODEL

    def chat(
        self,
        model_id: str | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        ledger: UsageLedger | None = None,
        label: str | None = None,
    ) -> Runnable:
        """Return a chat model (behind the context guard) for `model_id`.

        The result accepts a list of messages and supports `ainvoke` and `astream`; token usage of
        every call, streamed ones included, lands in `ledger` when one is given, and in the process
        metrics (`core.metrics`) always.
        """
        return self._model(None, model_id, temperature, max_tokens, timeout, ledger, label)

    def structured(
        self,
        schema: type[SchemaT],
        model_id: str | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        ledger: UsageLedger | None = None,
        label: str | None = None,
    ) -> Runnable:
        """Return a runnable that answers with an instance of `schema`, using the provider's structured-output method."""
        return self._model(schema, model_id, temperature, max_tokens, timeout, ledger, label)

    def _model(
        self,
        schema: type[BaseModel] | None,
        model_id: str | None,
        temperature: float | None,
        max_tokens: int | None,
        timeout: float | None,
        ledger: UsageLedger | None,
        label: str | None,
    ) -> Runnable:
        """The model runnable for these knobs, built once per event loop; the call recorder is bound per call."""
        resolved = self.resolve(model_id)
        key = (schema, resolved.model_id, resolved.base_url, resolved.api_key, temperature, max_tokens, timeout)
        cache = self._loop_cache("runnables")
        runnable = cache.get(key) if cache is not None else None
        if runnable is None:
            runnable = self._build(schema, resolved, temperature, max_tokens, timeout)
            if cache is not None:
                cache[key] = runnable
        # Building a client (and a structured-output schema) costs milliseconds; binding a callback does not.
        recorder = _CallRecorder(ledger, resolved.model_id, self.price(resolved.model_id), label,
                                 self.metric_label(resolved.model_id))
        return _Recorded(bound=runnable, config={"callbacks": [recorder]})

    def _build(
        self,
        schema: type[BaseModel] | None,
        resolved: ResolvedModel,
        temperature: float | None,
        max_tokens: int | None,
        timeout: float | None,
    ) -> Runnable:
        quirks = resolved.provider
        max_tokens = _output_cap(quirks, max_tokens)
        if temperature is not None and quirks.max_temperature is not None:
            temperature = min(temperature, quirks.max_temperature)
        read_timeout = timeout or self.settings.parley_request_timeout
        kwargs: dict[str, Any] = {
            "model": resolved.model_name,
            "api_key": resolved.api_key,
            "timeout": read_timeout,
            "call_deadline": self.settings.parley_model_call_deadline,
            "parley_model_id": resolved.model_id,
            "max_retries": 0,  # retries are node policies (RetryPolicy), never hidden in the client
            "stream_usage": quirks.stream_usage,
        }
        if _HAS_CHUNK_TIMEOUT:
            # langchain-openai's own limit on the gap between streamed chunks (120 s unless told) follows the
            # setting; older releases have none (and would send an unknown field on to the endpoint).
            kwargs["stream_chunk_timeout"] = read_timeout
        if resolved.base_url:
            kwargs["base_url"] = resolved.base_url
        if temperature is not None:
            kwargs["temperature"] = temperature
        extra_body = dict(quirks.extra_body)
        if max_tokens is not None:
            if quirks.token_param == "max_tokens":
                # langchain-openai renames its own max_tokens field; extra_body sends the legacy name as is.
                extra_body["max_tokens"] = max_tokens
            else:
                kwargs["max_completion_tokens"] = max_tokens
        if extra_body:
            kwargs["extra_body"] = extra_body
        if (http_client := self._loop_http_client(kwargs["timeout"])) is not None:
            kwargs["http_async_client"] = http_client
        client = _BoundedChatOpenAI(**kwargs)
        if schema is None:
            return self._guarded(resolved, max_tokens, client)
        if quirks.structured_method == "json_object_schema":
            fmt = {"type": "json_object", "schema": schema.model_json_schema()}
            answer = client.bind(response_format=fmt) | PydanticOutputParser(pydantic_object=schema)
        else:
            answer = client.with_structured_output(schema, method=quirks.structured_method)
        return self._guarded(resolved, max_tokens, answer)

    def _loop_cache(self, name: str) -> dict | None:
        """A dict private to the running event loop (None outside one): what it holds is bound to that loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        return self._per_loop.setdefault(loop, {}).setdefault(name, {})

    def _loop_http_client(self, timeout: float) -> DefaultAsyncHttpxClient | None:
        """A pooled HTTP client for the running event loop (None outside one).

        langchain-openai otherwise shares one client per process, whose connections belong to the loop
        that opened them: a second `asyncio.run` (or a second server's loop) would get "Event loop is closed".
        """
        clients = self._loop_cache("http_clients")
        if clients is None:
            return None
        if timeout not in clients:
            clients[timeout] = DefaultAsyncHttpxClient(timeout=timeout)
        return clients[timeout]

    @staticmethod
    def _guarded(resolved: ResolvedModel, max_tokens: int | None, model: Runnable) -> Runnable:
        """`model` behind the context guard when the provider declares a window (a bare model otherwise)."""
        window = resolved.provider.context_window
        if window is None:
            return model
        return context_guard(window, reserve=answer_reserve(max_tokens)) | model


def _output_cap(quirks: Provider, max_tokens: int | None) -> int | None:
    """The output cap a call really asks for: the caller's, lowered to the provider's hard cap."""
    if quirks.max_output_tokens is None:
        return max_tokens
    return min(max_tokens or quirks.max_output_tokens, quirks.max_output_tokens)


def monotonic_ms() -> float:
    """Milliseconds from a monotonic clock, for latency figures."""
    return time.monotonic() * 1000
