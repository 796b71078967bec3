"""The duel: the user's persona agent debates an opponent chosen for the topic, then a judge rules.

select_opponent → (user_turn → steer → opponent_turn → steer) × rounds → announce_synthesis → judge ×2 (order
swapped) → synthesize (given an `opponent_profile` and `messages`, it goes on from the boundary after the last turn
instead of choosing an opponent)

`steer` is the boundary (`nodes.steer`): after each turn it takes in what the person who started the debate sent
(their messages join every later turn's prompt), waits for them when the run was started with
`await: "after_turn"` or a pause was asked, and goes straight to the judging on `end` or when the budget holds
no more turns (`stopped_by`).

Stream it with `graph.astream(inputs, context=DuelContext(...), stream_mode=["custom", "updates"])`:
the custom events are `start`/`chunk`/`message` per turn, `synthesizing` before judging, and the boundary's
`human`, `resumed` and `stopping`.
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import NotRequired, TypedDict  # pydantic's schemas need these before Python 3.12

from parley.graphs.duel import prompts
from parley.graphs.duel.personas import fallback_opponent
from parley.graphs.duel.steps import DuelContext, announce_synthesis, duel_context, make_speaker, synthesize
from parley.llm.budget import CallEstimate
from parley.llm.failures import MODEL_RETRY
from parley.llm.tokens import approx_text_tokens
from parley.nodes.judge import JUDGE_RETRY, Judgement, judge, judge_both_orders
from parley.nodes.select_opponent import OpponentProfile, select_opponent
from parley.nodes.steer import SteerState, boundary

__all__ = [
    "JUDGE_RETRY", "DuelContext", "DuelInput", "DuelOutput", "DuelState", "build_duel_graph", "graph", "judge_debate",
    "judge_both_orders", "minimum_calls", "pick_opponent", "transcript",
]


class DuelInput(TypedDict):
    """What a caller gives: the topic and the user's profile; the rest only to go on from turns already made."""

    topic: str
    user_profile: dict  # the duel contract's userProfile: name, avatar?, bio?, softMemory {traits[], interests[]}
    rounds: NotRequired[int]  # overrides DuelContext.rounds
    # A duel that goes on from turns already made (a run resumed from its debate record): its opponent and turns,
    # and what its boundaries had taken in (`nodes.steer.SteerState`).
    opponent_profile: NotRequired[dict]
    messages: NotRequired[list[dict]]
    human: NotRequired[list[dict]]
    consumed: NotRequired[list[str]]
    passed: NotRequired[int]
    stopped_by: NotRequired[str]
    # The tools each side was granted (`nodes.tools`): {"user": [...], "opponent": [...]}.
    tools: NotRequired[dict]


class DuelOutput(TypedDict, total=False):
    """What a caller gets back: the opponent, the turns, and the verdict drawn from two judgings."""

    opponent_profile: dict  # name, title, bio, stance, traits
    messages: list[dict]  # role "user"|"opponent", name, content, timestamp (ms)
    synthesis: dict  # consensus, disagreements, winner, winnerReason, conclusion, recommendations
    verdicts: list[dict]  # the two position-swapped judgements the synthesis was drawn from
    human: list[dict]  # the person's messages, each with its `position` among the turns (`nodes.steer`)
    stopped_by: str  # why the debate went to the judging before its last round: user, budget
    consumed: list[str]  # the ids of the inputs its boundaries took in


class DuelState(SteerState, total=False):
    topic: str
    user_profile: dict
    rounds: int
    opponent_profile: dict
    messages: Annotated[list[dict], operator.add]
    tools: dict  # the tools each side was granted
    verdicts: Annotated[list[dict], operator.add]
    synthesis: dict


# Turns are retried only while nothing of them was sent (a failure mid-stream raises TurnInterrupted).
TURN_RETRY = MODEL_RETRY

# The opponent is cast by a model for the topic; the built-in personas stand in when that fails.
pick_opponent = select_opponent(
    system=prompts.SELECT_OPPONENT_SYSTEM, prompt=prompts.SELECT_OPPONENT_PROMPT, fallback=fallback_opponent,
    context=DuelContext,
)
# Judged twice, order swapped (`judge_both_orders`); JUDGE_RETRY asks again after a transient failure or an
# unreadable verdict.
judge_debate = judge(
    system=prompts.JUDGE_SYSTEM, prompt=prompts.JUDGE_PROMPT, unreadable=prompts.UNREADABLE_VERDICT,
    context=DuelContext,
)


def turns_left(state: DuelState, ctx: DuelContext) -> bool:
    """Whether a turn is still to be said: every round has two."""
    return len(state.get("messages") or []) < 2 * (state.get("rounds") or ctx.rounds)


def next_turn(state: DuelState, runtime: Runtime[DuelContext]) -> Literal[
        "user_turn", "opponent_turn", "announce_synthesis"]:
    """The next turn (the user's agent opens each round), or on to the judging once every round has had its two
    turns, or the boundary stopped the debate."""
    if state.get("stopped_by") or not turns_left(state, duel_context(runtime)):
        return "announce_synthesis"
    return "opponent_turn" if len(state.get("messages") or []) % 2 else "user_turn"


def first_step(state: DuelState) -> Literal["select_opponent", "steer"]:
    """Choose the opponent, unless the duel goes on from turns already made: then the boundary after the last one
    (which takes in what was sent meanwhile, and goes on to the next turn or the judging)."""
    return "steer" if state.get("opponent_profile") else "select_opponent"


def transcript(messages: list[dict], human: list[dict] | None) -> list[dict]:
    """The debaters' turns with the person's messages among them (each before the turn at its `position`), as
    the debate record and the `done` event list them: a person's message has `role: "human"`."""
    said: list[dict] = []
    pending = sorted(human or [], key=lambda m: m["position"])
    for index, message in enumerate([*messages, None]):
        while pending and pending[0]["position"] <= index:
            m = pending.pop(0)
            said.append({"role": "human", "senderType": "user", "name": m["speaker"]["name"], "content": m["content"],
                         "timestamp": m["timestamp"], "id": m["id"]})
        if message is not None:
            said.append(message)
    return said


def verdict_reserve(state: DuelState, ctx: DuelContext) -> list[CallEstimate]:
    """The two judges' calls, estimated: each reads the whole transcript."""
    said = sum(approx_text_tokens(m["content"]) + 8 for m in state.get("messages") or [])
    prompt = said + approx_text_tokens(prompts.JUDGE_SYSTEM + prompts.JUDGE_PROMPT) + 64
    return [ctx.factory.estimate(ctx.judge_model or ctx.model, prompt, None, Judgement)] * 2


def minimum_calls(inputs: DuelInput, ctx: DuelContext) -> list[CallEstimate]:
    """The calls of the smallest duel, estimated as the budget check of each call makes it: the opponent's casting,
    one round (two turns) and the two verdicts. A budget below them is refused before the duel starts."""
    profile = inputs["user_profile"]
    about = approx_text_tokens(inputs["topic"]) + approx_text_tokens(str(profile.get("bio") or "")) + 40
    cast = ctx.factory.estimate(ctx.model, approx_text_tokens(prompts.SELECT_OPPONENT_SYSTEM
                                                              + prompts.SELECT_OPPONENT_PROMPT) + about, None,
                                OpponentProfile)
    turn_prompt = approx_text_tokens(prompts.SPEAKER_SYSTEM + prompts.SPEAKER_TURN) + about + ctx.max_chars // 2
    turns = [ctx.factory.estimate(model or ctx.model, turn_prompt, ctx.turn_tokens(inputs["topic"]))
             for model in (ctx.user_model, ctx.opponent_model)]
    return [cast, *turns, *verdict_reserve({"messages": [{"content": "x" * ctx.max_chars}] * 2}, ctx)]


# The boundary after each turn (`nodes.steer`): a person's messages, waits, `end` and the budget.
steer = boundary(
    at="after_turn", context=DuelContext, position=lambda state: len(state.get("messages") or []),
    more=turns_left, round=lambda state: len(state.get("messages") or []) // 2 + 1, reserve=verdict_reserve,
    doc="Take in what the person sent after a turn; wait for them if asked; stop for `end` or the budget.",
)


def build_duel_graph() -> StateGraph:
    """Return the duel as an uncompiled `StateGraph`: the user's persona agent against a chosen opponent, judged.

    Its input is a `DuelInput`, its output a `DuelOutput`, its knobs a `DuelContext` (`rounds`, per-role models,
    turn lengths). Compile it (with a checkpointer if a run must survive a crash), or add it as a node of a
    larger graph. Stream it with `stream_mode="custom"`: `start`, `chunk`, `message` per turn, `synthesizing`
    before the judging.

    Returns:
        The `StateGraph` builder, not yet compiled.

    Example:
        >>> import parley
        >>> sorted(parley.build_duel_graph().nodes)
        ['announce_synthesis', 'judge', 'opponent_turn', 'select_opponent', 'steer', 'synthesize', 'user_turn']

        Run (docs/python.md, duel.py):

        ```python
        graph = parley.build_duel_graph().compile()
        inputs = {"topic": "Should remote work be the default?", "user_profile": {"name": "Ada", "bio": "Engineer"}}
        async for mode, event in graph.astream(inputs, context=parley.DuelContext(rounds=1),
                                               stream_mode=["custom", "values"]):
            ...  # event["event"] == "chunk": event["content"]; the last "values" holds "synthesis"
        ```
    """
    builder = StateGraph(DuelState, context_schema=DuelContext, input_schema=DuelInput, output_schema=DuelOutput)
    builder.add_node("select_opponent", pick_opponent)
    builder.add_node("user_turn", make_speaker("user"), retry_policy=TURN_RETRY)
    builder.add_node("opponent_turn", make_speaker("opponent"), retry_policy=TURN_RETRY)
    builder.add_node("steer", steer)
    builder.add_node("announce_synthesis", announce_synthesis)
    builder.add_node("judge", judge_debate, retry_policy=JUDGE_RETRY)
    builder.add_node("synthesize", synthesize)

    builder.add_conditional_edges(START, first_step)
    builder.add_edge("select_opponent", "user_turn")
    builder.add_edge("user_turn", "steer")
    builder.add_edge("opponent_turn", "steer")
    builder.add_conditional_edges("steer", next_turn)
    builder.add_conditional_edges("announce_synthesis", judge_both_orders, ["judge"])
    builder.add_edge("judge", "synthesize")
    builder.add_edge("synthesize", END)
    return builder


graph = build_duel_graph().compile(name="duel")
