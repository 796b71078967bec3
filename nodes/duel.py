"""Nodes of the duel: speak one streamed turn, announce the judging, and combine the two verdicts.

Every node reads its knobs from `DuelContext` and calls models only through it. Streamed events
(`nodes.events`): `start`, `chunk` and `message` per turn, `synthesizing` before judging. Choosing the
opponent and judging are the capability nodes `nodes.select_opponent` and `nodes.judge`, configured
for the duel in `graphs/duel.py`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable
from langgraph.runtime import Runtime
from pydantic import BaseModel
from typing_extensions import NotRequired, TypedDict  # pydantic's schemas need these before Python 3.12

from nodes.context import RunContext
from nodes.events import emit, event_writer
from nodes.judge import agreed_winner, verdicts_by_order
from nodes.prompts import duel as prompts
from nodes.select_opponent import listing as _listing
from nodes.text import LengthGate, clip, first_sentence, is_cjk, topic_language

log = logging.getLogger("parley.duel")

Role = Literal["user", "opponent"]


@dataclass(kw_only=True)
class DuelContext(RunContext):
    """Per-run knobs of a duel; the defaults are the seed's."""

    rounds: int = 5
    temperature: float = 0.8
    synthesis_temperature: float = 0.3
    min_chars: int = 100
    max_chars: int = 200
    conclusion_max_chars: int = 100
    recent_turns: int = 4
    summary_max_chars: int = 600
    turn_max_tokens: int | None = None
    user_model: str | None = None
    opponent_model: str | None = None
    judge_model: str | None = None
    _built: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def chat(self, model: str | None = None, **options: Any) -> Runnable:
        """As `RunContext.chat`, built once per run: a duel asks for the same two speakers turn after turn."""
        key = ("chat", model, tuple(sorted(options.items())))
        if key not in self._built:
            self._built[key] = super().chat(model, **options)
        return self._built[key]

    def structured(self, schema: type[BaseModel], model: str | None = None, **options: Any) -> Runnable:
        """As `RunContext.structured`, built once per run (the two judges share one)."""
        key = ("structured", schema, model, tuple(sorted(options.items())))
        if key not in self._built:
            self._built[key] = super().structured(schema, model, **options)
        return self._built[key]

    def turn_tokens(self, topic: str) -> int:
        """Output cap of one turn: room for `max_chars` in the topic's script, so the cap rarely cuts first."""
        if self.turn_max_tokens:
            return self.turn_max_tokens
        return int(self.max_chars * 1.5) if is_cjk(topic) else max(64, self.max_chars // 2)


def duel_context(runtime: Runtime[DuelContext] | None) -> DuelContext:
    """The run's DuelContext (see `RunContext.of`)."""
    return DuelContext.of(runtime)


class TurnInterrupted(RuntimeError):
    """A turn's stream failed after part of it was sent; repeating it would send that part twice."""


# --- node input schemas (what each node reads from the graph state) --------------------------


class TurnInput(TypedDict):
    topic: str
    user_profile: dict
    opponent_profile: dict
    messages: list[dict]
    rounds: NotRequired[int]
    summary: NotRequired[str]
    summarized: NotRequired[int]


class SynthesisInput(TypedDict):
    topic: str
    user_profile: dict
    opponent_profile: dict
    verdicts: list[dict]


# --- speak -----------------------------------------------------------------------------------


def fold_summary(
    summary: str, folded: int, messages: list[dict], *, keep_recent: int, max_chars: int
) -> tuple[str, int]:
    """Fold turns that left the recent window into the running summary (first sentence each), capped in size.

    Returns the new summary and how many turns it now covers; the prompt therefore holds at most
    `max_chars` of summary plus `keep_recent` turns, whatever the number of rounds.
    """
    lines = summary.splitlines() if summary else []
    older = max(0, len(messages) - keep_recent)
    for message in messages[folded:older]:
        lines.append(f"{message['name']}: {first_sentence(message['content'])}")
    while lines and sum(len(line) + 1 for line in lines) > max_chars:
        lines.pop(0)
    return "\n".join(lines), max(folded, older)


def _persona(role: Role, state: TurnInput) -> dict:
    user, opponent = state["user_profile"], state["opponent_profile"]
    if role == "user":
        memory = user.get("softMemory") or {}
        return {
            "name": user["name"], "title": "speaking for yourself", "bio": user.get("bio") or "",
            "traits": _listing(memory.get("traits")), "interests": _listing(memory.get("interests")),
            "stance": prompts.USER_STANCE, "opponent_name": opponent["name"],
            "opponent_stance": opponent.get("stance", ""),
        }
    return {
        "name": opponent["name"], "title": opponent.get("title") or "debater", "bio": opponent.get("bio") or "",
        "traits": _listing(opponent.get("traits")), "interests": "not given", "stance": opponent.get("stance", ""),
        "opponent_name": user["name"], "opponent_stance": "not stated; infer it from their turns",
    }


def turn_prompt(role: Role, state: TurnInput, ctx: DuelContext, summary: str) -> list[BaseMessage]:
    """The prompt of the next turn: persona and rules, the running summary, and the recent turns."""
    persona = _persona(role, state)
    messages = state.get("messages") or []
    rounds = state.get("rounds") or ctx.rounds
    turn = len(messages)
    round_no = turn // 2 + 1
    if turn == 0:
        cue = prompts.OPENING_CUE
    elif round_no >= rounds:
        cue = prompts.CLOSING_CUE
    else:
        cue = prompts.REPLY_CUE.format(opponent_name=persona["opponent_name"])
    recent = messages[-ctx.recent_turns:] if ctx.recent_turns else []
    system = prompts.SPEAKER_SYSTEM.format(
        **persona, topic=state["topic"], language=topic_language(state["topic"]),
        min_chars=ctx.min_chars, max_chars=ctx.max_chars,
    )
    human = prompts.SPEAKER_TURN.format(
        summary=summary or prompts.NO_SUMMARY,
        recent="\n".join(f"{m['name']}: {m['content']}" for m in recent) or prompts.NO_TURNS,
        round=round_no, rounds=rounds, cue=cue,
    )
    return [SystemMessage(system), HumanMessage(human)]


async def _stream_turn(model: Runnable, prompt: list[BaseMessage], gate: LengthGate, emit) -> None:
    """Stream one model answer through `gate`, sending what it releases; stop reading once it is full."""
    truncated = False
    stream = model.astream(prompt)
    try:
        async for chunk in stream:
            text = chunk.text
            if text:
                emit(gate.feed(text))
            if chunk.response_metadata.get("finish_reason") == "length":
                truncated = True
            if gate.full:
                truncated = True
                break
    finally:
        await stream.aclose()
    emit(gate.finish(truncated=truncated))


def make_speaker(role: Role):
    """Build the node that speaks one turn as `role` ("user": the user's agent, or "opponent")."""

    async def speak(state: TurnInput, runtime: Runtime[DuelContext]) -> dict:
        """Speak one turn, streaming it, within the context's character bounds."""
        ctx = duel_context(runtime)
        writer = event_writer()
        messages = state.get("messages") or []
        name = state["user_profile"]["name"] if role == "user" else state["opponent_profile"]["name"]
        rounds = state.get("rounds") or ctx.rounds
        round_no = len(messages) // 2 + 1
        summary, summarized = fold_summary(
            state.get("summary", ""), state.get("summarized", 0), messages,
            keep_recent=ctx.recent_turns, max_chars=ctx.summary_max_chars,
        )
        prompt = turn_prompt(role, state, ctx, summary)
        model = ctx.chat(
            ctx.user_model if role == "user" else ctx.opponent_model,
            temperature=ctx.temperature, max_tokens=ctx.turn_tokens(state["topic"]), label=role,
        )
        gate = LengthGate(ctx.min_chars, ctx.max_chars)
        sent = False

        def emit(text: str) -> None:
            nonlocal sent
            if text:
                sent = True
                writer({"event": "chunk", "role": role, "name": name, "content": text})

        writer({"event": "start", "role": role, "name": name, "round": round_no, "rounds": rounds})
        try:
            await _stream_turn(model, prompt, gate, emit)
            if len(gate.emitted) < ctx.min_chars:
                # Too short: ask for a continuation rather than a new answer, so what was sent stays true.
                language = topic_language(state["topic"])
                more = [*prompt, AIMessage(gate.emitted), HumanMessage(prompts.CONTINUE_PROMPT.format(
                    length=len(gate.emitted), min_chars=ctx.min_chars, max_chars=ctx.max_chars,
                    missing=ctx.min_chars - len(gate.emitted) + 20, language=language,
                ))]
                if gate.emitted and not is_cjk(gate.emitted) and not gate.emitted[-1].isspace():
                    emit(gate.feed(" "))
                await _stream_turn(model, more, gate, emit)
        except Exception as exc:
            if sent:
                raise TurnInterrupted(f"{name}'s turn failed after it began streaming: {exc}") from exc
            raise
        message = {"role": role, "name": name, "content": gate.emitted, "timestamp": int(time.time() * 1000)}
        writer({"event": "message", **message, "round": round_no})
        return {"messages": [message], "summary": summary, "summarized": summarized}

    speak.__name__ = f"{role}_turn"
    return speak


# --- judge and synthesize --------------------------------------------------------------------


async def announce_synthesis(state: dict) -> None:
    """Announce that the debate is over and judging has begun."""
    emit({"event": "synthesizing"})


def combine_verdicts(verdicts: list[dict], *, names: dict[str, str], topic: str, conclusion_max_chars: int) -> dict:
    """The synthesis from the two verdicts: their common winner, or a tie saying that they disagreed."""
    first, second = verdicts_by_order(verdicts)
    winner = agreed_winner(first["winner"], second["winner"])
    if first["winner"] == second["winner"]:
        reason = first["winnerReason"]
    else:
        cjk = is_cjk(topic)
        shown = {**names, "tie": "平局" if cjk else "a tie"}
        template = prompts.TIE_REASON_CJK if cjk else prompts.TIE_REASON
        reason = template.format(
            first=shown[first["winner"]], second=shown[second["winner"]],
            first_reason=first["winnerReason"], second_reason=second["winnerReason"],
        )
    return {
        "consensus": list(first["consensus"]),
        "disagreements": list(first["disagreements"]),
        "winner": winner,
        "winnerReason": reason,
        "conclusion": clip(first["conclusion"], conclusion_max_chars),
        "recommendations": list(first["recommendations"]),
    }


async def synthesize(state: SynthesisInput, runtime: Runtime[DuelContext]) -> dict:
    """Combine the position-swapped verdicts into the debate's synthesis."""
    ctx = duel_context(runtime)
    names = {"user": state["user_profile"]["name"], "opponent": state["opponent_profile"]["name"]}
    return {"synthesis": combine_verdicts(
        state["verdicts"], names=names, topic=state["topic"], conclusion_max_chars=ctx.conclusion_max_chars,
    )}
