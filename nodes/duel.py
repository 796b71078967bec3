"""Nodes of the duel: pick an opponent, speak one streamed turn, and judge the debate twice with the order swapped.

Every node reads its knobs from `DuelContext` and calls models only through it. Streamed events
(`nodes.events`): `opponent` once chosen, `start`, `chunk` and `message` per turn, `synthesizing` before judging.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import openai
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable
from langgraph.runtime import Runtime
from langgraph.types import Send
from pydantic import BaseModel, Field
from typing_extensions import NotRequired, TypedDict  # pydantic's schemas need these before Python 3.12

from core.limits import DEFAULT_DUEL_ROUNDS, DUEL_CONCLUSION_MAX_CHARS, DUEL_TURN_MAX_CHARS, DUEL_TURN_MIN_CHARS
from llm.failures import UNREADABLE_ANSWER
from nodes.bounds import AtMost, Clipped
from nodes.context import RunContext
from llm.failures import UNREADABLE_ANSWER
from nodes.events import emit, event_writer
from nodes.personas import fallback_opponent
from nodes.prompts import duel as prompts
from nodes.speak import LengthRule, Speaker, Turn, speak
from nodes.speak import TurnInterrupted as TurnInterrupted  # where the duel's callers have always found it
from nodes.text import clip, first_sentence, is_cjk, newest_within, topic_language

log = logging.getLogger("parley.duel")

Role = Literal["user", "opponent"]


@dataclass(kw_only=True)
class DuelContext(RunContext):
    """Per-run knobs of a duel; the defaults are the seed's."""

    rounds: int = DEFAULT_DUEL_ROUNDS
    temperature: float = 0.8
    synthesis_temperature: float = 0.3
    min_chars: int = DUEL_TURN_MIN_CHARS
    max_chars: int = DUEL_TURN_MAX_CHARS
    conclusion_max_chars: int = DUEL_CONCLUSION_MAX_CHARS
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


# How many times a judge is asked for a readable verdict before it counts as abstaining.
JUDGE_ATTEMPTS = 2


# --- structured outputs --------------------------------------------------------------------


# Bounded lengths keep answers short everywhere and stop a small model running out of tokens mid-JSON.
class OpponentProfile(BaseModel):
    """The opponent persona."""

    name: Clipped(60) = Field(description="The opponent's full name, realistic for the topic's language.")
    title: Clipped(80) = Field(description="A short professional title, e.g. 'Labour economist'.")
    bio: Clipped(200) = Field(description="One sentence on who they are and why they hold their view.")
    stance: Clipped(200) = Field(
        description="Their position on the topic in one sentence, opposed to the user's likely stance."
    )
    traits: AtMost(5, Clipped(40)) = Field(description="Three short personality traits that shape how they argue.")


class Judgement(BaseModel):
    """One judge's verdict on an anonymised transcript."""

    consensus: AtMost(4, Clipped(120)) = Field(description="Points both speakers agreed on (may be empty).")
    disagreements: AtMost(4, Clipped(120)) = Field(description="The core points the speakers disagreed on.")
    winner: Literal["A", "B", "tie"] = Field(description="Who argued better: 'A', 'B', or 'tie' if evenly matched.")
    winnerReason: Clipped(300) = Field(description="One or two sentences explaining the winner, naming Speaker A or B.")
    # Not bounded here: the node cuts it at a sentence boundary, which a plain cut would not respect.
    conclusion: str = Field(description="The overall conclusion about the topic, at most 100 characters.")
    recommendations: AtMost(3, Clipped(120)) = Field(description="Two or three practical recommendations for readers.")


# --- node input schemas (what each node reads from the graph state) --------------------------


class OpponentInput(TypedDict):
    topic: str
    user_profile: dict


class TurnInput(TypedDict):
    topic: str
    user_profile: dict
    opponent_profile: dict
    messages: list[dict]
    rounds: NotRequired[int]
    summary: NotRequired[str]
    summarized: NotRequired[int]


class JudgeInput(TypedDict):
    topic: str
    user_profile: dict
    opponent_profile: dict
    messages: list[dict]
    swapped: bool


class SynthesisInput(TypedDict):
    topic: str
    user_profile: dict
    opponent_profile: dict
    verdicts: list[dict]


# --- select opponent -------------------------------------------------------------------------


def _listing(items: object) -> str:
    if isinstance(items, list | tuple) and items:
        return ", ".join(str(i) for i in items)
    return "not given"


def _usable_opponent(choice: object, user_name: str) -> dict | None:
    """The model's opponent as a profile dict, or None when it is unusable (blank, or the user themself)."""
    if not isinstance(choice, OpponentProfile):
        return None
    name = choice.name.strip()
    if not name or not choice.stance.strip() or name == user_name.strip():
        return None
    return {
        "name": clip(name, 60),
        "title": clip(choice.title, 80),
        "bio": clip(choice.bio, 300),
        "stance": clip(choice.stance, 300),
        "traits": [clip(t, 40) for t in choice.traits if t.strip()][:5],
    }


async def select_opponent(state: OpponentInput, runtime: Runtime[DuelContext]) -> dict:
    """Choose an opponent suited to the topic and opposed to the user's likely stance, else a built-in persona."""
    ctx = duel_context(runtime)
    topic, user = state["topic"], state["user_profile"]
    memory = user.get("softMemory") or {}
    language = topic_language(topic)
    prompt = [
        SystemMessage(prompts.SELECT_OPPONENT_SYSTEM.format(language=language)),
        HumanMessage(prompts.SELECT_OPPONENT_PROMPT.format(
            topic=topic, name=user.get("name", ""), bio=user.get("bio") or "not given",
            traits=_listing(memory.get("traits")), interests=_listing(memory.get("interests")),
        )),
    ]
    model = ctx.structured(OpponentProfile, ctx.opponent_model, temperature=ctx.temperature, label="select_opponent")
    try:
        profile = _usable_opponent(await model.ainvoke(prompt), user.get("name", ""))
    except (openai.APIError, ValueError) as exc:  # ValueError covers unparsable and schema-invalid answers
        log.warning("opponent selection failed for %r (%s: %s); using a built-in persona", topic,
                    type(exc).__name__, exc)
        profile = None
    else:
        if profile is None:
            log.warning("opponent selection for %r gave an unusable persona; using a built-in one", topic)
    profile = profile or fallback_opponent(topic, user.get("name", ""))
    emit({"event": "opponent", "opponentProfile": profile})
    return {"opponent_profile": profile}


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
    return "\n".join(newest_within(lines, max_chars)), max(folded, older)


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


def _turn_length(state: TurnInput, ctx: DuelContext) -> LengthRule:
    """The duel's length rule: `min_chars`..`max_chars`, a short turn asked to go on in the topic's language."""
    language = topic_language(state["topic"])

    def more(said: str) -> str:
        return prompts.CONTINUE_PROMPT.format(
            length=len(said), min_chars=ctx.min_chars, max_chars=ctx.max_chars,
            missing=ctx.min_chars - len(said) + 20, language=language,
        )

    return LengthRule(ctx.min_chars, ctx.max_chars, more)


def _speaker(role: Role, state: TurnInput) -> Speaker:
    profile = state["user_profile"] if role == "user" else state["opponent_profile"]
    return {"id": role, "name": profile["name"]}


def _round_of(state: TurnInput) -> int:
    return len(state.get("messages") or []) // 2 + 1


def make_speaker(role: Role):
    """Build the node that speaks one turn as `role` ("user": the user's agent, or "opponent"), streamed,
    within the context's character bounds: a `speak` node (`nodes.speak`)."""

    def prepare(state: TurnInput, ctx: DuelContext) -> dict:
        """Fold the turns that left the recent window into the summary, and announce the turn."""
        summary, summarized = fold_summary(
            state.get("summary", ""), state.get("summarized", 0), state.get("messages") or [],
            keep_recent=ctx.recent_turns, max_chars=ctx.summary_max_chars,
        )
        emit({"event": "start", "role": role, "name": _speaker(role, state)["name"], "round": _round_of(state),
              "rounds": state.get("rounds") or ctx.rounds})
        return {"summary": summary, "summarized": summarized}

    def record(turn: Turn, state: TurnInput, ctx: DuelContext) -> dict:
        message = {"role": role, "name": turn.speaker["name"], "content": turn.text,
                   "timestamp": int(time.time() * 1000)}
        emit({"event": "message", **message, "round": _round_of(state)})
        return {"messages": [message], "summary": state["summary"], "summarized": state["summarized"]}

    return speak(
        name=f"{role}_turn",
        doc="Speak one turn, streaming it, within the context's character bounds.",
        context=DuelContext,
        reads=TurnInput,
        prepare=prepare,
        speaker=lambda state, ctx: _speaker(role, state),
        prompt=lambda state, ctx: turn_prompt(role, state, ctx, state["summary"]),
        model=lambda state, ctx: ctx.user_model if role == "user" else ctx.opponent_model,
        temperature=lambda state, ctx: ctx.temperature,
        max_tokens=lambda state, ctx: ctx.turn_tokens(state["topic"]),
        label=role,
        length=_turn_length,
        writes=record,
    )


# --- judge and synthesize --------------------------------------------------------------------


async def announce_synthesis(state: dict) -> None:
    """Announce that the debate is over and judging has begun."""
    emit({"event": "synthesizing"})


def judge_both_orders(state: dict) -> list[Send]:
    """Send the transcript to the judge twice: as debated, and with the speakers' order swapped."""
    shared = {key: state[key] for key in ("topic", "user_profile", "opponent_profile", "messages")}
    return [Send("judge", {**shared, "swapped": False}), Send("judge", {**shared, "swapped": True})]


def _anonymise(text: str, names: dict[str, str]) -> str:
    for name, label in names.items():
        if len(name) >= 2:
            text = text.replace(name, label)
    return text


def _reveal(text: str, labels: dict[str, str]) -> str:
    for label, name in labels.items():
        text = text.replace(label, name)
    return text


def anonymised_transcript(messages: list[dict], first: Role, names: dict[Role, str]) -> str:
    """The debate with speakers labelled A (`first`, who opens every round) and B, their names hidden."""
    label = {first: "Speaker A", ("opponent" if first == "user" else "user"): "Speaker B"}
    hide = {names[role]: label[role] for role in label}
    lines = []
    for start in range(0, len(messages), 2):
        pair = sorted(messages[start:start + 2], key=lambda m: m["role"] != first)
        lines += [f"{label[m['role']]}: {_anonymise(m['content'], hide)}" for m in pair]
    return "\n".join(lines)


async def judge(state: JudgeInput, runtime: Runtime[DuelContext]) -> dict:
    """Judge the anonymised debate once, in the order the input asks for."""
    ctx = duel_context(runtime)
    first: Role = "opponent" if state["swapped"] else "user"
    second: Role = "user" if state["swapped"] else "opponent"
    names: dict[Role, str] = {"user": state["user_profile"]["name"], "opponent": state["opponent_profile"]["name"]}
    language = topic_language(state["topic"])
    prompt = [
        SystemMessage(prompts.JUDGE_SYSTEM.format(language=language)),
        HumanMessage(prompts.JUDGE_PROMPT.format(
            topic=state["topic"], turns=len(state["messages"]),
            transcript=anonymised_transcript(state["messages"], first, names),
            conclusion_max_chars=ctx.conclusion_max_chars,
        )),
    ]
    model = ctx.structured(Judgement, ctx.judge_model, temperature=ctx.synthesis_temperature, label="judge")
    try:
        verdict: Judgement = await model.ainvoke(prompt)
    except UNREADABLE_ANSWER as exc:
        attempt = runtime.execution_info.node_attempt if getattr(runtime, "execution_info", None) else JUDGE_ATTEMPTS
        if attempt < JUDGE_ATTEMPTS:
            raise  # the node's retry policy asks once more
        # Still unreadable: an abstention, which with the other judge's verdict makes the result a tie.
        log.warning("judge (%s order) unreadable (%s); counted as a tie", "swapped" if state["swapped"] else "debated",
                    exc.__class__.__name__)
        verdict = Judgement(consensus=[], disagreements=[], winner="tie", recommendations=[],
                            winnerReason=prompts.UNREADABLE_VERDICT, conclusion="")
    reveal = {"Speaker A": names[first], "Speaker B": names[second]}
    return {"verdicts": [{
        "order": "swapped" if state["swapped"] else "as_debated",
        "speakerA": first,
        "speakerB": second,
        "winner": {"A": first, "B": second, "tie": "tie"}[verdict.winner],
        "winnerReason": _reveal(verdict.winnerReason, reveal),
        "consensus": [_reveal(item, reveal) for item in verdict.consensus],
        "disagreements": [_reveal(item, reveal) for item in verdict.disagreements],
        "conclusion": clip(_reveal(verdict.conclusion, reveal), ctx.conclusion_max_chars),
        "recommendations": [_reveal(item, reveal) for item in verdict.recommendations],
    }]}


def combine_verdicts(verdicts: list[dict], *, names: dict[str, str], topic: str, conclusion_max_chars: int) -> dict:
    """The synthesis from the two verdicts: their common winner, or a tie saying that they disagreed."""
    ordered = sorted(verdicts, key=lambda v: v.get("order") != "as_debated")
    first = ordered[0]
    second = ordered[1] if len(ordered) > 1 else first
    if first["winner"] == second["winner"]:
        winner, reason = first["winner"], first["winnerReason"]
    else:
        cjk = is_cjk(topic)
        shown = {**names, "tie": "平局" if cjk else "a tie"}
        template = prompts.TIE_REASON_CJK if cjk else prompts.TIE_REASON
        winner = "tie"
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
