"""The duel: the user's persona agent debates an opponent chosen for the topic, then a judge rules.

select_opponent → (user_turn → opponent_turn) × rounds → announce_synthesis → judge ×2 (order swapped) → synthesize
(given an `opponent_profile` and `messages`, it goes on from the next turn instead of choosing an opponent)

Stream it with `graph.astream(inputs, context=DuelContext(...), stream_mode=["custom", "updates"])`:
the custom events are `start`/`chunk`/`message` per turn and `synthesizing` before judging.
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import NotRequired, TypedDict  # pydantic's schemas need these before Python 3.12

from graphs.duel import prompts
from graphs.duel.personas import fallback_opponent
from graphs.duel.steps import DuelContext, announce_synthesis, duel_context, make_speaker, synthesize
from llm.failures import MODEL_RETRY
from nodes.judge import JUDGE_RETRY, judge, judge_both_orders
from nodes.select_opponent import select_opponent

__all__ = [
    "JUDGE_RETRY", "DuelContext", "DuelInput", "DuelOutput", "DuelState", "build_duel_graph", "graph", "judge_debate",
    "judge_both_orders", "pick_opponent",
]


class DuelInput(TypedDict):
    topic: str
    user_profile: dict  # the seed's userProfile: name, avatar?, bio?, softMemory {traits[], interests[]}
    rounds: NotRequired[int]  # overrides DuelContext.rounds
    # A duel that goes on from turns already made (a run resumed from its debate record): its opponent and turns.
    opponent_profile: NotRequired[dict]
    messages: NotRequired[list[dict]]
    # The tools each side was granted (`nodes.tools`): {"user": [...], "opponent": [...]}.
    tools: NotRequired[dict]


class DuelOutput(TypedDict):
    opponent_profile: dict  # name, title, bio, stance, traits
    messages: list[dict]  # role "user"|"opponent", name, content, timestamp (ms)
    synthesis: dict  # consensus, disagreements, winner, winnerReason, conclusion, recommendations
    verdicts: list[dict]  # the two position-swapped judgements the synthesis was drawn from


class DuelState(TypedDict, total=False):
    topic: str
    user_profile: dict
    rounds: int
    opponent_profile: dict
    messages: Annotated[list[dict], operator.add]
    summary: str  # running summary of the turns that left the speakers' recent window
    summarized: int  # how many turns the summary covers
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


def next_round(state: DuelState, runtime: Runtime[DuelContext]) -> Literal["user_turn", "announce_synthesis"]:
    """Another round, or on to the judging once every round has had its two turns."""
    rounds = state.get("rounds") or duel_context(runtime).rounds
    return "user_turn" if len(state.get("messages") or []) < 2 * rounds else "announce_synthesis"


def first_step(state: DuelState, runtime: Runtime[DuelContext]) -> Literal[
        "select_opponent", "user_turn", "opponent_turn", "announce_synthesis"]:
    """Choose the opponent, unless the duel goes on from turns already made: then the next turn, or the judging."""
    if not state.get("opponent_profile"):
        return "select_opponent"
    if len(state.get("messages") or []) % 2:
        return "opponent_turn"
    return next_round(state, runtime)


def build_duel_graph() -> StateGraph:
    """The duel as an uncompiled `StateGraph`; compile it, or embed it in a larger graph."""
    builder = StateGraph(DuelState, context_schema=DuelContext, input_schema=DuelInput, output_schema=DuelOutput)
    builder.add_node("select_opponent", pick_opponent)
    builder.add_node("user_turn", make_speaker("user"), retry_policy=TURN_RETRY)
    builder.add_node("opponent_turn", make_speaker("opponent"), retry_policy=TURN_RETRY)
    builder.add_node("announce_synthesis", announce_synthesis)
    builder.add_node("judge", judge_debate, retry_policy=JUDGE_RETRY)
    builder.add_node("synthesize", synthesize)

    builder.add_conditional_edges(START, first_step)
    builder.add_edge("select_opponent", "user_turn")
    builder.add_edge("user_turn", "opponent_turn")
    builder.add_conditional_edges("opponent_turn", next_round)
    builder.add_conditional_edges("announce_synthesis", judge_both_orders, ["judge"])
    builder.add_edge("judge", "synthesize")
    builder.add_edge("synthesize", END)
    return builder


graph = build_duel_graph().compile(name="duel")
