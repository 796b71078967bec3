"""The `speak` capability: one speaker's streamed turn, within its length rules, sent as the one `chunk` event.

Every mode's speaking goes through here: the duel's two debaters, the round table's agents and its devil's
advocate, the panel's arbitrator and single-model answers, and the designer's `llm` node.

The chunk event, the one shape every mode's graph emits (each mode reshapes it to its wire format where
its events become its stream: `runs/modes/*.py`, `designer/modes.py`):

    {"event": "chunk", "speaker": {"id": ..., "name": ...}, "round": 2 | None, "content": "text"}

`say` streams one answer of a chat model and returns the `Turn`; `speak` builds the LangGraph node that
reads its prompt, speaker and knobs from the state and the run's context, says the turn, and writes it
back. Neither knows of any mode, of HTTP or of the database.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, BaseMessageChunk, HumanMessage
from langchain_core.runnables import Runnable
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from nodes.context import RunContext
from nodes.capability import mark
from nodes.events import event_writer
from nodes.text import LengthGate, is_cjk

C = TypeVar("C", bound=RunContext)


class Speaker(TypedDict):
    """Who speaks: an id stable within the run (a duel role, an agent id, a model, a workflow node) and a name."""

    id: str
    name: str


CHUNK_KEYS = ("event", "speaker", "round", "content")


def chunk_event(speaker: Speaker, content: str, *, round: int | None = None) -> dict[str, Any]:
    """The one `chunk` event: a piece of `speaker`'s turn (in `round`, where the mode counts rounds)."""
    return {"event": "chunk", "speaker": {"id": speaker["id"], "name": speaker["name"]}, "round": round,
            "content": content}


def is_chunk(event: Any) -> bool:
    """Whether a stream event is a `chunk` in the one shape (not yet reshaped for a wire)."""
    return isinstance(event, Mapping) and event.get("event") == "chunk" and "speaker" in event


def chunk_text(chunk: BaseMessageChunk) -> str:
    """The text of one streamed model chunk (its text parts, when the content is a list of parts)."""
    return chunk.text


class TurnInterrupted(RuntimeError):
    """A turn's stream failed after part of it was sent; repeating it would send that part twice.

    Its `__cause__` is the failure itself.
    """


@dataclass(frozen=True)
class LengthRule:
    """How long a turn must be: `min_chars`..`max_chars` characters, never taking back text already sent.

    Text past `max_chars` is cut at a sentence end (`nodes.text.LengthGate`); a turn shorter than
    `min_chars` is continued once: the model gets what it said and `more(said)` (the request for the
    rest) and goes on in the same turn, so what was sent stays true. Without `more` a short turn stays short.
    """

    min_chars: int
    max_chars: int
    more: Callable[[str], str] | None = None


@dataclass(frozen=True)
class Turn:
    """What one speaker said: the text sent (all of it, in order), who said it, and the call that made it."""

    speaker: Speaker
    text: str
    round: int | None = None
    model: str | None = None  # as asked for (None: the run's model)
    label: str | None = None  # the usage ledger's label of the call


class _Verbatim:
    """A length gate that lets everything through as it comes (a turn with no length rule)."""

    full = False

    def __init__(self) -> None:
        self.emitted = ""

    def feed(self, piece: str) -> str:
        self.emitted += piece
        return piece

    def finish(self, *, truncated: bool = False) -> str:
        return ""


async def _stream(chat: Runnable, messages: Sequence[BaseMessage], gate: Any, send: Callable[[str], None]) -> None:
    """Stream one model answer through `gate`, sending what it releases; stop reading once it is full."""
    truncated = False
    stream = chat.astream(list(messages))
    try:
        async for chunk in stream:
            text = chunk_text(chunk)
            if text:
                send(gate.feed(text))
            if chunk.response_metadata.get("finish_reason") == "length":
                truncated = True
            if gate.full:
                truncated = True
                break
    finally:
        await stream.aclose()
    send(gate.finish(truncated=truncated))


async def say(
    chat: Runnable,
    messages: Sequence[BaseMessage],
    *,
    speaker: Speaker,
    round: int | None = None,
    length: LengthRule | None = None,
    resend: bool = False,
    model: str | None = None,
    label: str | None = None,
) -> Turn:
    """Stream `chat`'s answer to `messages` as `speaker`'s turn, each piece a `chunk` event; return the turn.

    With a `length` rule the turn lands within its bounds (see `LengthRule`); without one it is the
    model's answer exactly as streamed (callers strip it if they wish).

    Raises:
        TurnInterrupted: the stream failed after some of the turn was sent (unless `resend`: then the
            failure itself, for a retry policy that accepts sending the start of the turn again).
        Exception: the model's failure, when nothing of the turn was sent yet.
    """
    write = event_writer()
    gate: Any = LengthGate(length.min_chars, length.max_chars) if length else _Verbatim()
    sent = False

    def send(text: str) -> None:
        nonlocal sent
        if text:
            sent = True
            write(chunk_event(speaker, text, round=round))

    try:
        await _stream(chat, messages, gate, send)
        if length and length.more and len(gate.emitted) < length.min_chars:
            said = gate.emitted
            more = [*messages, AIMessage(said), HumanMessage(length.more(said))]
            if said and not is_cjk(said) and not said[-1].isspace():
                send(gate.feed(" "))
            await _stream(chat, more, gate, send)
    except Exception as exc:
        if sent and not resend:
            raise TurnInterrupted(f"{speaker['name']}'s turn failed after it began streaming: {exc}") from exc
        raise
    return Turn(speaker=speaker, text=gate.emitted, round=round, model=model, label=label)


# --- the node -------------------------------------------------------------------------------

# A knob of the node: a fixed value, or read from the state and the run's context when the node runs.
Knob = Any  # T | Callable[[state, ctx], T]


def _value(knob: Knob, state: Mapping[str, Any], ctx: RunContext) -> Any:
    return knob(state, ctx) if callable(knob) else knob


def speak(
    *,
    name: str,
    prompt: Callable[[Any, C], Sequence[BaseMessage]],
    speaker: Speaker | Callable[[Any, C], Speaker],
    writes: str | Callable[[Turn, Any, C], Mapping[str, Any] | Awaitable[Mapping[str, Any]]],
    context: type[C] = RunContext,
    reads: type | None = None,
    model: Knob = None,
    temperature: Knob = None,
    max_tokens: Knob = None,
    label: Knob = None,
    length: LengthRule | Callable[[Any, C], LengthRule | None] | None = None,
    round: Knob = None,
    prepare: Callable[[Any, C], Mapping[str, Any]] | None = None,
    resend: bool = False,
    doc: str | None = None,
) -> Callable[[Any, Runtime], Awaitable[dict[str, Any]]]:
    """Build a node in which one speaker says one streamed turn (see `say`).

    Every knob is a value, or a function `(state, ctx)` of the node's input and the run's context (read
    as `context.of(runtime)`), called once per turn.

    Args:
        name: the node function's name (LangGraph's default node name).
        prompt: the turn's messages.
        speaker: who speaks (`Speaker`).
        writes: the state key the turn's text goes to, or `(turn, state, ctx) -> update` (may be async).
        context: the run context class the node reads its knobs from.
        reads: the node's input schema (the state keys it reads), a TypedDict.
        model, temperature, max_tokens, label: the chat model's (`RunContext.chat`).
        length: the turn's `LengthRule` (None: the answer as the model gives it).
        round: the round the turn belongs to, for its chunks.
        prepare: run first; what it returns joins the state the other knobs and `writes` read (a running
            summary, say), and it may announce the turn.
        resend: a failure after part of the turn was sent is raised as it is, for the node's retry policy,
            rather than as `TurnInterrupted`.
        doc: the node's docstring.
    """

    async def node(state: Any, runtime: Runtime) -> dict[str, Any]:
        ctx = context.of(runtime)
        if prepare is not None:
            state = {**state, **prepare(state, ctx)}
        who = _value(speaker, state, ctx)
        chosen, tag = _value(model, state, ctx), _value(label, state, ctx)
        chat = ctx.chat(chosen, temperature=_value(temperature, state, ctx),
                        max_tokens=_value(max_tokens, state, ctx), label=tag)
        turn = await say(chat, prompt(state, ctx), speaker=who, round=_value(round, state, ctx),
                         length=_value(length, state, ctx), resend=resend, model=chosen, label=tag)
        if isinstance(writes, str):
            return {writes: turn.text}
        update = writes(turn, state, ctx)
        return dict(await update if inspect.isawaitable(update) else update)

    node.__name__ = node.__qualname__ = name
    node.__doc__ = doc or "Say one streamed turn (`nodes.speak`)."
    node.__annotations__ = {"state": reads or dict, "runtime": Runtime, "return": dict}
    return mark(node, "speak")
