"""The round table: up to five persona agents and a devil's advocate debate over rounds, then a synthesis.

Round 0 gives initial positions; each debate round fans the seats out with `Send` (a round costs its
slowest agent), each agent seeing the positions of every earlier round in order, the same on each of its turns
(cache-friendly, `nodes.prefix`): a turn repeats its seat's previous prompt and adds one round, which a provider's
prompt cache reads at a fraction of the price (rounds are bounded by MAX_TABLE_ROUNDS). Convergence is scored after every debate round; the table stops at the
threshold or after `max_rounds` (or after a unanimous round 0, with `unanimous_confidence`), then the
synthesis and each agent's memory notes are written concurrently.

After every round the boundary (`steer`, `nodes.steer`) takes in what the person who asked sent (every
later turn and the synthesis see it), waits for them when the run was started with `await: "after_round"`
or a pause was asked, and goes to the synthesis on `end` or when the budget holds no more rounds.

    from parley.graphs.roundtable import graph, RoundTableContext
    result = await graph.ainvoke({"question": "...", "agents": [...]}, context=RoundTableContext())
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import TypedDict  # as `nodes.steer.SteerState`, which the state extends

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send

from parley.graphs.roundtable.steps import (
    MemoryNotes,
    RoundTableContext,
    StatedPosition,
    SynthesisDraft,
    agent_turn,
    builtin_devils_advocate,
    context_of,
    devils_advocate_turn,
    form_memories,
    seat_agents,
    seat_order,
    synthesize,
)
from parley.graphs.roundtable import prompts
from parley.llm.budget import CallEstimate
from parley.llm.failures import MODEL_RETRY
from parley.llm.tokens import approx_text_tokens
from parley.nodes.convergence import measure_convergence
from parley.nodes.events import emit
from parley.nodes.fan_out import FanOut
from parley.nodes.steer import SteerState, boundary
from parley.nodes.text import newest_within

__all__ = [
    "RoundTableContext", "RoundTableState", "build_round_table_graph", "estimate_minimum_tokens", "format_history",
    "graph", "minimum_calls", "seat_order",
]


# --- state ----------------------------------------------------------------------------------


class RoundTableInput(TypedDict, total=False):
    """What a caller gives: the question, an optional topic, the agents, and earlier exchanges."""

    question: str
    topic: str | None
    agents: list[dict[str, Any]]
    history: str | None


class RoundTableOutput(TypedDict, total=False):
    """What a caller gets back."""

    synthesis: dict[str, Any]
    total_rounds: int
    rounds: list[dict[str, Any]]
    transcript: list[dict[str, Any]]
    memories: list[dict[str, Any]]
    human: list[dict[str, Any]]  # the person's messages, each with the `round` that first saw it
    stopped_by: str  # why the table went to its synthesis early: unanimous, user, budget
    consumed: list[str]  # the ids of the inputs its boundaries took in
    first_vote: dict[str, Any]  # with the context's `answer_rule`: the initial positions' majority


class RoundTableState(RoundTableInput, RoundTableOutput, SteerState, total=False):
    """Everything the nodes share while the table sits."""

    seats: list[dict[str, Any]]
    round: int
    converged: bool
    transcript: Annotated[list[dict[str, Any]], operator.add]
    rounds: Annotated[list[dict[str, Any]], operator.add]
    memories: Annotated[list[dict[str, Any]], operator.add]


# --- the table's own glue -------------------------------------------------------------------


async def open_round(state: RoundTableState) -> dict[str, Any]:
    """Open the next round and announce who speaks in it."""
    round_number = state.get("round", -1) + 1
    emit({
        "event": "round_start",
        "roundNumber": round_number,
        "phase": "initial" if round_number == 0 else "debate",
        "agents": [{"agentId": s["id"], "agentName": s["name"], "isDevilsAdvocate": s["isDevilsAdvocate"]}
                   for s in state["seats"]],
    })
    return {"round": round_number}


# One round: every seat's turn at once (the devil's advocate's on its own node), every one needed.
TURNS = FanOut(node=lambda task: "devils_advocate_turn" if task["agent"]["isDevilsAdvocate"] else "agent_turn",
               results_key="transcript")
# The end: every seat's memory notes, beside the synthesis.
MEMORIES = FanOut(node="form_memories", results_key="memories")


def turn_tasks(state: RoundTableState) -> list[dict[str, Any]]:
    """Every seat's turn of the round, with the positions of the rounds before it."""
    round_number = state["round"]
    earlier = [m for m in state.get("transcript") or [] if m["roundNumber"] < round_number]
    return [
        {
            "agent": seat,
            "round": round_number,
            "question": state["question"],
            "topic": state.get("topic"),
            "history": state.get("history"),
            "earlier": earlier,
            "human": state.get("human") or [],
        }
        for seat in state["seats"]
    ]


dispatch_turns = TURNS.dispatch(turn_tasks, name="dispatch_turns",
                                doc="Send every seat its turn, with the earlier rounds' positions.")


def another_round(state: RoundTableState, ctx: RoundTableContext) -> bool:
    """Whether the table debates another round: not converged, under `max_rounds`."""
    return not state.get("converged") and state["round"] < ctx.max_rounds


def final_reserve(state: RoundTableState, ctx: RoundTableContext) -> list[CallEstimate]:
    """The synthesis's and each seat's memory call, estimated (each reads about the whole table's positions)."""
    seats = state.get("seats") or []
    positions = len(seats) * (ctx.position_chars // 4 + 40)
    synthesis = approx_text_tokens(prompts.SYNTHESIS_SYSTEM + prompts.SYNTHESIS_PROMPT) + 2 * positions
    seat = approx_text_tokens(prompts.AGENT_SYSTEM + prompts.DEVILS_ADVOCATE_RULES + prompts.TABLE_HEADER)
    memory = seat + approx_text_tokens(prompts.MEMORY_PROMPT) + positions // 2 + 200
    return [ctx.factory.estimate(ctx.synthesis_model or ctx.model, synthesis, None, SynthesisDraft),
            *(ctx.factory.estimate(seat.get("model") or ctx.model, memory, None, MemoryNotes) for seat in seats)]


def minimum_calls(inputs: RoundTableInput, ctx: RoundTableContext) -> list[CallEstimate]:
    """The calls of the smallest debate, estimated as the budget check of each call makes it: round 0 (each
    seat's answer and the reading of its stance) and the synthesis with every seat's memory notes. A budget below
    them is refused before the question is asked."""
    regular, advocate = seat_order(inputs.get("agents") or [], ctx.max_seats)
    seats = [*regular, advocate or builtin_devils_advocate()]
    shared = sum(approx_text_tokens(inputs.get(key) or "") for key in ("question", "topic", "history"))
    calls = []
    for seat in seats:
        own = approx_text_tokens(seat.get("persona") or "") + sum(
            approx_text_tokens(m) for m in (seat.get("memories") or [])[-ctx.memories_per_agent:])
        passages = min(sum(approx_text_tokens(d.get("text") or "") for d in seat.get("documents") or []),
                       ctx.passages_per_agent * 150)
        prompt = approx_text_tokens(prompts.AGENT_SYSTEM + prompts.DEVILS_ADVOCATE_RULES + prompts.TABLE_HEADER
                                    + prompts.INITIAL_INSTRUCTIONS)
        calls.append(ctx.factory.estimate(seat.get("model") or ctx.model, prompt + own + passages + shared,
                                          ctx.max_tokens))
        answer = approx_text_tokens(prompts.POSITION_SYSTEM + prompts.POSITION_PROMPT) + ctx.max_tokens + shared
        calls.append(ctx.factory.estimate(seat.get("model") or ctx.model, answer, None, StatedPosition))
    return calls + final_reserve({"seats": [{"model": seat.get("model")} for seat in seats]}, ctx)


# The boundary after each round (`nodes.steer`): a person's messages, waits, `end` and the budget.
steer = boundary(
    at="after_round", context=RoundTableContext, position=lambda state: state["round"], more=another_round,
    round=lambda state: state["round"] + 1, reserve=final_reserve,
    doc="Take in what the person sent after a round; wait for them if asked; stop for `end` or the budget.",
)


def after_round(state: RoundTableState, runtime: Runtime) -> list[Send | str] | str:
    """Debate another round, or finish (converged, the last round, or stopped at the boundary): synthesis and
    memory notes side by side."""
    ctx = context_of(runtime)
    if not state.get("stopped_by") and another_round(state, ctx):
        return "open_round"
    memory_turns = MEMORIES.send(
        {"agent": seat, "question": state["question"], "topic": state.get("topic"), "history": state.get("history"),
         "transcript": state["transcript"]} for seat in state["seats"]
    )
    return ["synthesize", *memory_turns]


def format_history(exchanges: list[dict[str, Any]], *, max_chars: int = 2400) -> str | None:
    """Bounded history for a follow-up: each earlier exchange's question and conclusion, oldest first, and the
    last positions of the most recent one, within `max_chars` (`nodes.text.newest_within`).

    Args:
        exchanges: oldest first, each `{"question", "synthesis", "positions": [{agentName, stance, keyPoint}]}`.
        max_chars: the budget; older exchanges are dropped first.
    """
    if not exchanges:
        return None
    latest = exchanges[-1]
    blocks = []
    positions = "\n".join(
        f"  - {p['agentName']} [{p['stance']}]: {p.get('keyPoint') or ''}" for p in latest.get("positions") or []
    )
    for number, exchange in enumerate(exchanges, 1):
        synthesis = exchange.get("synthesis") or {}
        block = (
            f"Q{number}: {exchange['question']}\n"
            f"  Conclusion: {synthesis.get('summary', '')} Recommended: {synthesis.get('recommendedAction', '')}"
        )
        if exchange is latest and positions:
            block += "\n  Last positions:\n" + positions
        blocks.append(block)
    return "\n".join(newest_within(blocks, max_chars))


def estimate_minimum_tokens(inputs: RoundTableInput, ctx: RoundTableContext | None = None) -> int:
    """Tokens a minimal debate (initial positions, one debate round, synthesis, memories) needs, roughly.

    Used to refuse a run up front that the caller's allowance could not pay for. Counts ~4 characters a
    token for what each prompt carries, plus a short answer and its position extraction per turn.
    """
    ctx = ctx or RoundTableContext()
    regular, advocate = seat_order(inputs.get("agents") or [], ctx.max_seats)
    seated = [*regular, advocate or builtin_devils_advocate()]
    seats = len(seated)
    shared = len(inputs.get("question") or "") + len(inputs.get("topic") or "") + len(inputs.get("history") or "")
    per_seat = []
    for agent in seated:
        documents = sum(len(d.get("text") or "") for d in agent.get("documents") or [])
        # Retrieval keeps a few chunks of ~90 words, whatever the documents' size.
        passages = min(documents, ctx.passages_per_agent * 600)
        memories = sum(len(m) for m in (agent.get("memories") or [])[-ctx.memories_per_agent :])
        per_seat.append((len(agent.get("persona") or "") + passages + memories + shared) // 4)
    prompt = (sum(per_seat) // max(1, len(per_seat))) if per_seat else shared // 4
    answer, framing, extraction = 150, 250, 120
    initial_turn = prompt + framing + answer + (answer + extraction)
    debate_turn = initial_turn + seats * min(ctx.position_chars, answer * 4) // 4
    synthesis = 300 + seats * 120 + 300
    memories = seats * (250 + 60)
    return seats * (initial_turn + debate_turn) + synthesis + memories


# --- wiring ---------------------------------------------------------------------------------


def build_round_table_graph() -> StateGraph:
    """Return the round table as an uncompiled `StateGraph`: persona agents and a devil's advocate debate in rounds.

    Its input is a `RoundTableInput` (`question`, `agents`, optional `topic` and `history`), its output a
    `RoundTableOutput` (`synthesis`, `total_rounds`, `rounds`, `transcript`, `memories`, ...), its knobs a
    `RoundTableContext` (`max_rounds`, `convergence_threshold`, `max_seats`, ...). The graph seats a built-in devil's
    advocate when the agents have none. Compile it, or add the compiled graph as a node of a larger graph: it reads
    and writes the keys it shares with that graph's state.

    Returns:
        The `StateGraph` builder, not yet compiled.

    Example:
        ```python
        # docs/python.md, panel_then_table.py: the compiled table as a node of your own graph
        builder.add_node("table", parley.build_round_table_graph().compile())

        # or on its own
        table = parley.build_round_table_graph().compile()
        out = await table.ainvoke({"question": "Open in Lyon now?", "agents": agents},
                                  context=parley.RoundTableContext(max_rounds=2))
        out["synthesis"]["recommendedAction"], out["total_rounds"]
        ```
    """
    builder = StateGraph(
        RoundTableState, context_schema=RoundTableContext, input_schema=RoundTableInput,
        output_schema=RoundTableOutput,
    )
    builder.add_node("seat_agents", seat_agents)
    builder.add_node("open_round", open_round)
    builder.add_node("agent_turn", agent_turn, retry_policy=MODEL_RETRY)
    builder.add_node("devils_advocate_turn", devils_advocate_turn, retry_policy=MODEL_RETRY)
    builder.add_node("measure_convergence", measure_convergence)
    builder.add_node("steer", steer)
    builder.add_node("synthesize", synthesize, retry_policy=MODEL_RETRY)
    builder.add_node("form_memories", form_memories, retry_policy=MODEL_RETRY)

    builder.add_edge(START, "seat_agents")
    builder.add_edge("seat_agents", "open_round")
    builder.add_conditional_edges("open_round", dispatch_turns, ["agent_turn", "devils_advocate_turn"])
    builder.add_edge("agent_turn", "measure_convergence")
    builder.add_edge("devils_advocate_turn", "measure_convergence")
    builder.add_edge("measure_convergence", "steer")
    builder.add_conditional_edges("steer", after_round, ["open_round", "synthesize", "form_memories"])
    builder.add_edge("synthesize", END)
    builder.add_edge("form_memories", END)
    return builder


graph = build_round_table_graph().compile(name="roundtable")
