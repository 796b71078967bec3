"""Nodes of the duel: speak one streamed turn, announce the judging, and combine the two verdicts.

Every node reads its knobs from `DuelContext` and calls models only through it. Streamed events
(`nodes.events`): `start`, `chunk` and `message` per turn, `synthesizing` before judging. Choosing the
opponent and judging are the capability nodes `nodes.select_opponent` and `nodes.judge`, configured
for the duel in `graphs/duel/`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Literal

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime
from typing_extensions import NotRequired, TypedDict  # pydantic's schemas need these before Python 3.12

from parley.core.limits import DEFAULT_DUEL_ROUNDS, DUEL_CONCLUSION_MAX_CHARS, DUEL_TURN_MAX_CHARS, DUEL_TURN_MIN_CHARS
from parley.graphs.duel import prompts
from parley.nodes.context import RunContext
from parley.nodes.events import emit
from parley.nodes.prefix import stable_first
from parley.nodes.judge import agreed_winner, verdicts_by_order
from parley.nodes.select_opponent import listing as _listing
from parley.nodes.speak import LengthRule, Speaker, Turn, speak
from parley.nodes.speak import TurnInterrupted as TurnInterrupted  # where the duel's callers have always found it
from parley.nodes.steer import guidance_lines
from parley.nodes.text import clip, is_cjk, topic_language

log = logging.getLogger("parley.duel")

Role = Literal["user", "opponent"]


@dataclass(kw_only=True)
class DuelContext(RunContext):
    """Per-run knobs of a duel; the defaults are the duel contract's."""

    rounds: int = DEFAULT_DUEL_ROUNDS
    temperature: float = 0.8
    synthesis_temperature: float = 0.3
    min_chars: int = DUEL_TURN_MIN_CHARS
    max_chars: int = DUEL_TURN_MAX_CHARS
    conclusion_max_chars: int = DUEL_CONCLUSION_MAX_CHARS
    turn_max_tokens: int | None = None
    user_model: str | None = None
    opponent_model: str | None = None
    judge_model: str | None = None
    # Its speakers' and judges' models are `RunContext.chat`'s: the model factory builds each once per event loop.

    def turn_tokens(self, topic: str) -> int:
        """Output cap of one turn: room for `max_chars` in the topic's script, so the cap rarely cuts first."""
        if self.turn_max_tokens:
            return self.turn_max_tokens
        return int(self.max_chars * 1.5) if is_cjk(topic) else max(64, self.max_chars // 2)


def duel_context(runtime: Runtime[DuelContext] | None) -> DuelContext:
    """The run's DuelContext (see `RunContext.of`)."""
    return DuelContext.of(runtime)




# --- node input schemas (what each node reads from the graph state) --------------------------


class DuelTurnInput(TypedDict):
    topic: str
    user_profile: dict
    opponent_profile: dict
    messages: list[dict]
    rounds: NotRequired[int]
    human: NotRequired[list[dict]]  # what the person who started the debate sent (`nodes.steer`)
    tools: NotRequired[dict]


class SynthesisInput(TypedDict):
    topic: str
    user_profile: dict
    opponent_profile: dict
    verdicts: list[dict]


# --- speak -----------------------------------------------------------------------------------


def _persona(role: Role, state: DuelTurnInput) -> dict:
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


def turn_prompt(role: Role, state: DuelTurnInput, ctx: DuelContext) -> list[BaseMessage]:
    """The prompt of the next turn, in cache-friendly order (`nodes.prefix`): persona, rules and topic, then every
    earlier turn in order, then the round and its cue (and what the person who started the debate said)."""
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
    system = prompts.SPEAKER_SYSTEM.format(
        **persona, topic=state["topic"], language=topic_language(state["topic"]),
        min_chars=ctx.min_chars, max_chars=ctx.max_chars,
    )
    ask = prompts.SPEAKER_TURN.format(round=round_no, rounds=rounds, cue=cue)
    if state.get("human"):
        ask += prompts.GUIDANCE_BLOCK.format(guidance=guidance_lines(state["human"]))
    earlier = [prompts.TRANSCRIPT_TURN.format(name=m["name"], content=m["content"]) for m in messages]
    return stable_first(system, earlier, ask)


def _turn_length(state: DuelTurnInput, ctx: DuelContext) -> LengthRule:
    """The duel's length rule: `min_chars`..`max_chars`, a short turn asked to go on in the topic's language."""
    language = topic_language(state["topic"])

    def more(said: str) -> str:
        return prompts.CONTINUE_PROMPT.format(
            length=len(said), min_chars=ctx.min_chars, max_chars=ctx.max_chars,
            missing=ctx.min_chars - len(said) + 20, language=language,
        )

    return LengthRule(ctx.min_chars, ctx.max_chars, more)


def _speaker(role: Role, state: DuelTurnInput) -> Speaker:
    profile = state["user_profile"] if role == "user" else state["opponent_profile"]
    return {"id": role, "name": profile["name"]}


def _round_of(state: DuelTurnInput) -> int:
    return len(state.get("messages") or []) // 2 + 1


def make_speaker(role: Role):
    """Build the node that speaks one turn as `role` ("user": the user's agent, or "opponent"), streamed,
    within the context's character bounds: a `speak` node (`nodes.speak`)."""

    def prepare(state: DuelTurnInput, ctx: DuelContext) -> dict:
        """Announce the turn."""
        emit({"event": "start", "role": role, "name": _speaker(role, state)["name"], "round": _round_of(state),
              "rounds": state.get("rounds") or ctx.rounds})
        return {}

    def record(turn: Turn, state: DuelTurnInput, ctx: DuelContext) -> dict:
        message = {"role": role, "name": turn.speaker["name"], "content": turn.text,
                   "timestamp": int(time.time() * 1000)}
        if turn.tool_runs:
            message["toolCalls"] = [run.dump() for run in turn.tool_runs]
        emit({"event": "message", **message, "round": _round_of(state)})
        return {"messages": [message]}

    return speak(
        name=f"{role}_turn",
        doc="Speak one turn, streaming it, within the context's character bounds.",
        context=DuelContext,
        reads=DuelTurnInput,
        prepare=prepare,
        speaker=lambda state, ctx: _speaker(role, state),
        prompt=lambda state, ctx: turn_prompt(role, state, ctx),
        model=lambda state, ctx: ctx.user_model if role == "user" else ctx.opponent_model,
        temperature=lambda state, ctx: ctx.temperature,
        max_tokens=lambda state, ctx: ctx.turn_tokens(state["topic"]),
        label=role,
        length=_turn_length,
        grants=lambda state, ctx: (state.get("tools") or {}).get(role),
        writes=record,
    )


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
