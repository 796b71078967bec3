"""The `speak` capability: one speaker's streamed turn, within its length rules, sent as the one `chunk` event.

Every mode's speaking goes through here: the duel's two debaters, the round table's agents and its devil's
advocate, the panel's arbitrator and single-model answers, and the designer's `llm` node.

The chunk event, the one shape every mode's graph emits (each mode reshapes it to its wire format where
its events become its stream: `runs/modes/*.py`, `designer/modes.py`):

    {"event": "chunk", "speaker": {"id": ..., "name": ...}, "round": 2 | None, "content": "text"}

A turn of a model offered tools (`RunContext.chat(..., tools=...)`) may call them; each piece of a call goes out
as it streams, the first with the call's id and name, the others with more of its JSON arguments (as OpenAI
streams them):

    {"event": "tool_call", "speaker": {...}, "round": None, "index": 0, "id": "call_…" | None,
     "name": "get_weather" | None, "arguments": "{\"city\": "}

A speaker granted tools that Parley runs (`speak(..., grants=...)`, `nodes.tools`) calls them within its turn: the
model answers with calls, Parley runs them (at most `MAX_TOOL_CALLS_PER_TURN`, each bounded in time, a failure
being a result the model reads), the model reads the results and goes on; each call is one whole `tool_call` event
and each result a `tool_result` event (`nodes.tools.tool_result_event`), and the turn keeps both
(`Turn.tool_runs`).

`say` streams one answer of a chat model and returns the `Turn`; `speak` builds the LangGraph node that
reads its prompt, speaker and knobs from the state and the run's context, says the turn, and writes it
back. Neither knows of any mode, of HTTP or of the database.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, BaseMessageChunk, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from parley.core.limits import STREAM_FAIR_SHARE
from parley.llm.tools import new_call_id, tool_call
from parley.nodes.context import RunContext
from parley.nodes.capability import mark
from parley.nodes.events import event_writer, speaking
from parley.nodes.text import LengthGate, is_cjk
from parley.nodes.tools import ToolRun, Toolbox, tool_result_event

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


TOOL_CALL_KEYS = ("event", "speaker", "round", "index", "id", "name", "arguments")


def tool_call_event(speaker: Speaker, index: int, arguments: str, *, call_id: str | None = None,
                    name: str | None = None, round: int | None = None) -> dict[str, Any]:
    """A piece of tool call `index` of `speaker`'s turn: its first piece names the call (`call_id`, `name`), every
    piece carries a fragment of its JSON `arguments`."""
    return {"event": "tool_call", "speaker": {"id": speaker["id"], "name": speaker["name"]}, "round": round,
            "index": index, "id": call_id, "name": name, "arguments": arguments}


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
    """What one speaker said: the text sent (all of it, in order), the tools it called, who said it, and the call
    that made it."""

    speaker: Speaker
    text: str
    round: int | None = None
    model: str | None = None  # as asked for (None: the run's model)
    label: str | None = None  # the usage ledger's label of the call
    # OpenAI's shape, in the order the model made them: {id, type: "function", function: {name, arguments}}
    tool_calls: tuple[dict[str, Any], ...] = ()
    # The calls Parley ran for the speaker during the turn (a `Toolbox`'s), with their results, in order.
    tool_runs: tuple[ToolRun, ...] = ()


def send_turn(turn: Turn) -> None:
    """Send a whole turn at once: its text as one `chunk`, each tool call as one `tool_call` piece (what a turn
    said with `say(..., hold=True)` sends once it is known to be the answer)."""
    write = event_writer()
    if turn.text:
        write(chunk_event(turn.speaker, turn.text, round=turn.round))
    for index, call in enumerate(turn.tool_calls):
        function = call["function"]
        write(tool_call_event(turn.speaker, index, function["arguments"], call_id=call["id"], name=function["name"],
                              round=turn.round))


class _ToolCalls:
    """The tool calls of one streamed answer, put together from their pieces, each piece sent as it comes."""

    def __init__(self, send: Callable[[dict[str, Any]], None] | None, speaker: Speaker, round: int | None) -> None:
        self.send, self.speaker, self.round = send or (lambda event: None), speaker, round
        self.calls: dict[int, dict[str, str]] = {}

    def feed(self, piece: Mapping[str, Any]) -> None:
        index = piece.get("index")
        if index is None:  # a server that numbers no calls: a new id starts the next one
            last = max(self.calls, default=None)
            fresh = last is None or (piece.get("id") and piece["id"] != self.calls[last]["id"])
            index = len(self.calls) if fresh else last
        arguments = piece.get("args") or ""
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = {"id": piece.get("id") or new_call_id(), "name": piece.get("name") or "",
                                        "arguments": ""}
            self.send(tool_call_event(self.speaker, index, arguments, call_id=call["id"], name=call["name"],
                                      round=self.round))
        elif arguments:
            self.send(tool_call_event(self.speaker, index, arguments, round=self.round))
        call["arguments"] += arguments

    def openai(self) -> tuple[dict[str, Any], ...]:
        return tuple(tool_call(c["name"], c["arguments"], c["id"]) for _, c in sorted(self.calls.items()))


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


async def _stream(chat: Runnable, messages: Sequence[BaseMessage], gate: Any, send: Callable[[str], None],
                  calls: _ToolCalls, *, lead: str = "", whole: bool = False) -> None:
    """Stream one model answer through `gate`, sending what it releases and each piece of its tool calls; stop
    reading once the gate is full. `lead` goes before the answer's first text, if it has any. With `whole` the
    answer is asked for in one piece and goes through the gate as one."""
    if whole:
        answer = await chat.ainvoke(list(messages))
        if text := chunk_text(answer):
            send(gate.feed(lead + text))
        for piece in _call_pieces(answer):
            calls.feed(piece)
        send(gate.finish(truncated=gate.full or answer.response_metadata.get("finish_reason") == "length"))
        return
    truncated = False
    loop = asyncio.get_running_loop()
    yield_at = loop.time() + STREAM_FAIR_SHARE
    stream = chat.astream(list(messages))
    try:
        async for chunk in stream:
            text = chunk_text(chunk)
            if text:
                send(gate.feed(lead + text))
                lead = ""
            for piece in getattr(chunk, "tool_call_chunks", None) or ():
                calls.feed(piece)
            if chunk.response_metadata.get("finish_reason") == "length":
                truncated = True
            if gate.full:
                truncated = True
                break
            # Chunks already read from the socket are taken one after another without a pause: on a busy worker, let
            # the other runs' streams have the loop at least every `STREAM_FAIR_SHARE` seconds.
            if loop.time() >= yield_at:
                await asyncio.sleep(0)
                yield_at = loop.time() + STREAM_FAIR_SHARE
    finally:
        await stream.aclose()
    send(gate.finish(truncated=truncated))


def _call_pieces(answer: BaseMessage) -> Iterator[dict[str, Any]]:
    """The tool calls of an answer asked for in one piece (those whose arguments parsed, then the others), each as
    the one piece of a streamed call."""
    valid = getattr(answer, "tool_calls", None) or []
    invalid = getattr(answer, "invalid_tool_calls", None) or []
    for index, call in enumerate([*valid, *invalid]):
        args = call.get("args")
        yield {"index": index, "id": call.get("id"), "name": call.get("name") or "",
               "args": args if isinstance(args, str) else json.dumps(args) if args is not None else ""}


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
    hold: bool = False,
    quiet: bool = False,
    toolbox: Toolbox | None = None,
    spent: Runnable | None = None,
    whole: bool = False,
) -> Turn:
    """Stream `chat`'s answer to `messages` as `speaker`'s turn, each piece a `chunk` event (and each piece of a
    tool call, when `chat` was offered tools, a `tool_call` event); return the turn.

    With a `toolbox` (whose tools `chat` was offered) Parley runs the calls itself: each call is sent whole as a
    `tool_call` event and run (`Toolbox.run`), its `tool_result` sent, and the model answers again with the
    results, in the same turn (its text goes on where it stopped). Once the turn's calls are spent the model is
    asked through `spent` (the same model, its tools offered with `tool_choice` "none"), and what it says then ends
    the turn.

    With a `length` rule the turn lands within its bounds (see `LengthRule`); without one it is the
    model's answer exactly as streamed (callers strip it if they wish). With `hold` nothing is sent: the
    caller sends the turn once it has checked it (`send_turn`). With `quiet` the text is not sent, only the tool
    calls and results are (a panelist's answer reaches the client only through its arbitrator). With `whole`
    the model is asked for its answer in one piece, sent as one `chunk` (for a client that waits for the whole
    answer: a streamed answer costs several times the CPU of one asked whole, in the SDK and per chunk).

    Raises:
        TurnInterrupted: the stream failed after some of the turn was sent (unless `resend`: then the
            failure itself, for a retry policy that accepts sending the start of the turn again).
        Exception: the model's failure, when nothing of the turn was sent yet.
    """
    write = event_writer()
    gate: Any = LengthGate(length.min_chars, length.max_chars) if length else _Verbatim()
    sent = False

    def out(event: dict[str, Any]) -> None:
        nonlocal sent
        if not hold:
            sent = True
            write(event)

    def send(text: str) -> None:
        if text and not quiet:
            out(chunk_event(speaker, text, round=round))

    calls = _ToolCalls(None if toolbox else out, speaker, round)
    runs: list[ToolRun] = []
    with speaking(speaker):  # a call of the turn that waits for its endpoint names the speaker
        try:
            await _stream(chat, messages, gate, send, calls, whole=whole)
            if toolbox:
                calls = await _use_tools(chat, spent or chat, [*messages], gate, send, out, calls, toolbox, runs,
                                         speaker=speaker, round=round)
            if length and length.more and len(gate.emitted) < length.min_chars and not calls.calls:
                said = gate.emitted
                more = [*messages, AIMessage(said), HumanMessage(length.more(said))]
                if said and not is_cjk(said) and not said[-1].isspace():
                    send(gate.feed(" "))
                await _stream(chat, more, gate, send, calls)
        except Exception as exc:
            if sent and not resend:
                raise TurnInterrupted(f"{speaker['name']}'s turn failed after it began streaming: {exc}") from exc
            raise
    return Turn(speaker=speaker, text=gate.emitted, round=round, model=model, label=label,
                tool_calls=() if toolbox else calls.openai(), tool_runs=tuple(runs))


def _asked(said: str, made: Sequence[dict[str, Any]]) -> AIMessage:
    """The model's answer that made `made` (OpenAI's shape), as the message the model reads back."""
    valid, invalid = [], []
    for call in made:
        function = call["function"]
        try:
            args = json.loads(function["arguments"] or "{}")
        except (ValueError, RecursionError):  # RecursionError: nested past Python's limit, as unreadable as bad JSON
            args = None
        if isinstance(args, dict):
            valid.append({"type": "tool_call", "id": call["id"], "name": function["name"], "args": args})
        else:
            invalid.append({"type": "invalid_tool_call", "id": call["id"], "name": function["name"],
                            "args": function["arguments"], "error": "not a JSON object"})
    return AIMessage(content=said, tool_calls=valid, invalid_tool_calls=invalid)


async def _use_tools(chat: Runnable, spent: Runnable, history: list[BaseMessage], gate: Any,
                     send: Callable[[str], None], out: Callable[[dict[str, Any]], None], calls: _ToolCalls,
                     toolbox: Toolbox, runs: list[ToolRun], *, speaker: Speaker, round: int | None) -> _ToolCalls:
    """The turn's tool loop (see `say`): run the calls the model made, give it the results, let it go on; until it
    answers without a call, or has been asked with its calls spent. Returns the last answer's calls."""
    start = 0  # where the text of the answer that made the calls began
    while calls.calls:
        made = calls.openai()
        history.append(_asked(gate.emitted[start:], made))
        for call in made:
            index = len(runs)
            function = call["function"]
            out(tool_call_event(speaker, index, function["arguments"], call_id=call["id"], name=function["name"],
                                round=round))
            run = await toolbox.run(call) if index < toolbox.max_calls else toolbox.refused(call)
            runs.append(run)
            out(tool_result_event(speaker, index, run, round=round))
            history.append(ToolMessage(content=run.result, tool_call_id=call["id"], status="error" if run.is_error
                                       else "success"))
        final = len(runs) >= toolbox.max_calls
        said = gate.emitted
        start = len(said)
        calls = _ToolCalls(None, speaker, round)
        lead = " " if said and not is_cjk(said) and not said[-1].isspace() else ""
        await _stream(spent if final else chat, history, gate, send, calls, lead=lead)
        if final:
            return _ToolCalls(None, speaker, round)  # calls made with none left are not run
    return calls


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
    tools: Knob = None,
    grants: Knob = None,
    length: LengthRule | Callable[[Any, C], LengthRule | None] | None = None,
    round: Knob = None,
    prepare: Callable[[Any, C], Mapping[str, Any]] | None = None,
    resend: bool = False,
    doc: str | None = None,
) -> Callable[[Any, Runtime], Awaitable[dict[str, Any]]]:
    """Build a node in which one speaker says one streamed turn (see `say`) and writes it to the state.

    Each piece of the turn goes out as a `chunk` event as the model streams it; the whole text (or the update
    `writes` makes of the `Turn`) is the node's update. Every knob is a value, or a function `(state, ctx)` of the
    node's input and the run's context (read as `context.of(runtime)`), called once per turn.

    Args:
        name: the node function's name (LangGraph's default node name).
        prompt: the turn's messages.
        speaker: who speaks (`Speaker`).
        writes: the state key the turn's text goes to, or `(turn, state, ctx) -> update` (may be async).
        context: the run context class the node reads its knobs from.
        reads: the node's input schema (the state keys it reads), a TypedDict.
        model, temperature, max_tokens, label: the chat model's (`RunContext.chat`).
        tools: a `ToolSet` the speaker may call: the pieces of its calls go out as `tool_call` events and the
            calls reach `writes` in `Turn.tool_calls`.
        grants: the tools (grants, `nodes.tools`) the speaker may call and Parley runs during the turn, found
            through the run's `ToolAccess` (`RunContext.tools`); the calls and their results reach `writes` in
            `Turn.tool_runs`. Without a `ToolAccess`, or with no grant it can offer, the turn has no tools.
        length: the turn's `LengthRule` (None: the answer as the model gives it).
        round: the round the turn belongs to, for its chunks.
        prepare: run first; what it returns joins the state the other knobs and `writes` read (a running
            summary, say), and it may announce the turn.
        resend: a failure after part of the turn was sent is raised as it is, for the node's retry policy,
            rather than as `TurnInterrupted`.
        doc: the node's docstring.

    Returns:
        The async node `(state, runtime) -> update`, named `name`, for `StateGraph.add_node`.

    Raises:
        TurnInterrupted: (when the node runs) the stream failed after part of the turn was sent (see `say`).

    Example:
        ```python
        # docs/python.md, custom_debate.py: a speaker arguing for the proposal, its turn written to state["pro"]
        pro = parley.speak(
            name="pro",
            prompt=lambda state, ctx: [SystemMessage("You argue for the proposal."), HumanMessage(state["question"])],
            speaker={"id": "pro", "name": "Pro"},
            writes="pro",
        )
        builder.add_node("pro", pro)
        ```
    """

    async def node(state: Any, runtime: Runtime) -> dict[str, Any]:
        ctx = context.of(runtime)
        if prepare is not None:
            state = {**state, **prepare(state, ctx)}
        who = _value(speaker, state, ctx)
        chosen, tag = _value(model, state, ctx), _value(label, state, ctx)
        granted = _value(grants, state, ctx)
        box = await ctx.tools.toolbox(granted, agent_id=who["id"]) if granted and ctx.tools else None
        knobs = dict(temperature=_value(temperature, state, ctx), max_tokens=_value(max_tokens, state, ctx),
                     label=tag, seat=(who or {}).get("id"))
        chat = ctx.chat(chosen, **knobs, tools=box.toolset() if box else _value(tools, state, ctx))
        spent = ctx.chat(chosen, **knobs, tools=box.toolset(final=True)) if box else None
        turn = await say(chat, prompt(state, ctx), speaker=who, round=_value(round, state, ctx),
                         length=_value(length, state, ctx), resend=resend, model=chosen, label=tag,
                         toolbox=box or None, spent=spent)
        if isinstance(writes, str):
            return {writes: turn.text}
        with speaking(who):  # what `writes` asks a model (a turn's stance, say) is the speaker's too
            update = writes(turn, state, ctx)
            return dict(await update if inspect.isawaitable(update) else update)

    node.__name__ = node.__qualname__ = name
    node.__doc__ = doc or "Say one streamed turn (`nodes.speak`)."
    node.__annotations__ = {"state": reads or dict, "runtime": Runtime, "return": dict}
    return mark(node, "speak")
