"""The chat client every model call goes through: `ChatOpenAI` with a total deadline, a finish_reason check,
scrubbed failures, and long conversations converted off the event loop."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import httpx2 as httpx  # the openai SDK's HTTP library (httpx's API, its own types)
import openai
from langchain_core.caches import BaseCache
from langchain_core.load import dumps
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, message_chunk_to_message
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk
from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI
from pydantic import Field

from parley.core.limits import OFF_LOOP_MESSAGES
from parley.llm.breakpoints import mark_stable_prefix
from parley.llm.endpoints import endpoint, retry_after
from parley.llm.failures import IncompleteAnswerError, ModelDeadlineError, ModelIdleError, mark_sent, scrub_failure
from parley.llm.guards import admit
from parley.llm.reasoning import OPEN, ThinkingFilter, strip_thinking

ResultT = TypeVar("ResultT")

HAS_CHUNK_TIMEOUT = "stream_chunk_timeout" in ChatOpenAI.model_fields
# A long conversation's request messages, converted off the event loop for the call about to build its request.
_CONVERTED: ContextVar[tuple[list[BaseMessage], list[dict]] | None] = ContextVar("parley_converted", default=None)
# The call being sent in this task: its transport (`WholeAnswerTransport`) says when the endpoint's answer began.
_SENDING: ContextVar[_Sending | None] = ContextVar("parley_sending", default=None)


class _Sending:
    """One call from its sending on: `answered` once the endpoint's 2xx status came (its answer had begun, so it is
    paid for whatever becomes of it: `llm.failures.was_paid`)."""

    answered = False

    def failed(self, exc: BaseException) -> None:
        mark_sent(exc, answered=self.answered)


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


class BoundedChatOpenAI(ChatOpenAI):
    """`ChatOpenAI` whose every call, streamed or not, ends: within `call_deadline` seconds in all, with a
    finish_reason when streamed, and with any upstream text in its failure capped and redacted.

    Every model call of every mode goes through one of these (`ModelFactory._build`), so these guarantees
    hold everywhere. A streamed call also fails once `chunk_gap` seconds pass without a chunk (keep-alive comments
    do not count): one timer per chunk bounds both, where langchain-openai's `stream_chunk_timeout` (turned off by
    `ModelFactory`) would wrap each chunk's wait in a task of its own. A call to an endpoint that answers
    `max_concurrent` calls at once waits in its line before it is sent (`llm.endpoints.Endpoint.slot`); the
    deadline and the read timeout count from the sending.
    """

    call_deadline: float = Field(300.0, gt=0, exclude=True)
    chunk_gap: float | None = Field(None, gt=0, exclude=True)
    parley_model_id: str = Field("", exclude=True)
    # The provider's quirks (`llm.providers.Provider`): `null_assistant_content` False sends an assistant message that
    # calls tools with empty text rather than `content: null`; `repeats_tool_call_names` True keeps a streamed call's
    # name and id in its first piece only and drops the deprecated `function_call`.
    null_assistant_content: bool = Field(True, exclude=True)
    repeats_tool_call_names: bool = Field(False, exclude=True)
    # Calls the endpoint answers at once (`Provider.max_concurrent`; None: no limit): more wait in its line
    # (`llm.endpoints.Endpoint.slot`), and their deadline and read timeout start when they are sent.
    max_concurrent: int | None = Field(None, ge=1, exclude=True)
    # The shortest stable prefix (tokens) that gets a `cache_control` breakpoint (`llm.breakpoints`), for a model that
    # caches only marked prefixes (`Provider.marks_cache`); None: the request carries no breakpoints.
    cache_marks_from: int | None = Field(None, ge=1, exclude=True)

    async def astream(self, input: Any, config: RunnableConfig | None = None, *, stop: list[str] | None = None,
                      **kwargs: Any) -> Any:
        """Stream the answer; with a response cache (`cache=`), answer from it when it holds this call, and store a
        streamed answer in it. LangChain's `astream` reads no cache (only `ainvoke` does): a cached answer comes whole,
        in one chunk, through `ainvoke` (so its callbacks see it as a call), and a streamed one is stored once it
        has ended."""
        cache = self.cache if isinstance(self.cache, BaseCache) else None
        if cache is None:
            async for chunk in super().astream(input, config, stop=stop, **kwargs):
                yield chunk
            return
        messages = self._convert_input(input).to_messages()
        prompt, llm_string = await off_loop(len(messages), self._cache_key, messages, stop, kwargs)
        if isinstance(await cache.alookup(prompt, llm_string), list):
            yield _as_chunk(await self.ainvoke(messages, config, stop=stop, **kwargs))
            return
        pieces: list[AIMessageChunk] = []
        async for chunk in super().astream(messages, config, stop=stop, **kwargs):
            pieces.append(chunk)
            yield chunk
        if pieces:
            whole = message_chunk_to_message(sum(pieces[1:], pieces[0]))
            await cache.aupdate(prompt, llm_string, [ChatGeneration(message=whole)])

    def _cache_key(self, messages: list[BaseMessage], stop: list[str] | None,
                   kwargs: dict[str, Any]) -> tuple[str, str]:
        """The (prompt, llm string) a call is cached under, as `BaseChatModel._agenerate_with_cache` makes them."""
        traced = ("ls_structured_output_format", "structured_output_format")  # tracing only: not sent, not keyed
        kwargs = {k: v for k, v in kwargs.items() if k not in traced}
        plain = [m.model_copy(update={"id": None}) if getattr(m, "id", None) is not None else m for m in messages]
        return dumps(plain), self._get_llm_string(stop=stop, **kwargs)

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                       **kwargs: Any) -> Any:
        await admit(run_manager)  # what the call's guards deferred (`llm.guards`): a refusal sends nothing
        # In line for a place at the endpoint first: the deadline (and the read timeout) count from the sending.
        place = endpoint(self.openai_api_base)
        async with place.slot(self.max_concurrent, model=self._model_id):
            await place.ready()
            await self._convert_off_loop(messages)
            sending = _Sending()
            _SENDING.set(sending)
            try:  # sent from here on: a failure is marked so (`llm.failures.mark_sent`), the call may be paid for
                deadline = asyncio.get_running_loop().time() + self.call_deadline
                source = super()._astream(messages, stop, run_manager, **kwargs)
                if self.repeats_tool_call_names:
                    source = _named_once(source)
                source = _without_thinking(source)
                loop, gap = asyncio.get_running_loop(), self.chunk_gap
                chunks, finished = 0, False
                try:
                    while True:
                        limit = deadline if gap is None else min(deadline, loop.time() + gap)
                        bound = asyncio.timeout_at(limit)
                        try:
                            async with bound:
                                chunk = await anext(source)
                        except StopAsyncIteration:
                            break
                        except TimeoutError as exc:
                            raise self._timed_out(exc, bound.expired() and limit == deadline, chunks) from exc
                        chunks += 1
                        finished = finished or bool((chunk.generation_info or {}).get("finish_reason"))
                        yield chunk
                except Exception as exc:
                    self._refused(exc)
                    raise
                finally:
                    await source.aclose()
                if not finished:  # the SDK takes a stream that just stops for a complete one
                    raise IncompleteAnswerError(self._model_id, chunks)
            except BaseException as exc:
                sending.failed(exc)
                raise

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                         **kwargs: Any) -> Any:
        await admit(run_manager)  # what the call's guards deferred (`llm.guards`): a refusal sends nothing
        if self.streaming:  # answered through `_astream`, which keeps the deadline itself
            return await super()._agenerate(messages, stop, run_manager, **kwargs)
        place = endpoint(self.openai_api_base)
        async with place.slot(self.max_concurrent, model=self._model_id):
            await place.ready()
            await self._convert_off_loop(messages)
            sending = _Sending()
            _SENDING.set(sending)
            try:  # sent from here on (see `_astream`)
                return await self._sent(messages, stop, run_manager, **kwargs)
            except BaseException as exc:
                sending.failed(exc)
                raise

    async def _sent(self, messages: list[BaseMessage], stop: list[str] | None, run_manager: Any,
                    **kwargs: Any) -> Any:
        """The whole answer to a call being sent, within its deadline."""
        bound = asyncio.timeout(self.call_deadline)
        try:
            async with bound:
                result = await super()._agenerate(messages, stop, run_manager, **kwargs)
            if self.repeats_tool_call_names:
                for generation in result.generations:
                    generation.message.additional_kwargs.pop("function_call", None)
            result.generations = [_thought_dropped(g) for g in result.generations]
            return result
        except TimeoutError as exc:
            raise self._timed_out(exc, bound.expired(), None) from exc
        except json.JSONDecodeError as exc:  # the SDK's, reading a body that broke off (or was never JSON)
            raise IncompleteAnswerError(self._model_id, body=exc) from exc
        except Exception as exc:
            self._refused(exc)
            raise

    async def _convert_off_loop(self, messages: list[BaseMessage]) -> None:
        """Turn a long conversation into the request's message dicts on a worker thread (`_get_request_payload`
        takes them from there): langchain-openai does it on the event loop, at ~20 µs a message."""
        if len(messages) < OFF_LOOP_MESSAGES:
            return
        if (converted := _RECENT.get(messages)) is None:
            payload = await asyncio.to_thread(lambda: super(BoundedChatOpenAI, self)._get_request_payload(messages))
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
        if isinstance(payload.get("response_format"), dict):
            # Sent as it is, in the same place of the body, where langchain-openai would hand it to the SDK's
            # `parse`, which reads the answer inside the call: an answer it cannot read failed the call, so the call
            # was paid for and never recorded. Parley's parsers read it once the call has ended.
            payload["extra_body"] = {**(payload.get("extra_body") or {}),
                                     "response_format": payload.pop("response_format")}
        if "messages" in payload and not (self.null_assistant_content and not self.repeats_tool_call_names):
            payload["messages"] = [self._assistant_message(m) if m.get("role") == "assistant" else m
                                   for m in payload["messages"]]
        if "messages" in payload and self.cache_marks_from is not None:
            payload["messages"] = mark_stable_prefix(payload["messages"], self.cache_marks_from)
        if "messages" in payload:
            # The openai SDK walks every request against its parameter types, on the event loop: ~0.15 ms a
            # message (0.3 s for a 2,000-message conversation, per call), and chat messages have nothing it
            # changes. Given as `extra_body`, they are sent as they are, in the same place of the same JSON body.
            payload["extra_body"] = {**(payload.get("extra_body") or {}), "messages": payload["messages"]}
            payload["messages"] = []
        return payload

    def _assistant_message(self, message: dict) -> dict:
        """An assistant message as this provider takes it (see the quirks above)."""
        message = dict(message)
        if message.get("content") is None and not self.null_assistant_content:
            message["content"] = ""
        if self.repeats_tool_call_names and message.get("tool_calls"):
            message.pop("function_call", None)
        return message

    def _refused(self, exc: Exception) -> None:
        """A failed call: the endpoint's `Retry-After` on a 429 holds its next calls (`llm.endpoints`); the failure's
        text is scrubbed of secrets."""
        if isinstance(exc, openai.RateLimitError):
            endpoint(self.openai_api_base).throttled(retry_after(exc))
        scrub_failure(exc, self._secrets())

    @property
    def _model_id(self) -> str:
        return self.parley_model_id or self.model_name

    def _timed_out(self, exc: TimeoutError, deadline_passed: bool, chunks: int | None) -> Exception:
        if deadline_passed:
            return ModelDeadlineError(self._model_id, self.call_deadline)
        # No chunk within `chunk_gap` (or, were it on, langchain-openai's StreamChunkTimeoutError).
        return ModelIdleError(self._model_id, self.chunk_gap or getattr(exc, "timeout_s", None)
                              or self.stream_chunk_timeout or 0, getattr(exc, "chunks_received", chunks))

    def _secrets(self) -> tuple[str, ...]:
        key = self.openai_api_key
        return (key.get_secret_value(),) if key is not None else ()



class WholeAnswerTransport(httpx.AsyncHTTPTransport):
    """The HTTP transport of every model call: it tells the call being sent when its answer began (a 2xx status:
    the call is paid for from then on, `llm.failures.was_paid`), and an answer asked for whole (a JSON body, not an event stream) must
    arrive within `read_timeout` seconds of its headers, where httpx's read timeout bounds each read alone, so an
    endpoint sending a byte a minute kept a call open until its deadline."""

    def __init__(self, read_timeout: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.read_timeout = read_timeout

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if response.status_code < 300 and (sending := _SENDING.get()) is not None:
            sending.answered = True
        if "text/event-stream" not in response.headers.get("content-type", ""):
            response.stream = _BodyWithin(response.stream, self.read_timeout)
        return response


class _BodyWithin(httpx.AsyncByteStream):
    """A response body that must be read in all within `seconds` (`WholeAnswerTransport`)."""

    def __init__(self, stream: Any, seconds: float) -> None:
        self.stream, self.seconds = stream, seconds

    async def __aiter__(self) -> Any:
        deadline = asyncio.get_running_loop().time() + self.seconds
        pieces = aiter(self.stream)
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    piece = await anext(pieces)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise httpx.ReadTimeout(f"the answer's body took more than {self.seconds:g} s to arrive") from None
            yield piece

    async def aclose(self) -> None:
        await self.stream.aclose()


async def _named_once(source: Any) -> Any:
    """Streamed chunks with each tool call's name and id in its first piece only, and no `function_call`."""
    named: set[int] = set()
    async for chunk in source:
        message = chunk.message
        pieces = list(getattr(message, "tool_call_chunks", None) or ())
        if pieces or "function_call" in message.additional_kwargs:
            once = []
            for piece in pieces:
                index = piece.get("index") or 0
                once.append(piece if index not in named else {**piece, "name": None, "id": None})
                named.add(index)
            extra = {k: v for k, v in message.additional_kwargs.items() if k != "function_call"}
            message = AIMessageChunk(content=message.content, additional_kwargs=extra, tool_call_chunks=once,
                                     response_metadata=message.response_metadata, id=message.id,
                                     usage_metadata=message.usage_metadata)
            chunk = ChatGenerationChunk(message=message, generation_info=chunk.generation_info)
        yield chunk


def _with_content(chunk: ChatGenerationChunk, text: str) -> ChatGenerationChunk:
    return ChatGenerationChunk(message=chunk.message.model_copy(update={"content": text}),
                               generation_info=chunk.generation_info)


async def _without_thinking(source: Any) -> Any:
    """Streamed chunks with the answer's `<think>` blocks dropped (`llm.reasoning.ThinkingFilter`)."""
    thinking = ThinkingFilter()
    try:
        async for chunk in source:
            content = chunk.message.content
            if isinstance(content, str) and content and (
                    "<" in content or thinking.held or thinking.inside or thinking.after):
                chunk = _with_content(chunk, thinking.feed(content))
            if (chunk.generation_info or {}).get("finish_reason") and (rest := thinking.flush()):
                chunk = _with_content(chunk, f"{chunk.message.content}{rest}")
            yield chunk
    finally:
        await source.aclose()


def _thought_dropped(generation: Any) -> Any:
    """A whole answer's generation without its `<think>` blocks (`llm.reasoning.strip_thinking`)."""
    message = generation.message
    if not (isinstance(message.content, str) and OPEN in message.content):
        return generation
    return ChatGeneration(message=message.model_copy(update={"content": strip_thinking(message.content)}),
                          generation_info=generation.generation_info)


def _as_chunk(message: AIMessage) -> AIMessageChunk:
    """A whole answer (a cached one) as the one chunk of a stream, its tool calls as pieces."""
    pieces = [{"name": call["name"], "args": json.dumps(call["args"]), "id": call.get("id"), "index": index,
               "type": "tool_call_chunk"} for index, call in enumerate(message.tool_calls)]
    return AIMessageChunk(content=message.content, additional_kwargs=message.additional_kwargs,
                          response_metadata=message.response_metadata, usage_metadata=message.usage_metadata,
                          tool_call_chunks=pieces, id=message.id, chunk_position="last")


async def off_loop(messages: int, fn: Callable[..., ResultT], /, *args: Any, **kwargs: Any) -> ResultT:
    """`fn(*args, **kwargs)` for a conversation of `messages` messages: on a worker thread from
    `OFF_LOOP_MESSAGES` up, in place below that (a thread hop costs more than a short conversation)."""
    if messages >= OFF_LOOP_MESSAGES:
        return await asyncio.to_thread(fn, *args, **kwargs)
    return fn(*args, **kwargs)
