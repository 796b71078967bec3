"""OpenAI's Responses API over Parley (`POST /v1/responses`): a response is a chat completion's run, asked and
answered in the Responses API's shapes.

A request is turned into the chat completion it stands for (`chat_request`: its input items into messages, its
`instructions` into the system message, its flat function tools, `tool_choice` and `text.format` into chat's) and
started by `services.panel.start_completion`, so planning, billing, budgets, the run and its visibility are chat
completions' own. Its run's result (a `chat.completion`) is then read as a `response` object (`response_object`), and
its events as the Responses stream (`ResponseStream`).

A stored response (`store`, true by default: `store.responses`) keeps what its turn added and the response it
continued; a later request naming it (`previous_response_id`) continues the conversation read back along that chain
with the response's answer and its own input (its run refers to the chain too). What a workspace's responses store
is bounded (`PARLEY_WORKSPACE_MAX_STORED_BYTES`). Who may see or continue a response is who may see its run
(`services.runs.visible_run`): what a key may not see is not found.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from parley.core.limits import (
    MAX_CHAT_MESSAGES,
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_KEYS,
    MAX_METADATA_VALUE_CHARS,
    MAX_MODEL_ID_CHARS,
    MAX_RESPONSE_CONVERSATION_BYTES,
    MAX_TOOLS,
    RESPONSE_TTL_DAYS,
)
from parley.llm.client import off_loop
from parley.llm.formats import NAME
from parley.runs.events import Event
from parley.runs.modes.panel import response_model
from parley.services import panel as panel_service
from parley.services import runs as run_service
from parley.services.access import Principal
from parley.services.backend import Backend
from parley.services.errors import (
    InvalidRequest,
    NotFound,
    TooLarge,
    describe_validation,
    invalid_field,
    validation_code,
)
from parley.services.panel import ChatCompletionRequest, PanelOptions
from parley.services.progress import progress_line
from parley.store import responses as store

log = logging.getLogger("parley.responses")


# --- request --------------------------------------------------------------------------------


class TextPart(BaseModel):
    """Text in an item's content: a person's (`input_text`), an answer's (`output_text`) or a refusal."""

    model_config = ConfigDict(extra="allow")  # an answer's `annotations` and `logprobs`: read, not kept

    type: Literal["input_text", "output_text", "refusal"]
    text: str | None = Field(None, description="The text (`input_text`, `output_text`).")
    refusal: str | None = Field(None, description="The text of a `refusal`.")

    @property
    def content(self) -> str:
        return self.text if self.text is not None else self.refusal or ""

    @model_validator(mode="after")
    def _has_text(self) -> TextPart:
        if (self.refusal if self.type == "refusal" else self.text) is None:
            raise ValueError(f"an {self.type} part needs its {'refusal' if self.type == 'refusal' else 'text'}")
        return self


class ImagePart(BaseModel):
    """An image in a person's message, by URL (a `data:` URL included)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["input_image"]
    image_url: str = Field(min_length=1, description="The image's URL or `data:` URL (a `file_id` is not taken).")
    detail: Literal["low", "high", "auto", "original"] | None = None


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


def _item_kind(value: Any) -> str | None:
    """An input item's kind: its `type`, a message when it has none (the short form `{role, content}`)."""
    if isinstance(value, dict):
        return value.get("type", "message")
    return getattr(value, "type", None)


class MessageItem(BaseModel):
    """A message of the conversation: `{role, content}`, content a text or parts; an earlier answer's `id` and
    `status` are accepted and not kept."""

    model_config = ConfigDict(extra="allow")

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart] = Field(description="Non-blank text, or its parts.")

    @model_validator(mode="after")
    def _has_content(self) -> MessageItem:
        if isinstance(self.content, str) and not self.content.strip() or isinstance(self.content, list) and not (
                any(isinstance(p, ImagePart) or p.content.strip() for p in self.content)):
            raise ValueError(f"a {self.role} message needs non-empty content")
        if self.role != "user" and any(isinstance(p, ImagePart) for p in self.content):
            raise ValueError(f"only a user message holds images, not a {self.role} message")
        return self

    def chat(self) -> dict[str, Any]:
        """The message as chat completions take it: text, or a person's parts when they hold an image."""
        if isinstance(self.content, str):
            return {"role": self.role, "content": self.content}
        if not any(isinstance(p, ImagePart) for p in self.content):
            return {"role": self.role, "content": "\n".join(p.content for p in self.content)}
        parts = [{"type": "image_url", "image_url": {"url": p.image_url, **({"detail": p.detail} if p.detail in (
            "low", "high", "auto") else {})}} if isinstance(p, ImagePart) else {"type": "text", "text": p.content}
            for p in self.content]
        return {"role": self.role, "content": parts}


class FunctionCallItem(BaseModel):
    """A function call an earlier answer made (its `id` and `status` are accepted and not kept)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str = Field(description="The call's arguments as the model wrote them (a JSON text).")


class FunctionCallOutputItem(BaseModel):
    """The result of a function call (`call_id`), for the model to read."""

    model_config = ConfigDict(extra="allow")

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[TextPart] = Field(description="The tool's result: a text, or text parts.")

    @property
    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "\n".join(p.content for p in self.output)


INPUT_ITEM_TYPES = ("message", "function_call", "function_call_output")
InputItem = Annotated[
    Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")],
    Discriminator(_item_kind, custom_error_type="invalid_input",
                  custom_error_message="an input item is a message, a function_call or a function_call_output (no "
                                       "other item type is taken)")]

# The shapes `chat_tools`, `chat_tool_choice` and `chat_response_format` take, for the OpenAPI document.
RESPONSE_TOOLS_SCHEMA = {"anyOf": [{"type": "array", "maxItems": MAX_TOOLS, "items": {
    "type": "object", "required": ["type", "name"], "properties": {
        "type": {"const": "function"}, "name": {"type": "string", "pattern": NAME.pattern},
        "description": {"type": "string"},
        "parameters": {"type": "object", "description": "The arguments, as a JSON Schema."},
        "strict": {"type": "boolean"}}}}, {"type": "null"}]}
RESPONSE_TOOL_CHOICE_SCHEMA = {"anyOf": [
    {"enum": ["auto", "none", "required"]},
    {"type": "object", "required": ["type", "name"], "properties": {
        "type": {"const": "function"}, "name": {"type": "string"}}},
    {"type": "null"}]}
TEXT_SCHEMA = {"anyOf": [{"type": "object", "properties": {
    "format": {"anyOf": [
        {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["text", "json_object"]}}},
        {"type": "object", "required": ["type", "name", "schema"], "properties": {
            "type": {"const": "json_schema"}, "name": {"type": "string", "pattern": NAME.pattern},
            "description": {"type": "string"},
            "schema": {"type": "object", "description": "The answer's JSON Schema."},
            "strict": {"type": "boolean"}}}]},
    "verbosity": {"enum": ["low", "medium", "high", None]}}}, {"type": "null"}]}
# OpenAI's parameters Parley does not carry out: refused when set, so that no client believes they were.
UNSUPPORTED = {
    "background": "background responses are not served here: every response is a durable run already "
                  "(GET /v1/runs/{id} follows it)",
    "conversation": "conversations of the Conversations API are not served here: continue a response with "
                    "previous_response_id",
    "prompt": "stored prompt templates are not served here: send instructions and input",
}


class ResponsesRequest(PanelOptions):
    """`POST /v1/responses`: OpenAI's Responses body (function tools only) plus Parley's fields of chat completions
    (`debate`, `panel`, `rule`, `models`, `arbitrator`, `depth`, …)."""

    # Other fields OpenAI's clients send (include, truncation, reasoning, user, ...) are accepted and not acted on.
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=MAX_MODEL_ID_CHARS, description="`router/<id>`, `router/debate`, "
                       "`self-moa/<provider:model>` or a `provider:model` id, as for chat completions.")
    input: Annotated[str, Field(min_length=1)] | Annotated[
        list[InputItem], Field(min_length=1, max_length=MAX_CHAT_MESSAGES)] = Field(
        description="A person's text, or items: messages, function calls and their outputs.")
    instructions: str | None = Field(None, description="The system message of this request (it does not carry over "
                                     "to a response that continues this one).")
    tools: Annotated[list[dict[str, Any]] | None, WithJsonSchema(RESPONSE_TOOLS_SCHEMA)] = Field(
        None, description="Function tools the answer may call (`{type: function, name, description, parameters, "
                          "strict}`), as chat completions' `tools`.")
    tool_choice: Annotated[str | dict[str, Any] | None, WithJsonSchema(RESPONSE_TOOL_CHOICE_SCHEMA)] = Field(
        None, description="`auto` (default), `none`, `required`, or `{type: function, name}`.")
    parallel_tool_calls: bool | None = Field(None, description="Whether the answer may call several tools at once.")
    text: Annotated[dict[str, Any] | None, WithJsonSchema(TEXT_SCHEMA)] = Field(
        None, description="`format`: `text` (default), `json_object`, or `json_schema` (`name`, `schema`, `strict`): "
                          "the answer is that JSON, after one repair at most, or the request fails.")
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1, description="Echoed, not acted on.")
    stream: bool = False
    store: bool = Field(True, description=f"Keep the response {RESPONSE_TTL_DAYS} days, to read it back and "
                                          "continue it; false keeps nothing to read back.")
    previous_response_id: str | None = Field(None, min_length=1, max_length=200, description="Continue the "
                                             "conversation of a stored response of yours with its answer and this "
                                             "input.")
    metadata: dict[str, Annotated[str, Field(max_length=MAX_METADATA_VALUE_CHARS)]] | None = Field(
        None, max_length=MAX_METADATA_KEYS, description=f"Up to {MAX_METADATA_KEYS} pairs of strings, echoed in the "
        f"response (keys up to {MAX_METADATA_KEY_CHARS} characters, values up to {MAX_METADATA_VALUE_CHARS}).")

    @field_validator("input")
    @classmethod
    def _text_not_blank(cls, value: str | list[Any]) -> str | list[Any]:
        if isinstance(value, str) and not value.strip():
            raise ValueError("a text input needs non-blank text")
        return value

    @field_validator("metadata")
    @classmethod
    def _short_keys(cls, metadata: dict[str, str] | None) -> dict[str, str] | None:
        if metadata and (long := next((k for k in metadata if len(k) > MAX_METADATA_KEY_CHARS), None)):
            raise ValueError(f"a key has at most {MAX_METADATA_KEY_CHARS} characters ({long[:80]!r}… has "
                             f"{len(long)})")
        return metadata

    @model_validator(mode="after")
    def _supported(self) -> ResponsesRequest:
        extra = self.model_extra or {}
        for name, why in UNSUPPORTED.items():
            if extra.get(name):
                raise invalid_field("unsupported_parameter", f"{name}: {why}")
        return self

    @property
    def items(self) -> list[MessageItem | FunctionCallItem | FunctionCallOutputItem]:
        """The input as items (a text is a person's message)."""
        return [MessageItem(role="user", content=self.input)] if isinstance(self.input, str) else list(self.input)

    def echo(self) -> dict[str, Any]:
        """The request's settings as a `response` object repeats them (`response_object` fills in `ECHO_DEFAULTS`
        for those it leaves out)."""
        extra = self.model_extra or {}
        return {"instructions": self.instructions, "tools": self.tools or [],
                "tool_choice": self.tool_choice or "auto",
                "parallel_tool_calls": True if self.parallel_tool_calls is None else self.parallel_tool_calls,
                "text": self.text or {"format": {"type": "text"}},
                **({"temperature": self.temperature} if self.temperature is not None else {}),
                **({"top_p": self.top_p} if self.top_p is not None else {}),
                "max_output_tokens": self.max_output_tokens, "previous_response_id": self.previous_response_id,
                "metadata": self.metadata or {}, "store": self.store, "user": extra.get("user"),
                **{key: extra[key] for key in ("safety_identifier", "prompt_cache_key")
                   if isinstance(extra.get(key), str)}}


# What a `response` object says of the settings a request left out, as the Open Responses schema requires them: the
# sampling defaults (Parley sends no temperature or top_p then, so a provider's own apply: OpenAI's are these), no
# penalties, log probabilities, tool call cap, truncation or background (none is carried out here).
ECHO_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0, "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "top_logprobs": 0,
    "max_tool_calls": None, "truncation": "disabled", "background": False, "reasoning": None,
    "service_tier": "default", "safety_identifier": None, "prompt_cache_key": None}


# --- the chat completion a request stands for -----------------------------------------------


def chat_messages(items: list[MessageItem | FunctionCallItem | FunctionCallOutputItem]) -> list[dict[str, Any]]:
    """Input items as chat messages: a function call joins the assistant message before it (else starts one), its
    output is a `tool` message."""
    messages: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, MessageItem):
            messages.append(item.chat())
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}
            if messages and messages[-1]["role"] == "assistant" and isinstance(messages[-1].get("content"), str | None):
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text})
    return messages


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Responses' flat function tools as chat completions' (`{type, function: {...}}`).

    Raises:
        InvalidRequest: `invalid_tools`: a tool that is not a function (OpenAI's own tools run at OpenAI).
    """
    if tools is None:
        return None
    chat = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise InvalidRequest(f"tools[{i}]: only function tools are taken here, not {kind!r} (a tool OpenAI runs "
                                 "itself)", code="invalid_tools", param=f"tools[{i}]")
        chat.append({"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}})
    return chat


def chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """Responses' `tool_choice` as chat completions': `{type: function, name}` becomes `{type, function: {name}}`."""
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise InvalidRequest("tool_choice: 'auto', 'none', 'required' or {type: 'function', name}, not "
                                 f"{json.dumps(choice)[:200]}", code="invalid_tools", param="tool_choice")
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def chat_response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """`text.format` as chat completions' `response_format`.

    Raises:
        InvalidRequest: `invalid_response_format`: a format of no known type.
    """
    fmt = (text or {}).get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
    raise InvalidRequest("text.format: {type: 'text'}, {type: 'json_object'} or {type: 'json_schema', name, schema, "
                         f"strict}}, not {json.dumps(fmt)[:200]}", code="invalid_response_format",
                         param="text.format")


def chat_request(body: ResponsesRequest, conversation: list[dict[str, Any]]) -> ChatCompletionRequest:
    """The chat completion `body` stands for, `conversation` its messages (instructions not included).

    Raises:
        InvalidRequest: the conversation is longer than one request may be, its tool calls and outputs do not
            fit (`invalid_tool_messages`), or a tool, the tool choice or the format is not one chat takes.
    """
    if len(conversation) > MAX_CHAT_MESSAGES:
        raise InvalidRequest(f"The conversation would hold {len(conversation)} messages, more than one request may "
                             f"({MAX_CHAT_MESSAGES}): start a new one", code="conversation_too_long")
    size = len(json.dumps(conversation, ensure_ascii=False).encode())
    if size > MAX_RESPONSE_CONVERSATION_BYTES:
        raise InvalidRequest(f"The conversation would be {size:,} bytes of JSON, more than one may be "
                             f"({MAX_RESPONSE_CONVERSATION_BYTES:,}): start a new one", code="conversation_too_long")
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    options = body.model_dump(include=set(PanelOptions.model_fields), exclude_none=True)
    extra = body.model_extra or {}
    fields = {"model": body.model, "messages": system + conversation, "temperature": body.temperature,
              "max_completion_tokens": body.max_output_tokens, "stream": body.stream,
              "tools": chat_tools(body.tools), "tool_choice": chat_tool_choice(body.tool_choice),
              "parallel_tool_calls": body.parallel_tool_calls, "response_format": chat_response_format(body.text),
              "metadata": body.metadata, "seed": extra.get("seed"), **options}
    try:
        return ChatCompletionRequest.model_validate(fields)
    except ValidationError as exc:
        errors = exc.errors()
        raise InvalidRequest("The conversation (the previous response's, then this input) cannot be sent: "
                             + describe_validation(errors).removeprefix("Invalid request: "),
                             code=validation_code(errors)) from None


# --- starting ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    """A response whose run has started: what its `response` object is made of."""

    response_id: str
    created_at: int
    record: dict[str, Any]  # its run's record
    echo: dict[str, Any]  # the request's settings (`ResponsesRequest.echo`)

    @property
    def run_id(self) -> str:
        return self.record["_id"]

    def in_progress(self) -> dict[str, Any]:
        """The response before it has an answer."""
        return response_object(self.response_id, self.created_at, self.echo, run_id=self.run_id,
                               status="in_progress", model=response_model(self.record["input"]["plan"], {}))


async def continued(backend: Backend, principal: Principal, response_id: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The conversation of the stored response `response_id` followed by its answer, to continue it, read back
    from its chain (`store.responses.conversation`), and the ids of that chain.

    Raises:
        NotFound: `response_not_found`: no such response the key may see, or one not stored (`store: false`) or
            expired; `response_chain_broken`: a response it continues was deleted or has expired.
        InvalidRequest: `response_not_completed`: it has no answer (it is still running, failed or was cancelled);
            `conversation_too_long`: the conversation holds more than one request may.
    """
    _, run = await visible_response(backend, principal, response_id)
    if run["status"] != "completed":
        raise InvalidRequest(f"previous_response_id: response '{response_id}' has no answer to continue from (it is "
                             f"{run['status']})", code="response_not_completed", param="previous_response_id")
    try:
        return await store.conversation(backend.db, response_id=response_id, workspace=principal.workspace,
                                        max_messages=MAX_CHAT_MESSAGES, max_bytes=MAX_RESPONSE_CONVERSATION_BYTES)
    except store.ChainBroken as exc:
        raise NotFound(f"previous_response_id: {exc}: it cannot be continued (start a new conversation, or "
                       "continue a response made before the one deleted)", code="response_chain_broken",
                       param="previous_response_id") from None
    except store.TooLong as exc:
        raise InvalidRequest(f"The conversation would hold {exc}: start a new one", code="conversation_too_long",
                             param="previous_response_id") from None


def stored_turn(chat: ChatCompletionRequest, start: int, echo: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """What a stored response keeps of its turn: its messages from `start` on, as the model reads them, and the bytes
    they and its settings count for (on a worker thread: one message may be megabytes)."""
    turn = [message.openai() for message in chat.messages[start:]]
    return turn, store.stored_size(turn, echo)


async def start_response(backend: Backend, principal: Principal, body: ResponsesRequest) -> Started:
    """Continue the previous response's conversation (if any), start the chat completion the request stands for
    (`services.panel.start_completion`: planning, credit, budget, the run) and, with `store`, store the response:
    its bytes are reserved in the workspace's bound first, so that a refusal starts and stores nothing.

    Raises:
        InvalidRequest, NotFound, PaymentRequired: as `start_completion`, `chat_request` and `continued`.
        TooLarge: `storage_quota_exceeded`: storing it would pass the workspace's bound.
    """
    earlier, chain = (await continued(backend, principal, body.previous_response_id) if body.previous_response_id
                      else ([], []))
    items = body.items
    conversation = earlier + await off_loop(len(items), chat_messages, items)
    chat = await off_loop(len(conversation), chat_request, body, conversation)
    response_id = "resp_" + uuid.uuid4().hex
    echo = {"model": body.model, **body.echo()}
    system = 1 if body.instructions else 0
    history = panel_service.History(body.previous_response_id, system, len(earlier)) if earlier else None
    size = 0
    if body.store:  # what this turn adds, as the model reads it; the conversation before it stays in its chain
        turn, size = await asyncio.to_thread(stored_turn, chat, system + len(earlier), echo)
        limit = backend.settings.parley_workspace_max_stored_bytes
        if not await store.reserve(backend.db, workspace=principal.workspace, size=size, limit=limit):
            raise TooLarge(f"This response ({size:,} bytes to store) would take the workspace's stored responses "
                           f"past their bound ({limit:,} bytes, PARLEY_WORKSPACE_MAX_STORED_BYTES): delete responses "
                           "you no longer need (DELETE /v1/responses/{id}), or send store: false",
                           code="storage_quota_exceeded")
    try:
        record = await panel_service.start_completion(backend, principal.caller, chat, completion_id=response_id,
                                                      history=history)
    except BaseException:
        if size:
            await store.release(backend.db, workspace=principal.workspace, size=size)
        raise
    started = Started(response_id, int(time.time()), record, echo)
    if body.store:
        try:
            await store.add_response(backend.db, response_id=response_id, run_id=record["_id"],
                                     workspace=principal.workspace, user=principal.user,
                                     previous=body.previous_response_id, messages=turn, echo=echo, size=size,
                                     chain=chain)
        except BaseException:
            log.warning("response %s could not be stored: its run %s is cancelled", response_id, record["_id"])
            await backend.runs.cancel(record["_id"])  # nobody could read or continue it: it is not answered either
            await store.release(backend.db, workspace=principal.workspace, size=size)
            raise
    return started


# --- answering --------------------------------------------------------------------------------------


def message_item(item_id: str, text: str, *, status: str = "completed") -> dict[str, Any]:
    """An answer's text as an output `message` item."""
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [text_part(text)] if status == "completed" else []}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(item_id: str, call: dict[str, Any], *, status: str = "completed") -> dict[str, Any]:
    """A tool call of the answer (`id`, `name`, `arguments`) as an output `function_call` item."""
    return {"type": "function_call", "id": item_id, "call_id": call["id"], "name": call["name"],
            "arguments": call["arguments"], "status": status}


def message_id(response_id: str) -> str:
    return "msg_" + response_id.removeprefix("resp_")


def call_id(response_id: str, index: int) -> str:
    return f"fc_{response_id.removeprefix('resp_')}_{index}"


def output_items(response_id: str, completion: dict[str, Any]) -> list[dict[str, Any]]:
    """The answer of a `chat.completion` as output items: its text, then each tool call. Their ids follow from the
    response's, so a stream, its `response.completed` and a later read agree."""
    message = completion["choices"][0]["message"]
    items = [message_item(message_id(response_id), message["content"])] if message.get("content") else []
    for i, call in enumerate(message.get("tool_calls") or []):
        items.append(call_item(call_id(response_id, i), {"id": call["id"], **call["function"]}))
    return items


def usage_object(usage: dict[str, Any]) -> dict[str, Any]:
    """A chat completion's `usage` in the Responses API's names."""
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
    return {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": reasoning}}


def response_object(response_id: str, created_at: float, echo: dict[str, Any], *, run_id: str, status: str,
                    model: str, completion: dict[str, Any] | None = None, error: dict[str, Any] | None = None,
                    completed_at: float | None = None) -> dict[str, Any]:
    """The `response` object: the request's settings (`echo`), its status and, once answered, the answer
    (`completion`, the run's `chat.completion`) as output items, its usage and Parley's `_meta`.

    `metadata` is the request's, plus `parley_run_id` (the run: `GET /v1/runs/{id}`) and, once answered,
    `parley_router_mode` (how it was answered); a debate's whole `_meta` is the extra top-level field `_meta`, as in
    a chat completion (the openai SDK keeps it in `model_extra`).
    """
    metadata = {**echo["metadata"], "parley_run_id": run_id}
    body: dict[str, Any] = {
        "id": response_id, "object": "response", "created_at": created_at, "completed_at": None, "status": status,
        **ECHO_DEFAULTS, **{k: v for k, v in echo.items() if v is not None or ECHO_DEFAULTS.get(k) is None},
        "model": model, "output": [], "error": error, "incomplete_details": None, "usage": None,
        "metadata": metadata}
    if completion is not None:
        metadata["parley_router_mode"] = completion["_meta"]["routerMode"]
        body |= {"model": completion["model"], "output": output_items(response_id, completion),
                 "usage": usage_object(completion["usage"]), "completed_at": completed_at,
                 "_meta": completion["_meta"]}
    return body


def error_object(error: dict[str, Any]) -> dict[str, Any]:
    """A failed run's error as a failed response's `error`."""
    return {"code": error.get("code") or "server_error", "message": error["message"]}


async def response_of(backend: Backend, started: Started) -> dict[str, Any]:
    """The `response` object of a started response, once its run has ended.

    Raises:
        RunFailed: the run failed (its error) or was cancelled.
    """
    completion = await panel_service.completion_of(backend, started.record)
    return response_object(started.response_id, started.created_at, started.echo, run_id=started.run_id,
                           status="completed", model=completion["model"], completion=completion,
                           completed_at=int(time.time()))


async def visible_response(backend: Backend, principal: Principal, response_id: str) -> tuple[dict, dict]:
    """The stored response `response_id` and its run's record, when the key may see its run.

    Raises:
        NotFound: `response_not_found`: no such stored response in the workspace, or one the key may not see.
    """
    doc = await store.find_response(backend.db, response_id=response_id, workspace=principal.workspace)
    try:
        if doc is None:
            raise NotFound("no stored response")
        run = await run_service.visible_run(backend.runs, principal, doc["run"])
    except NotFound:
        raise NotFound(f"No stored response '{response_id}' in this workspace (a response made with store: false "
                       f"is not kept; a stored one is kept {RESPONSE_TTL_DAYS} days)", code="response_not_found",
                       param="response_id") from None
    return doc, run


async def retrieve(backend: Backend, principal: Principal, response_id: str) -> dict[str, Any]:
    """The `response` object of a stored response, in whatever state its run is.

    Raises:
        NotFound: as `visible_response`.
    """
    doc, run = await visible_response(backend, principal, response_id)
    created = int(doc["createdAt"].timestamp())
    if run["status"] == "completed":
        return response_object(response_id, created, doc["echo"], run_id=run["_id"], status="completed",
                               model=run["result"]["model"], completion=run["result"],
                               completed_at=int(run["finishedAt"].timestamp()) if run.get("finishedAt") else None)
    status = {"failed": "failed", "cancelled": "cancelled"}.get(run["status"], "in_progress")
    error = error_object(run.get("error") or {"message": "The run failed"}) if status == "failed" else None
    return response_object(response_id, created, doc["echo"], run_id=run["_id"], status=status,
                           model=response_model(run["input"]["plan"], {}), error=error)


async def delete(backend: Backend, principal: Principal, response_id: str) -> dict[str, Any]:
    """Delete a stored response (its owner's key or an admin key); its run stays, as every run does.

    Raises:
        NotFound: as `visible_response`.
        Forbidden: the key is read-only, or neither the run's owner's nor an admin key.
    """
    doc, _ = await visible_response(backend, principal, response_id)
    await run_service.visible_run(backend.runs, principal, doc["run"], write=True)
    await store.delete_response(backend.db, response_id=response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


# --- streaming ---------------------------------------------------------------------------------------


class ResponseStream:
    """A response's run events as the Responses API's stream: `response.created` and `response.in_progress`; per
    output item `response.output_item.added`, its text (`response.content_part.added`,
    `response.output_text.delta`…, `.done`, `response.content_part.done`) or its call's arguments
    (`response.function_call_arguments.delta`…, `.done`), `response.output_item.done`; then `response.completed`,
    or `response.failed` for a run that failed, an `error` event for a stream that cannot go on. Each event has
    its `sequence_number`. Progress (a panelist answered, the arbitrator is answering) comes as comment lines.
    """

    def __init__(self, started: Started) -> None:
        self.started = started
        self.snapshot = started.in_progress()
        self.seq = 0
        self.items: list[dict[str, Any]] = []  # the items opened, by output_index
        self.open: int | None = None  # the output_index of the item being streamed
        self.calls: dict[int, int] = {}  # a tool call's index → its item's output_index
        self.ended = False

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return event

    def opening(self) -> list[dict[str, Any]]:
        return [self._event("response.created", response=self.snapshot),
                self._event("response.in_progress", response=self.snapshot)]

    def translate(self, event: Event) -> list[dict[str, Any] | str]:
        """What one run event is in the stream: events, and progress lines (str)."""
        name, data = event.event, event.data
        if name == "error" and event.seq is None:  # the stream's own: storage failed, the run goes on
            return [self.error(data.get("error") or data)]
        if name == "chunk":
            return self._text(data["content"])
        if name == "tool_call" and "speaker" not in data:  # the answer's call (a panelist's is a step)
            return self._call(data)
        if name == "done":
            return self._completed(data["completion"])
        if name == "error":  # the run's
            return self._failed(data.get("error") or data)
        if name == "cancelled":
            return [self.error({"message": data["message"], "code": "cancelled"})]
        line = progress_line("panel", name, data)
        return [line] if line else []

    def _add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._close()
        self.items.append(item)
        self.open = len(self.items) - 1
        return [*events, self._event("response.output_item.added", output_index=self.open, item=dict(item))]

    def _text(self, delta: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self.open is None or self.items[self.open]["type"] != "message":
            item_id = message_id(self.started.response_id)
            events += self._add(message_item(item_id, "", status="in_progress"))
            events.append(self._event("response.content_part.added", item_id=item_id, output_index=self.open,
                                      content_index=0, part=text_part("")))
            self.items[self.open]["text"] = ""
        item = self.items[self.open]
        item["text"] += delta
        return [*events, self._event("response.output_text.delta", item_id=item["id"], output_index=self.open,
                                     content_index=0, delta=delta, logprobs=[])]

    def _call(self, piece: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if piece["index"] not in self.calls:
            item = call_item(call_id(self.started.response_id, piece["index"]),
                             {"id": piece.get("id") or "", "name": piece.get("name") or "", "arguments": ""},
                             status="in_progress")
            events += self._add(item)
            self.calls[piece["index"]] = self.open
        at = self.calls[piece["index"]]
        item = self.items[at]
        item["arguments"] += piece["arguments"]
        if not piece["arguments"]:
            return events
        return [*events, self._event("response.function_call_arguments.delta", item_id=item["id"], output_index=at,
                                     delta=piece["arguments"])]

    def _close(self) -> list[dict[str, Any]]:
        """The events that end the item being streamed."""
        if self.open is None:
            return []
        at, item = self.open, self.items[self.open]
        self.open = None
        if item["type"] == "message":
            text = item.pop("text")
            done = message_item(item["id"], text)
            return [self._event("response.output_text.done", item_id=item["id"], output_index=at, content_index=0,
                                text=text, logprobs=[]),
                    self._event("response.content_part.done", item_id=item["id"], output_index=at, content_index=0,
                                part=text_part(text)),
                    self._event("response.output_item.done", output_index=at, item=done)]
        done = {**item, "status": "completed"}
        return [self._event("response.function_call_arguments.done", item_id=item["id"], output_index=at,
                            arguments=item["arguments"], name=item["name"]),
                self._event("response.output_item.done", output_index=at, item=done)]

    def _completed(self, completion: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._close()
        final = response_object(self.started.response_id, self.started.created_at, self.started.echo,
                                run_id=self.started.run_id, status="completed", model=completion["model"],
                                completion=completion, completed_at=int(time.time()))
        streamed = {item["id"] for item in self.items}
        for item in final["output"]:  # an answer that came whole, not piece by piece
            if item["id"] not in streamed:
                self.items.append(item)
                at = len(self.items) - 1
                added = message_item(item["id"], "", status="in_progress") if item["type"] == "message" else {
                    **item, "arguments": "", "status": "in_progress"}
                events.append(self._event("response.output_item.added", output_index=at, item=added))
                if item["type"] == "message":
                    text = item["content"][0]["text"]
                    events += [
                        self._event("response.content_part.added", item_id=item["id"], output_index=at,
                                    content_index=0, part=text_part("")),
                        self._event("response.output_text.delta", item_id=item["id"], output_index=at,
                                    content_index=0, delta=text, logprobs=[]),
                        self._event("response.output_text.done", item_id=item["id"], output_index=at,
                                    content_index=0, text=text, logprobs=[]),
                        self._event("response.content_part.done", item_id=item["id"], output_index=at,
                                    content_index=0, part=text_part(text))]
                else:
                    events += [
                        self._event("response.function_call_arguments.delta", item_id=item["id"], output_index=at,
                                    delta=item["arguments"]),
                        self._event("response.function_call_arguments.done", item_id=item["id"], output_index=at,
                                    arguments=item["arguments"], name=item["name"])]
                events.append(self._event("response.output_item.done", output_index=at, item=item))
        self.ended = True
        return [*events, self._event("response.completed", response=final)]

    def _failed(self, error: dict[str, Any]) -> list[dict[str, Any]]:
        self.ended = True
        failed = {**self.snapshot, "status": "failed", "error": error_object(error)}
        return [self._event("response.failed", response=failed)]

    def error(self, error: dict[str, Any]) -> dict[str, Any]:
        """An `error` event: the stream cannot go on (the run was cancelled, or storage failed: the run goes on, and
        `GET /v1/responses/{id}` or `GET /v1/runs/{id}/events` reads its end)."""
        self.ended = True
        kind = "invalid_request_error" if 400 <= (error.get("status") or 500) < 500 else "server_error"
        return self._event("error", code=error.get("code"), message=error["message"], param=None,
                           error={"type": kind, "code": error.get("code"), "message": error["message"], "param": None})

