"""A scripted, OpenAI-compatible chat model server for tests and benchmarks.

Parley talks to models over the OpenAI wire protocol, so the tests run a real
HTTP server that speaks it, instead of mocking the client. The server answers
``POST /v1/chat/completions`` (plain and SSE streaming, text, JSON-schema
structured output, forced and scripted tool calls, streamed as OpenAI streams them),
``GET /v1/models`` and ``GET /health``. Every request body it receives is recorded
(``llm.requests``), so a test can read what a model was sent: its messages, tools,
``tool_choice``, ``response_format``; and when each request arrived and its answer was sent
(``llm.spans``, ``llm.most_at_once``), so a test can tell which calls overlapped.
What it answers is decided by :class:`Rule` objects; with no matching rule it
produces a deterministic reply derived from the model name and the prompt.

In-process use::

    with ScriptedLLM() as llm:
        llm.script(model="judge", reply="Pro wins.", times=1)
        client = openai.OpenAI(base_url=llm.base_url, api_key="x")

As a subprocess (prints ``READY http://127.0.0.1:P/v1`` once listening)::

    python -m tests.support.scripted_llm --port 0 --latency 0.05 --token-delay 0.01

A rule with ``hold="name"`` makes its answers wait at the gate of that name until
the test opens it (``llm.release("name")``); ``llm.wait_held("name")`` returns once
a request is waiting there. Tests use this to look at Parley mid-run without
racing it: nothing moves past the gate until they have looked.

Control endpoints, so a subprocess can be scripted too: ``POST /_script`` (a rule
object or a list of them), ``POST /_release`` (``{"name": gate}``), ``POST /_reset``,
``GET /_requests``.

Prompt caching as OpenAI does it: a request's ``usage.prompt_tokens_details.cached_tokens`` (streamed and not) is
the longest prefix its prompt shares with an earlier request's prompt to the same model, in tokens (this server
counts a token per 4 characters of message text; roles, tool calls and the offered tools must match too), counted
in steps of ``cache_step`` tokens and only from ``cache_min`` tokens on: OpenAI's 128 and 1,024 by default, set
lower (``ScriptedLLM(cache_min=0, cache_step=1)``, ``--cache-min``/``--cache-step``) to measure small prompts.
``llm.cached_tokens`` lists what each recorded request was told, ``GET /_cached`` too.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import itertools
import json
import logging
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

__all__ = ["Rule", "ScriptedLLM", "ScriptState", "create_app", "default_reply", "sample_from_schema"]

_HANG_SECONDS = 600.0
ENDLESS = ("empty", "drip", "comments")
_ENDLESS_PACE = 0.05
_DROP_MESSAGE = "ASGI callable returned without completing response."


@dataclass
class Rule:
    """One scripted behaviour; the first rule that matches a request decides the answer.

    ``reply``/``replies`` give the text, ``json`` the payload for structured
    requests (and the text, serialised, for plain ones), ``status`` turns the
    answer into an OpenAI-shaped HTTP error (a 429 says ``Retry-After: 1``, or ``retry_after``). ``tool_calls`` answers with those calls
    (``[{"name", "arguments": {...} or a JSON text, "id"?}]``, after ``reply`` as its
    text if both are set), ``finish_reason`` "tool_calls". ``with_tools`` matches only
    requests that offer tools (true) or offer none (false). ``latency``/``token_delay`` override
    the server defaults. ``hold`` names a gate the answer waits at until it is
    released; with ``pause_after`` a streamed answer sends that many chunks
    first, then waits there. A rule with ``times`` is removed after that many uses.
    ``reasoning`` is sent beside the answer as ``reasoning_content`` (a first delta of its own when streamed), as
    DeepSeek's API and vLLM's reasoning parsers send a model's thinking.

    Broken endpoints: ``drop_after`` breaks the connection after that many content
    chunks (no end of body); ``end_after`` ends the body cleanly after that many,
    without a ``finish_reason`` or ``[DONE]``, and closes the connection. ``endless``
    never finishes, sending every ``token_delay`` (0.05 s unless set): ``"empty"``
    empty deltas, ``"drip"`` a word at a time, ``"comments"`` SSE comments only; a
    request that is not streamed gets a 200 whose JSON body never completes. A request
    that is not streamed gets the first half of its JSON body with ``drop_after`` (then
    the connection breaks) or ``end_after`` (then the body ends cleanly).
    """

    model: str | None = None
    match: str | None = None
    reply: str | None = None
    replies: list[str] | None = None
    json: dict[str, Any] | None = None
    status: int | None = None
    retry_after: str | None = None
    latency: float | None = None
    token_delay: float | None = None
    hang: bool = False
    hold: str | None = None
    pause_after: int | None = None
    drop_after: int | None = None
    end_after: int | None = None
    endless: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    with_tools: bool | None = None
    reasoning: str | None = None  # sent as `reasoning_content` beside the answer, as DeepSeek and vLLM send it
    times: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    uses: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if self.endless not in (None, *ENDLESS):
            raise ValueError(f"endless must be one of {ENDLESS}, not {self.endless!r}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rule:
        # Unknown keys are rejected because a typo would otherwise silently match everything.
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown rule fields: {sorted(unknown)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def matches(self, model: str, transcript: str, offers_tools: bool = False) -> bool:
        return ((self.model is None or self.model == model) and (self.match is None or self.match in transcript)
                and (self.with_tools is None or self.with_tools == offers_tools))


class Gate:
    """Where held answers wait until the test releases them; it counts the requests that reached it."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.arrived = 0
        self._changed = threading.Condition()

    def arrive(self) -> None:
        with self._changed:
            self.arrived += 1
            self._changed.notify_all()

    def wait_arrived(self, count: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.arrived >= count, timeout)


def prompt_tokens(body: dict[str, Any]) -> int:
    """A request's prompt tokens as this server counts them: one per 4 characters of its messages' text."""
    return max(1, sum(len(_content_text(m.get("content"))) for m in body.get("messages") or []) // 4)


def prefix_digests(body: dict[str, Any], step: int) -> list[bytes]:
    """Digests of a request's prompt cut after every `step` tokens (`prompt_tokens`): the k-th covers the model, the
    offered tools, and the messages (roles, tool calls, text) up to token k * step. Two prompts share their first k
    digests exactly when they share that prefix."""
    head = hashlib.blake2b(digest_size=16)
    head.update(json.dumps([body.get("model"), body.get("tools")], sort_keys=True).encode())
    width, filled, digests = 4 * step, 0, []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        frame = {k: message.get(k) for k in ("role", "name", "tool_calls", "tool_call_id")}
        head.update(b"\x1e" + json.dumps(frame, sort_keys=True).encode() + b"\x1f")
        text = _content_text(message.get("content"))
        while text:
            piece, text = text[: width - filled], text[width - filled:]
            head.update(piece.encode())
            filled += len(piece)
            if filled == width:
                digests.append(head.copy().digest())
                filled = 0
    return digests


class PromptCache:
    """OpenAI's automatic prompt caching, as far as a bill shows it: the tokens of the longest prefix a prompt shares
    with an earlier prompt (to the same model), in steps of `step` tokens, nothing under `minimum` tokens."""

    def __init__(self, minimum: int = 1024, step: int = 128):
        if step < 1 or minimum < 0:
            raise ValueError("the cache step must be at least 1 token and its minimum not negative")
        self.minimum, self.step = minimum, step
        self._seen: set[bytes] = set()

    def clear(self) -> None:
        self._seen.clear()

    def lookup(self, body: dict[str, Any]) -> int:
        """The cached tokens of this request's prompt; the prompt is then cached for the requests after it."""
        digests = prefix_digests(body, self.step)
        hit = 0
        for hit, digest in enumerate(digests):  # every prefix of a cached prompt is cached too
            if digest not in self._seen:
                break
        else:
            hit = len(digests)
        self._seen.update(digests)
        return hit * self.step if hit * self.step >= max(self.minimum, 1) else 0


class ScriptState:
    """Rules, recorded requests and server-wide defaults.

    Shared between the server's event loop thread and the test thread, hence the lock.
    """

    def __init__(self, latency: float = 0.0, token_delay: float = 0.0, default_reply_chars: int = 150,
                 cache_min: int = 1024, cache_step: int = 128):
        self.prompt_cache = PromptCache(cache_min, cache_step)
        self._cached: list[int] = []
        self.latency = latency
        self.token_delay = token_delay
        self.default_reply_chars = default_reply_chars
        self._rules: list[Rule] = []
        self._requests: list[dict[str, Any]] = []
        self._peers: list[tuple[float, str | None]] = []  # each recorded request's arrival (monotonic) and client
        self._gates: dict[str, Gate] = {}
        self._spans: list[list[float | None]] = []
        self._lock = threading.Lock()
        self.closing = threading.Event()

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def reset(self) -> None:
        with self._lock:
            self._rules.clear()
            self._requests.clear()
            self._cached.clear()
            self._peers.clear()
            self._spans.clear()
            self.prompt_cache.clear()
            gates, self._gates = list(self._gates.values()), {}
        for gate in gates:  # answers still held by an earlier test go on, rather than hang
            gate.opened.set()

    def gate(self, name: str) -> Gate:
        with self._lock:
            return self._gates.setdefault(name, Gate())

    @property
    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests)

    def arrived(self) -> list[float | None]:
        """Note a chat completion request as it arrives; its span is closed (`left`) once its answer is sent."""
        span: list[float | None] = [time.monotonic(), None]
        with self._lock:
            self._spans.append(span)
        return span

    def left(self, span: list[float | None]) -> None:
        with self._lock:
            span[1] = time.monotonic()

    @property
    def spans(self) -> list[tuple[float, float | None]]:
        """When each chat completion request arrived and when its answer had been sent (None: not yet), in the
        order they arrived (monotonic seconds)."""
        with self._lock:
            return [(start, end) for start, end in self._spans]

    @property
    def most_at_once(self) -> int:
        """The most chat completion requests the server was answering at the same time."""
        edges = sorted([(start, 1) for start, _ in self.spans] + [(end, -1) for _, end in self.spans if end],
                       key=lambda edge: (edge[0], edge[1]))
        most = now = 0
        for _, step in edges:
            now += step
            most = max(most, now)
        return most

    @property
    def cached_tokens(self) -> list[int]:
        """The cached prompt tokens reported to each recorded request, in the order of `requests`."""
        with self._lock:
            return list(self._cached)

    def record(self, body: dict[str, Any], peer: str | None = None) -> int:
        """Record a request (and the client's address, `peer`); return the prompt tokens it repeats of an earlier
        one's (`PromptCache`)."""
        with self._lock:
            cached = self.prompt_cache.lookup(body)
            self._requests.append(body)
            self._cached.append(cached)
            self._peers.append((time.monotonic(), peer))
        return cached

    @property
    def calls(self) -> list[tuple[float, str | None, dict[str, Any]]]:
        """Each recorded request as (when it arrived, `time.monotonic()`; the client's address; its body)."""
        with self._lock:
            return [(at, peer, body) for (at, peer), body in zip(self._peers, self._requests, strict=True)]

    def take(self, model: str, transcript: str, offers_tools: bool = False) -> tuple[Rule | None, str | None]:
        """Find the first matching rule, count the use, and pick its reply text."""
        with self._lock:
            for rule in self._rules:
                if not rule.matches(model, transcript, offers_tools):
                    continue
                rule.uses += 1
                if rule.times is not None and rule.uses >= rule.times:
                    self._rules.remove(rule)
                if rule.replies:
                    return rule, rule.replies[(rule.uses - 1) % len(rule.replies)]
                return rule, rule.reply
            return None, None


# --------------------------------------------------------------------------- text


_FILLER = (
    "This reply comes from the scripted test model.",
    "It is deterministic, so every run sees the same words.",
    "The content is plain text without any markup.",
    "No real language model produced this sentence.",
    "Each model and prompt gives a different opening.",
)


def default_reply(model: str, prompt: str, chars: int = 150) -> str:
    """Deterministic plain-English reply that differs per model and prompt."""
    words = re.findall(r"[A-Za-z0-9][\w'-]*", prompt)[:8]
    text = f"{model} answer: {' '.join(words) if words else 'an empty prompt'}."
    # Start the filler at a prompt-dependent sentence so long transcripts do not look identical.
    start = zlib.crc32(f"{model}\n{prompt}".encode()) % len(_FILLER)
    for sentence in itertools.islice(itertools.cycle(_FILLER), start, None):
        if len(text) + 1 + len(sentence) > chars:
            break
        text += " " + sentence
    return text


def split_chunks(text: str) -> list[str]:
    """Roughly one word per chunk, whitespace kept so that ``"".join(chunks) == text``."""
    return re.findall(r"^\s+|\S+\s*", text)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part messages: only the text parts matter here
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


# --------------------------------------------------------------------------- JSON schema


def _resolve_ref(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    target: Any = root
    for part in ref.removeprefix("#").strip("/").split("/"):
        target = target[part.replace("~1", "/").replace("~0", "~")]
    return target


def sample_from_schema(schema: dict[str, Any], root: dict[str, Any] | None = None, name: str = "value",
                       index: int = 0, depth: int = 0) -> Any:
    """Build a small instance that validates against ``schema`` (the subset Pydantic emits).

    Objects get every property, arrays ``minItems`` (at least one) items, and
    ``anyOf``/``oneOf`` the first non-null option; ``name`` words the sample strings.
    """
    root = root if root is not None else schema
    # Past a few levels only the required minimum is built, so recursive models terminate.
    deep = depth > 4
    if "$ref" in schema:
        return sample_from_schema(_resolve_ref(schema["$ref"], root), root, name, index, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [o for o in schema[key] if o.get("type") != "null"]
            if not options or (deep and len(options) < len(schema[key])):
                return None
            return sample_from_schema(options[0], root, name, index, depth + 1)
    if "allOf" in schema:
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            part = _resolve_ref(part["$ref"], root) if "$ref" in part else part
            properties = {**merged.get("properties", {}), **part.get("properties", {})}
            merged.update(part)
            merged["properties"] = properties
        return sample_from_schema(merged, root, name, index, depth + 1)

    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"

    if kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", ()))
        return {key: sample_from_schema(sub, root, key, 0, depth + 1)
                for key, sub in props.items() if not deep or key in required}
    if kind == "array":
        count = schema.get("minItems", 0 if deep else 1)
        count = min(count, schema.get("maxItems", count))
        items = schema.get("items", {})
        prefix = schema.get("prefixItems", [])
        return [sample_from_schema(prefix[i] if i < len(prefix) else items, root, name, i, depth + 1)
                for i in range(max(count, len(prefix)))]
    if kind == "string":
        return _sample_string(schema, name, index)
    if kind == "integer":
        return _sample_integer(schema, index)
    if kind == "number":
        return _sample_number(schema, index)
    if kind == "boolean":
        return True
    return None


_FORMATS = {
    "date-time": "2024-01-01T12:00:00Z", "date": "2024-01-01", "time": "12:00:00",
    "email": "debater@example.com", "uri": "https://example.com/source", "url": "https://example.com/source",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


def _sample_string(schema: dict[str, Any], name: str, index: int) -> str:
    if schema.get("format") in _FORMATS:
        return _FORMATS[schema["format"]]
    words = name.replace("_", " ").replace("-", " ").strip() or "value"
    text = f"The {words} is a scripted example." if index == 0 else f"The {words} is scripted example {index + 1}."
    while len(text) < schema.get("minLength", 0):
        text += " More detail follows."
    if "maxLength" in schema:
        text = text[: max(schema["maxLength"], schema.get("minLength", 0))]
    return text


def _sample_integer(schema: dict[str, Any], index: int) -> int:
    low = math.ceil(schema["minimum"]) if "minimum" in schema else None
    if "exclusiveMinimum" in schema:
        low = math.floor(schema["exclusiveMinimum"]) + 1
    high = math.floor(schema["maximum"]) if "maximum" in schema else None
    if "exclusiveMaximum" in schema:
        high = math.ceil(schema["exclusiveMaximum"]) - 1
    value = (low if low is not None else 1) + index
    return min(value, high) if high is not None else value


def _sample_number(schema: dict[str, Any], index: int) -> float:
    low = schema.get("exclusiveMinimum", schema.get("minimum"))
    high = schema.get("exclusiveMaximum", schema.get("maximum"))
    if low is not None and high is not None:
        return low + (high - low) / (2 + index)  # strictly inside, so exclusive bounds hold too
    if low is not None:
        return float(low + 1 + index)
    if high is not None:
        return float(high - 1 - index)
    return 1.0 + index


# --------------------------------------------------------------------------- answers


@dataclass
class _Call:
    name: str
    chunks: list[str]  # the JSON arguments, a piece a chunk
    id: str | None = None  # made from the completion's id when the rule gives none


@dataclass
class _Answer:
    chunks: list[str]  # the text
    calls: list[_Call] = field(default_factory=list)
    finish: str = "stop"

    @property
    def pieces(self) -> int:
        return len(self.chunks) + sum(len(c.chunks) for c in self.calls)

    def call_id(self, index: int, cid: str) -> str:
        call = self.calls[index]
        return call.id or (f"call_{cid}" if index == 0 else f"call_{cid}_{index}")


def _forced_tool(body: dict[str, Any], rule: Rule | None) -> dict[str, Any] | None:
    tools = [t.get("function", t) for t in body.get("tools") or []]
    if not tools:
        return None
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name") or choice.get("name")
        return next((t for t in tools if t.get("name") == wanted), tools[0])
    # A rule carrying `json` with tools on offer means "call the tool", even if the client says auto.
    if choice in ("required", "any") or (choice != "none" and rule is not None and rule.json is not None):
        return tools[0]
    return None


def _response_schema(body: dict[str, Any]) -> tuple[bool, dict[str, Any] | None]:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return True, (fmt.get("json_schema") or {}).get("schema")
    if fmt.get("type") == "json_object":
        return True, fmt.get("schema")
    return False, None


def build_answer(body: dict[str, Any], rule: Rule | None, reply: str | None, state: ScriptState) -> _Answer:
    model = str(body.get("model") or "scripted")
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    fallback = default_reply(model, _content_text(users[-1].get("content")) if users else "", state.default_reply_chars)
    scripted_json = rule.json if rule is not None else None

    if rule is not None and rule.tool_calls:
        calls = [_Call(str(c["name"]), split_chunks(c["arguments"] if isinstance(c.get("arguments"), str)
                                                    else json.dumps(c.get("arguments") or {})), c.get("id"))
                 for c in rule.tool_calls]
        return _Answer(split_chunks(reply) if reply else [], calls, finish="tool_calls")
    tool = _forced_tool(body, rule)
    if tool is not None:
        args = scripted_json if scripted_json is not None else sample_from_schema(tool.get("parameters") or {})
        return _Answer([], [_Call(tool.get("name", "tool"), split_chunks(json.dumps(args)))], finish="tool_calls")

    structured, schema = _response_schema(body)
    if structured:
        if scripted_json is not None:
            payload = scripted_json
        elif schema is not None:
            payload = sample_from_schema(schema)
        else:
            payload = {"answer": reply if reply is not None else fallback}
        # Structured answers are never truncated: a cut-off JSON document helps no test.
        return _Answer(split_chunks(json.dumps(payload)))

    text = reply if reply is not None else json.dumps(scripted_json) if scripted_json is not None else fallback
    chunks = split_chunks(text)
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(limit, int) and 0 < limit < len(chunks):
        return _Answer(chunks[:limit], finish="length")
    return _Answer(chunks)


_ERRORS = {
    400: ("invalid_request_error", "invalid_request"), 401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "permission_denied"), 404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"), 500: ("server_error", "internal_error"),
    503: ("server_error", "service_unavailable"),
}


def error_response(status: int, message: str | None = None, retry_after: str | None = None) -> JSONResponse:
    kind, code = _ERRORS.get(status, ("server_error" if status >= 500 else "invalid_request_error", str(status)))
    body = {"error": {"message": message or f"Scripted error {status}.", "type": kind, "code": code, "param": None}}
    wait = retry_after if retry_after is not None else "1" if status == 429 else None
    return JSONResponse(body, status_code=status, headers={"Retry-After": wait} if wait is not None else None)


# --------------------------------------------------------------------------- HTTP


_ids = itertools.count(1)


async def _wait_at(gate: Gate, state: ScriptState) -> None:
    gate.arrive()
    while not gate.opened.is_set() and not state.closing.is_set():
        await asyncio.sleep(0.005)


class _EventStream:
    """Raw ASGI SSE response: unlike StreamingResponse it can drop the connection mid-body, or pause at a gate."""

    def __init__(self, events: list[tuple[dict[str, Any], bool]], token_delay: float, drop_after: int | None,
                 pause: tuple[int, Gate] | None = None, state: ScriptState | None = None,
                 end_after: int | None = None):
        self.events, self.token_delay, self.drop_after = events, token_delay, drop_after
        self.pause, self.state, self.end_after = pause, state, end_after

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
        if self.end_after is not None:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        sent = 0
        for event, is_content in self.events:
            if is_content and self.drop_after is not None and sent >= self.drop_after:
                return  # uvicorn closes the socket without the final chunk, like a crashed upstream
            if is_content and self.end_after is not None and sent >= self.end_after:
                # A complete HTTP body that stops mid-answer: no finish_reason, no [DONE].
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            if is_content and self.pause is not None and sent == self.pause[0]:
                await _wait_at(self.pause[1], self.state)
            if is_content and sent and self.token_delay:
                await asyncio.sleep(self.token_delay)
            await send({"type": "http.response.body", "body": b"data: " + json.dumps(event).encode() + b"\n\n",
                        "more_body": True})
            sent += is_content
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


class _CutBody:
    """A 200 JSON body of which only the first half comes: then the connection breaks (`drop`), or the body ends."""

    def __init__(self, body: bytes, *, drop: bool):
        self.body, self.drop = body, drop

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"application/json")]
        if not self.drop:
            headers += [(b"content-length", str(len(self.body) // 2).encode()), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": self.body[:len(self.body) // 2], "more_body": self.drop})
        # Dropped: returning with the body unfinished makes uvicorn close the socket, like a crashed upstream.


class _EndlessStream:
    """A 200 that never finishes, sending something every `pace` seconds until the server stops: empty
    deltas, a word at a time, or SSE comments when streamed; whitespace inside a JSON body when not."""

    def __init__(self, kind: str, pace: float, streamed: bool, model: str, cid: str, state: ScriptState):
        self.kind, self.pace, self.streamed, self.state = kind, pace, streamed, state
        self.base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def _piece(self, n: int) -> bytes:
        if not self.streamed:
            return b" "  # JSON allows any amount of leading whitespace, so the body is never wrong, only unfinished
        if self.kind == "comments":
            return b": keep-alive\n\n"
        delta = {"content": "" if self.kind == "empty" else "drip "}
        if n == 0:
            delta["role"] = "assistant"
        event = {**self.base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}
        return b"data: " + json.dumps(event).encode() + b"\n\n"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = b"text/event-stream; charset=utf-8" if self.streamed else b"application/json"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]})
        gone = asyncio.Event()

        async def watch() -> None:  # the client hanging up is the only end (besides the server stopping)
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        try:
            for n in itertools.count():
                if self.state.closing.is_set() or gone.is_set():
                    return
                await send({"type": "http.response.body", "body": self._piece(n), "more_body": True})
                await asyncio.sleep(self.pace)
        finally:
            watcher.cancel()


def _usage(body: dict[str, Any], answer: _Answer, cached: int = 0, rule: Rule | None = None) -> dict[str, Any]:
    """The answer's usage: the prompt's tokens, `cached` of them a repeated prefix (`PromptCache`), unless the rule
    forces its own `cached_tokens`; the rule's `reasoning_tokens` added to the completion's."""
    prompt = prompt_tokens(body)
    if rule is not None and rule.cached_tokens is not None:
        cached = rule.cached_tokens
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": answer.pieces,
                             "total_tokens": prompt + answer.pieces,
                             "prompt_tokens_details": {"cached_tokens": min(cached, prompt)}}
    if rule is not None and rule.reasoning_tokens:
        usage["completion_tokens"] += rule.reasoning_tokens
        usage["total_tokens"] += rule.reasoning_tokens
        usage["completion_tokens_details"] = {"reasoning_tokens": rule.reasoning_tokens}
    return usage


def _stream_events(body: dict[str, Any], answer: _Answer, cid: str, cached: int = 0,
                   rule: Rule | None = None) -> list[tuple[dict[str, Any], bool]]:
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": body.get("model")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        event = {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        return {**event, "usage": None} if include_usage else event

    events: list[tuple[dict[str, Any], bool]] = []
    if rule is not None and rule.reasoning:
        events.append((chunk({"role": "assistant", "content": "", "reasoning_content": rule.reasoning}), False))
    if answer.chunks or not answer.calls:
        pieces = answer.chunks or [""]
        events.append((chunk({"role": "assistant", "content": pieces[0]}), bool(answer.chunks)))
        events += [(chunk({"content": p}), True) for p in pieces[1:]]
    for index, call in enumerate(answer.calls):
        opening = {"index": index, "id": answer.call_id(index, cid), "type": "function",
                   "function": {"name": call.name, "arguments": ""}}
        first = {"role": "assistant", "content": None} if not events else {}
        events.append((chunk({**first, "tool_calls": [opening]}), False))
        events += [(chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}), True)
                   for p in call.chunks]
    events.append((chunk({}, answer.finish), False))
    if include_usage:
        events.append(({**base, "choices": [], "usage": _usage(body, answer, cached, rule)}, False))
    return events


async def chat_completions(request: Request) -> Any:
    state: ScriptState = request.app.state.script
    try:
        body = await request.json()
    except ValueError:
        return error_response(400, "Request body is not valid JSON.")
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return error_response(400, "Request must be a JSON object with a 'messages' list.")
    cached = state.record(body, request.client.host if request.client else None)
    model = str(body.get("model") or "scripted")
    transcript = "\n".join(_content_text(m.get("content")) for m in body["messages"] if isinstance(m, dict))
    rule, reply = state.take(model, transcript, bool(body.get("tools")))
    latency = rule.latency if rule is not None and rule.latency is not None else state.latency
    token_delay = rule.token_delay if rule is not None and rule.token_delay is not None else state.token_delay

    pause: tuple[int, Gate] | None = None
    if rule is not None and rule.hold and rule.pause_after is not None and body.get("stream"):
        pause = (rule.pause_after, state.gate(rule.hold))
    elif rule is not None and rule.hold:
        await _wait_at(state.gate(rule.hold), state)
    if rule is not None and rule.hang:
        # Polling a thread-safe flag lets stop() end the hang at once instead of cancelling mid-request.
        deadline = time.monotonic() + _HANG_SECONDS
        while not state.closing.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return error_response(503, "Scripted hang ended.")
    if latency:
        await asyncio.sleep(latency)
    if rule is not None and rule.status:
        return error_response(rule.status, reply, rule.retry_after)

    cid = f"chatcmpl-scripted-{next(_ids)}"
    if rule is not None and rule.endless:
        return _EndlessStream(rule.endless, token_delay or _ENDLESS_PACE, bool(body.get("stream")), model, cid, state)
    answer = build_answer(body, rule, reply, state)
    if body.get("stream"):
        return _EventStream(_stream_events(body, answer, cid, cached, rule), token_delay,
                            rule.drop_after if rule else None,
                            pause, state, rule.end_after if rule else None)

    # Without streaming the client still waits for the whole generation, as with a real model.
    if token_delay and answer.pieces > 1:
        await asyncio.sleep(token_delay * (answer.pieces - 1))
    text = "".join(answer.chunks)
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if rule is not None and rule.reasoning:
        message["reasoning_content"] = rule.reasoning
    if answer.calls:
        message["content"] = text or None
        message["tool_calls"] = [{"id": answer.call_id(i, cid), "type": "function",
                                  "function": {"name": call.name, "arguments": "".join(call.chunks)}}
                                 for i, call in enumerate(answer.calls)]
    completion = {
        "id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish}],
        "usage": _usage(body, answer, cached, rule),
    }
    if rule is not None and (rule.drop_after is not None or rule.end_after is not None):
        return _CutBody(json.dumps(completion).encode(), drop=rule.drop_after is not None)
    return JSONResponse(completion)


async def list_models(request: Request) -> JSONResponse:
    state: ScriptState = request.app.state.script
    names = ["scripted"] + sorted({r.model for r in state.rules if r.model})
    data = [{"id": n, "object": "model", "created": 0, "owned_by": "parley-tests"} for n in names]
    return JSONResponse({"object": "list", "data": data})


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def add_rules(request: Request) -> JSONResponse:
    state: ScriptState = request.app.state.script
    try:
        payload = await request.json()
        rules = [Rule.from_dict(item) for item in (payload if isinstance(payload, list) else [payload])]
    except (TypeError, ValueError) as exc:
        return error_response(400, str(exc))
    for rule in rules:
        state.add(rule)
    return JSONResponse({"rules": [r.to_dict() for r in state.rules]})


async def release(request: Request) -> JSONResponse:
    try:
        name = (await request.json())["name"]
    except (ValueError, KeyError, TypeError):
        return error_response(400, 'Send {"name": "<gate>"}.')
    request.app.state.script.gate(str(name)).opened.set()
    return JSONResponse({"status": "ok"})


async def reset(request: Request) -> JSONResponse:
    request.app.state.script.reset()
    return JSONResponse({"status": "ok"})


async def recorded_requests(request: Request) -> JSONResponse:
    return JSONResponse(request.app.state.script.requests)


async def reported_cached(request: Request) -> JSONResponse:
    return JSONResponse(request.app.state.script.cached_tokens)


class _Spans:
    """Notes when each chat completion request arrives and when its answer, streamed or not, has been sent whole
    (`ScriptState.spans`), so a test can tell how many the server answered at once."""

    def __init__(self, app: Any, state: ScriptState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            await self.app(scope, receive, send)
            return
        span = self.state.arrived()
        try:
            await self.app(scope, receive, send)
        finally:
            self.state.left(span)


def create_app(state: ScriptState) -> Starlette:
    app = Starlette(routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/_script", add_rules, methods=["POST"]),
        Route("/_release", release, methods=["POST"]),
        Route("/_reset", reset, methods=["POST"]),
        Route("/_requests", recorded_requests, methods=["GET"]),
        Route("/_cached", reported_cached, methods=["GET"]),
    ])
    app.state.script = state
    app.add_middleware(_Spans, state=state)
    return app


class _QuietDrops(logging.Filter):
    """Deliberate `drop_after` disconnects are not server errors worth printing."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != _DROP_MESSAGE


logging.getLogger("uvicorn.error").addFilter(_QuietDrops())


class ScriptedLLM:
    """The scripted server on a background thread; use as a context manager.

    ``base_url`` is ready for ``openai.OpenAI(base_url=...)`` / ``ChatOpenAI(base_url=...)``.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, latency: float = 0.0,
                 token_delay: float = 0.0, default_reply_chars: int = 150, cache_min: int = 1024,
                 cache_step: int = 128):
        self.host, self.port = host, port
        self.state = ScriptState(latency, token_delay, default_reply_chars, cache_min, cache_step)
        self.app = create_app(self.state)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.state.requests

    @property
    def cached_tokens(self) -> list[int]:
        """The cached prompt tokens each recorded request was told (`PromptCache`), in the order of `requests`."""
        return self.state.cached_tokens

    @property
    def calls(self) -> list[tuple[float, str | None, dict[str, Any]]]:
        """Each request as (when it arrived, `time.monotonic()`; the client's address; its body)."""
        return self.state.calls

    @property
    def spans(self) -> list[tuple[float, float | None]]:
        """When each chat completion request arrived and when its answer had been sent (`ScriptState.spans`)."""
        return self.state.spans

    @property
    def most_at_once(self) -> int:
        """The most chat completion requests answered at the same time since the last reset."""
        return self.state.most_at_once

    def script(self, rule: Rule | dict[str, Any] | None = None, **fields_: Any) -> Rule:
        """Add a rule, given as a Rule, a dict, or keyword fields: ``llm.script(match="x", reply="y")``."""
        if rule is None:
            rule = Rule(**fields_)
        elif isinstance(rule, dict):
            rule = Rule.from_dict({**rule, **fields_})
        elif fields_:
            rule = dataclasses.replace(rule, **fields_)
        return self.state.add(rule)

    def reset(self) -> None:
        self.state.reset()

    def release(self, name: str) -> None:
        """Open the gate `name`: answers held there (now or later, until the next reset) go on."""
        self.state.gate(name).opened.set()

    def wait_held(self, name: str, count: int = 1, timeout: float = 60.0) -> None:
        """Return once `count` requests in all have reached the gate `name`; fail after `timeout` seconds."""
        if not self.state.gate(name).wait_arrived(count, timeout):
            raise TimeoutError(f"fewer than {count} request(s) reached the gate {name!r} in {timeout} s")

    def start(self) -> ScriptedLLM:
        self.state.closing.clear()
        # Binding here, not in uvicorn, makes the chosen port known before the thread starts.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit this; without it Nagle's algorithm holds each reply on a reused
        # connection for the client's delayed ACK, ~40 ms a call.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name=f"scripted-llm-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("scripted LLM server failed to start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        self.state.closing.set()
        self._server.should_exit = True
        self._thread.join(2.0)
        if self._thread.is_alive():
            # Streams still open (a `hang` rule, slow token delays): stop waiting for them.
            self._server.force_exit = True
            self._thread.join(5.0)
        self._server = self._thread = None

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn(*, latency: float = 0.0, token_delay: float = 0.0, cache_min: int = 1024,
          cache_step: int = 128) -> tuple[subprocess.Popen, str]:
    """Start the server as a subprocess (so its CPU time is not the caller's); return it and its base URL."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.scripted_llm", "--port", "0", "--latency", str(latency),
         "--token-delay", str(token_delay), "--cache-min", str(cache_min), "--cache-step", str(cache_step)],
        cwd=root, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(root)},
    )
    line = (proc.stdout.readline() if proc.stdout else "").strip()
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"the scripted model server did not start: {line!r}")
    return proc, line.split(" ", 1)[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Scripted OpenAI-compatible model server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--token-delay", type=float, default=0.0, help="seconds between streamed chunks")
    parser.add_argument("--default-reply-chars", type=int, default=150)
    parser.add_argument("--cache-min", type=int, default=1024, help="fewest prompt tokens reported as cached")
    parser.add_argument("--cache-step", type=int, default=128, help="cached prompt tokens are counted in these steps")
    args = parser.parse_args(argv)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    llm = ScriptedLLM(host=args.host, port=args.port, latency=args.latency, token_delay=args.token_delay,
                      default_reply_chars=args.default_reply_chars, cache_min=args.cache_min,
                      cache_step=args.cache_step).start()
    print(f"READY {llm.base_url}", flush=True)
    while not stop.wait(0.5):
        pass
    llm.stop()


if __name__ == "__main__":
    main()
