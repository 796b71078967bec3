"""The round table's own steps: seating, the turn prompts, the synthesis and memory prompts and their fallbacks.

Every node reads its knobs from `RoundTableContext` and calls models only through it. Turn nodes are
fed by `Send` with a `TableTurnInput`, so one round's agents run concurrently; each is a `speak` node
(`nodes.speak`) streaming its tokens as `chunk` events, and returns one transcript message.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field, field_validator

from parley.core import clock
from parley.core.limits import MAX_TABLE_ROUNDS, MAX_TABLE_SEATS
from parley.graphs.roundtable import prompts
from parley.llm.usage import usage_view
from parley.nodes.answers import parse_rule, vote_record
from parley.nodes.bounds import AtMost, Clipped
from parley.nodes.context import RunContext
from parley.nodes.convergence import positions_of, strongest_consensus
from parley.nodes.events import emit
from parley.nodes.prefix import stable_first
from parley.nodes.retrieval import retrieve
from parley.nodes.speak import Turn, speak
from parley.nodes.steer import guidance_lines
from parley.nodes.structured import ask_structured
from parley.nodes.synthesize import synthesize as synthesize_node
from parley.nodes.text import clip, first_sentence

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class RoundTableContext(RunContext):
    """Per-run knobs of a round table."""

    max_rounds: int = MAX_TABLE_ROUNDS
    convergence_threshold: float = 0.85
    max_seats: int = MAX_TABLE_SEATS
    passages_per_agent: int = 3
    memories_per_agent: int = 8
    memory_notes: int = 3
    answer_words: int = 180
    max_tokens: int = 400
    temperature: float = 0.7
    position_chars: int = 700
    synthesis_model: str | None = None
    devils_advocate_model: str | None = None
    # Skip the debate rounds when every regular agent takes the same stance in round 0 with at least this
    # confidence (`stopped_by: "unanimous"`); None: never. Round-table runs set it from PARLEY_TABLE_EARLY_STOP.
    unanimous_confidence: float | None = None
    # How the agents' answers are read (`nodes.answers.parse_rule`), when they are checkable: the synthesis then
    # records the majority of the initial positions (round 0, the devil's advocate aside) as `first_vote`.
    answer_rule: str | None = None


def context_of(runtime: Runtime | None) -> RoundTableContext:
    """The run's RoundTableContext (see `RunContext.of`)."""
    return RoundTableContext.of(runtime)


# --- structured outputs ---------------------------------------------------------------------


# Bounded lengths keep answers short everywhere and stop a small model running out of tokens mid-JSON.
Sentence = Clipped(200)
Phrase = Clipped(120)


class StatedPosition(BaseModel):
    """The position one contribution takes on the question."""

    stance: Literal["for", "against", "conditional", "neutral"] = Field(
        description="for: answers yes / supports the proposal; against: answers no / opposes it; conditional: "
        "supports it only under stated conditions; neutral: takes no side."
    )
    confidence: float = Field(ge=0.0, le=1.0, description="How firmly the contribution holds its stance, 0 to 1.")
    keyPoint: Sentence = Field(description="The contribution's single most important point, in one sentence.")

    @field_validator("confidence", mode="before")
    @classmethod
    def _clamp(cls, value: Any) -> Any:
        # Grammar-constrained servers enforce the JSON type but not its range.
        return min(1.0, max(0.0, value)) if isinstance(value, int | float) else value


class SynthesisDraft(BaseModel):
    """The synthesizer's report of a debate."""

    summary: Clipped(400) = Field(description="Two or three sentences: what the table concludes.")
    debateEvolution: Sentence = Field(description="How positions moved during the debate, naming who shifted and why.")
    devilsAdvocateMainAttack: Sentence = Field(description="The devil's advocate's strongest objection, in one sentence.")
    consensus: AtMost(4, Phrase) = Field(description="Points the table agrees on, one short sentence each.")
    riskPoints: AtMost(4, Phrase) = Field(description="What could go wrong, one short phrase each.")
    recommendedAction: Sentence = Field(description="What to do next, concretely, in one or two sentences.")
    conditions: AtMost(4, Phrase) = Field(description="Conditions the recommendation depends on.")
    confidenceLevel: Literal["low", "medium", "high"] = Field(description="How confident the table is overall.")
    urgency: Literal["low", "medium", "high"] = Field(description="How soon a decision is needed.")


class MemoryNotes(BaseModel):
    """What one agent keeps from a debate."""

    notes: AtMost(3, Phrase) = Field(description="Short notes, one sentence each, of what is worth remembering.")


# --- state fragments the nodes read -----------------------------------------------------------


class TableTurnInput(TypedDict):
    """What one agent's turn receives through `Send`."""

    agent: dict[str, Any]
    round: int
    question: str
    topic: str | None
    history: str | None
    earlier: list[dict[str, Any]]  # the transcript of the rounds before this one
    human: list[dict[str, Any]]  # what the person who asked sent so far (`nodes.steer`)


class MemoryInput(TypedDict):
    """What one agent's memory formation receives through `Send`."""

    agent: dict[str, Any]
    question: str
    topic: str | None
    history: str | None
    transcript: list[dict[str, Any]]


# --- seating --------------------------------------------------------------------------------


def builtin_devils_advocate() -> dict[str, Any]:
    """The devil's advocate seated when the caller brings none."""
    return {
        "id": "devils-advocate",
        "name": prompts.DEVILS_ADVOCATE_NAME,
        "role": prompts.DEVILS_ADVOCATE_ROLE,
        "persona": prompts.DEVILS_ADVOCATE_PERSONA,
        "isDevilsAdvocate": True,
        "memories": [],
        "documents": [],
    }


def seat_order(agents: list[dict[str, Any]], max_seats: int) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The round table's seating rule: the first `max_seats` regular agents in the given order, and the devil's
    advocate (the first agent marked `isDevilsAdvocate`; None when `agents` has none).

    Every caller seats through it: the graph (`choose_seats`), its budget estimates, the service that reads a
    workspace's table and the CLI.
    """
    regular = [a for a in agents if not a.get("isDevilsAdvocate")][:max_seats]
    return regular, next((a for a in agents if a.get("isDevilsAdvocate")), None)


def choose_seats(agents: list[dict[str, Any]], max_seats: int) -> list[dict[str, Any]]:
    """Who sits at the table (`seat_order`): the regular agents, then the devil's advocate, the built-in one
    when `agents` has none.

    Raises:
        ValueError: `agents` has no regular agent.
    """
    regular, advocate = seat_order(agents, max_seats)
    if not regular:
        raise ValueError("A round table needs at least one regular agent")
    return regular + [advocate or builtin_devils_advocate()]


async def seat_agents(state: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
    """Seat the table and give each agent the passages of its documents most relevant to the question."""
    ctx = context_of(runtime)
    query = " ".join(filter(None, [state.get("topic"), state["question"]]))
    seats = []
    for index, agent in enumerate(choose_seats(state.get("agents") or [], ctx.max_seats)):
        passages = retrieve(query, agent.get("documents") or [], k=ctx.passages_per_agent)
        seats.append({
            "id": str(agent.get("id") or f"agent-{index + 1}"),
            "name": agent.get("name") or f"Agent {index + 1}",
            "role": agent.get("role") or "",
            "persona": agent.get("persona") or "",
            "model": agent.get("model"),
            "isDevilsAdvocate": bool(agent.get("isDevilsAdvocate")),
            "memories": list(agent.get("memories") or [])[-ctx.memories_per_agent :],
            "passages": [{"title": p.title, "text": p.text} for p in passages],
            "seat": index,
            "tools": list(agent.get("tools") or []),
        })
    return {"seats": seats}


# --- turns ----------------------------------------------------------------------------------


def table_header(state: TableTurnInput | MemoryInput | dict[str, Any]) -> str:
    """The opening of every prompt of a round table (`prompts.TABLE_HEADER`): the topic, the question and the
    conversation's earlier exchanges, the same for every call, so a prompt cache reads it once for them all."""
    history = prompts.HISTORY_BLOCK.format(history=state["history"]) if state.get("history") else ""
    return prompts.TABLE_HEADER.format(topic=state.get("topic") or state["question"], question=state["question"],
                                       history=history)


def seat_system(agent: dict[str, Any], ctx: RoundTableContext, state: TableTurnInput | MemoryInput) -> str:
    """A seat's system message, the same on all its calls of a debate (turns and memory notes): the table, how a
    seat argues, who it is, how rounds work, its memories and passages (`nodes.prefix`)."""
    memories = ""
    if agent.get("memories"):
        memories = prompts.MEMORIES_BLOCK.format(memories="\n".join(f"- {m}" for m in agent["memories"]))
    passages = ""
    if agent.get("passages"):
        passages = prompts.PASSAGES_BLOCK.format(
            passages="\n\n".join(f"[{p['title']}]\n{p['text']}" for p in agent["passages"])
        )
    return prompts.AGENT_SYSTEM.format(
        table=table_header(state), name=agent["name"], role=agent["role"] or "a participant",
        persona=agent.get("persona") or "", words=ctx.answer_words, memories=memories, passages=passages,
        rules=prompts.DEVILS_ADVOCATE_RULES if agent["isDevilsAdvocate"] else prompts.AGENT_RULES,
    )


def format_positions(messages: list[dict[str, Any]], *, chars: int, me: str | None = None) -> str:
    """One line per seat: who, which stance, and (cut to `chars`) what they said."""
    lines = []
    for m in sorted(messages, key=lambda m: m.get("seat", 0)):
        who = f"{m['agentName']} ({m['agentRole'] or 'participant'})"
        if m.get("isDevilsAdvocate"):
            who += ", devil's advocate"
        if m["agentId"] == me:
            who += ", you"
        lines.append(f"- {who} [{m['stance']}, confidence {m['confidence']:.2f}]: {clip(m['content'], chars)}")
    return "\n".join(lines) or "(nobody has spoken yet)"


def describe_consensus(previous: list[dict[str, Any]], round_number: int) -> str:
    """The strongest emerging consensus of the previous round, in words, for the devil's advocate."""
    stance, backers = strongest_consensus(positions_of(previous, round_number))
    if stance is None:
        return "none has emerged yet"
    names = {m["agentId"]: m["agentName"] for m in previous}
    points = "; ".join(f"{names.get(p.agent_id, p.agent_id)}: {p.claim}" for p in backers if p.claim)
    return f"{len(backers)} agent(s) are {stance}" + (f" ({points})" if points else "")


def _turn_messages(state: TableTurnInput, ctx: RoundTableContext) -> list[BaseMessage]:
    """A seat's turn in cache-friendly order (`nodes.prefix`): who it is and the question, each earlier round's
    positions, then what this round asks (and what the person who asked added)."""
    agent, round_number = state["agent"], state["round"]
    said = state.get("earlier") or []
    earlier = [
        prompts.ROUND_POSITIONS.format(round=number, positions=format_positions(
            [m for m in said if m["roundNumber"] == number], chars=ctx.position_chars, me=agent["id"]))
        for number in range(round_number)
    ]
    if agent["isDevilsAdvocate"]:
        if round_number == 0:
            ask = prompts.DEVILS_ADVOCATE_INITIAL
        else:
            ask = prompts.DEVILS_ADVOCATE_DEBATE.format(
                previous_round=round_number - 1, round=round_number,
                consensus=describe_consensus(said, round_number - 1),
            )
    elif round_number == 0:
        ask = prompts.INITIAL_INSTRUCTIONS
    else:
        ask = prompts.DEBATE_INSTRUCTIONS.format(previous_round=round_number - 1, round=round_number)
    if state.get("human"):
        ask += prompts.GUIDANCE_BLOCK.format(guidance=guidance_lines(state["human"]))
    return stable_first(seat_system(agent, ctx, state), earlier, ask)


def _usage_of(ctx: RoundTableContext, label: str) -> dict[str, int]:
    """A turn's usage as the seed's messages show it: the tokens in and out (`usage_view`) of the turn's calls, and the
    parts of them read from the prompt cache and spent reasoning."""
    view = usage_view(r for r in ctx.ledger.records if r.label == label)
    return {key: view[key] for key in ("inputTokens", "outputTokens", "cachedTokens", "reasoningTokens")}


def _turn_model(state: TableTurnInput, ctx: RoundTableContext) -> str | None:
    agent = state["agent"]
    return agent.get("model") or (ctx.devils_advocate_model if agent["isDevilsAdvocate"] else None)


async def _record_turn(turn: Turn, state: TableTurnInput, ctx: RoundTableContext) -> dict[str, Any]:
    """Extract the stance the streamed answer took, and record the answer (with the tools it called) as one
    transcript message."""
    agent, round_number = state["agent"], state["round"]
    content = turn.text.strip()
    extract = ctx.structured(StatedPosition, turn.model, temperature=0.0, label=turn.label)

    def unknown_stance(exc: BaseException) -> StatedPosition:
        # The answer itself is kept; only its stance is unknown, which counts as neutral and unsure.
        log.warning("stance of %s in round %s unreadable (%s); recorded as neutral", agent["name"], round_number,
                    exc.__class__.__name__)
        return StatedPosition(stance="neutral", confidence=0.0, keyPoint=first_sentence(content, 200))

    position: StatedPosition = await ask_structured(extract, [
        SystemMessage(prompts.POSITION_SYSTEM.format(table=table_header(state))),
        HumanMessage(prompts.POSITION_PROMPT.format(
            name=agent["name"], role=agent["role"] or "participant", answer=content
        )),
    ], fallback=unknown_stance)
    message = {
        "agentId": agent["id"],
        "agentName": agent["name"],
        "agentRole": agent["role"],
        "content": content,
        "stance": position.stance,
        "confidence": round(position.confidence, 3),
        "keyPoint": position.keyPoint,
        "phase": "initial" if round_number == 0 else "debate",
        "roundNumber": round_number,
        "isDevilsAdvocate": agent["isDevilsAdvocate"],
        "seat": agent.get("seat", 0),
        "model": ctx.model_id(turn.model),
        "usage": {**_usage_of(ctx, turn.label), **({"toolCalls": len(turn.tool_runs)} if turn.tool_runs else {})},
        "createdAt": clock.iso(clock.now()),
    }
    if turn.tool_runs:
        message["toolCalls"] = [run.dump() for run in turn.tool_runs]
    emit({"event": "message", **message})
    return {"transcript": [message]}


# One turn of the table, whoever sits: the devil's advocate differs only in its prompt (`_turn_messages`).
# A turn failing mid-stream is asked again (its retry policy), as the table's turns always were.
_TURN = dict(
    context=RoundTableContext,
    reads=TableTurnInput,
    speaker=lambda state, ctx: {"id": state["agent"]["id"], "name": state["agent"]["name"]},
    round=lambda state, ctx: state["round"],
    prompt=_turn_messages,
    model=_turn_model,
    temperature=lambda state, ctx: ctx.temperature,
    max_tokens=lambda state, ctx: ctx.max_tokens,
    label=lambda state, ctx: f"roundtable:{state['round']}:{state['agent']['id']}:{uuid.uuid4().hex[:8]}",
    grants=lambda state, ctx: state["agent"].get("tools"),
    writes=_record_turn,
    resend=True,
)

agent_turn = speak(
    name="agent_turn", **_TURN,
    doc="Answer the question in character, reading the others' previous positions, and state a stance.",
)
devils_advocate_turn = speak(
    name="devils_advocate_turn", **_TURN, doc="Attack the strongest consensus that emerged in the previous round.",
)


# --- synthesis ------------------------------------------------------------------------------


def agent_insights(seats: list[dict[str, Any]], transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One insight per seat from its last message; `shifted` when its stance differs from round 0."""
    insights = []
    for seat in seats:
        said = sorted((m for m in transcript if m["agentId"] == seat["id"]), key=lambda m: m["roundNumber"])
        if not said:
            continue
        first, last = said[0], said[-1]
        insights.append({
            "name": seat["name"],
            "role": seat["role"],
            "keyPoint": last.get("keyPoint") or "",
            "stance": last["stance"],
            "shifted": first["stance"] != last["stance"],
        })
    return insights


def _evolution(seats: list[dict[str, Any]], transcript: list[dict[str, Any]]) -> str:
    lines = []
    for seat in seats:
        said = sorted((m for m in transcript if m["agentId"] == seat["id"]), key=lambda m: m["roundNumber"])
        path = " → ".join(f"{m['stance']} ({m['confidence']:.2f})" for m in said)
        lines.append(f"- {seat['name']}: {path}")
    return "\n".join(lines)


def fallback_synthesis(seats: list[dict[str, Any]], transcript: list[dict[str, Any]]) -> SynthesisDraft:
    """A synthesis built from the table's final stances alone, for when the synthesizer's answer is unreadable."""
    final_round = max((m["roundNumber"] for m in transcript), default=0)
    final = [m for m in transcript if m["roundNumber"] == final_round and not m["isDevilsAdvocate"]]
    stances = [m["stance"] for m in final]
    # Ties go to the stance given first: max over a set broke them by string hashes, which differ from run to run.
    majority = max(stances, key=stances.count) if stances else "neutral"
    attack = next((m for m in reversed(transcript) if m["isDevilsAdvocate"]), None)
    return SynthesisDraft(
        summary=f"The synthesizer's answer could not be read; at the end the table leaned {majority} "
        f"({stances.count(majority)} of {len(stances)} seats)."[:400],
        debateEvolution=_evolution(seats, transcript).replace("\n", "; ")[:200],
        devilsAdvocateMainAttack=(attack["keyPoint"] if attack else "")[:200],
        consensus=[], riskPoints=[], conditions=[],
        recommendedAction="Read the final positions in the transcript before deciding.",
        confidenceLevel="low", urgency="medium",
    )


def synthesis_prompt(state: dict[str, Any], ctx: RoundTableContext) -> list[BaseMessage]:
    """The synthesizer's prompt: the table's header (the question), then how positions moved, the final ones, and
    every attack."""
    seats, transcript, rounds_run = state["seats"], state.get("transcript") or [], state["round"]
    last = [m for m in transcript if m["roundNumber"] == rounds_run]
    attacks = [m["content"] for m in transcript if m["isDevilsAdvocate"]]
    prompt = prompts.SYNTHESIS_PROMPT.format(
        rounds=rounds_run, evolution=_evolution(seats, transcript),
        positions=format_positions(last, chars=ctx.position_chars),
        attacks="\n".join(f"- round {i}: {a[: ctx.position_chars]}" for i, a in enumerate(attacks)) or "(nothing)",
    )
    if state.get("human"):
        prompt += prompts.GUIDANCE_BLOCK.format(guidance=guidance_lines(state["human"]))
    return [SystemMessage(prompts.SYNTHESIS_SYSTEM.format(table=table_header(state))), HumanMessage(prompt)]


def finish_synthesis(state: dict[str, Any], ctx: RoundTableContext, draft: SynthesisDraft) -> dict[str, Any]:
    """The synthesis in the contract's shape, announced, with the number of rounds the table sat."""
    seats, transcript, rounds_run = state["seats"], state.get("transcript") or [], state["round"]
    fields = draft.model_dump()
    synthesis = {
        "summary": fields["summary"],
        "debateEvolution": fields["debateEvolution"],
        "devilsAdvocateMainAttack": fields["devilsAdvocateMainAttack"],
        "agentInsights": agent_insights(seats, transcript),
        "consensus": fields["consensus"],
        "riskPoints": fields["riskPoints"],
        "recommendedAction": fields["recommendedAction"],
        "conditions": fields["conditions"],
        "confidenceLevel": fields["confidenceLevel"],
        "urgency": fields["urgency"],
        "roundCount": rounds_run,
        # The model answered in structured form; its JSON is the closest thing to unparsed text.
        "raw": draft.model_dump_json(),
    }
    emit({"event": "synthesis", "synthesis": synthesis, "totalRounds": rounds_run})
    update: dict[str, Any] = {"synthesis": synthesis, "total_rounds": rounds_run}
    if ctx.answer_rule:
        initial = sorted((m for m in transcript if m["roundNumber"] == 0 and not m["isDevilsAdvocate"]),
                         key=lambda m: m.get("seat", 0))
        update["first_vote"] = vote_record([m["content"] for m in initial], parse_rule(ctx.answer_rule))
        emit({"event": "first_vote", **update["first_vote"]})
    return update


# Write the structured synthesis of the debate; an unreadable one falls back to the table's own positions.
synthesize = synthesize_node(
    schema=SynthesisDraft, prompt=synthesis_prompt, shape=finish_synthesis, context=RoundTableContext,
    fallback=lambda state, exc: fallback_synthesis(state["seats"], state.get("transcript") or []),
    model_role="synthesis_model", temperature=0.2, label="roundtable:synthesis", what="round-table synthesis",
)


# --- memories -------------------------------------------------------------------------------


def memory_prompt(state: MemoryInput, ctx: RoundTableContext) -> list[BaseMessage]:
    """One agent's prompt for its notes: its system message of the debate (`seat_system`, as its turns had it),
    then its own final position and the others'."""
    agent, transcript = state["agent"], state["transcript"]
    final_round = max((m["roundNumber"] for m in transcript), default=0)
    final = [m for m in transcript if m["roundNumber"] == final_round]
    own = next((m for m in final if m["agentId"] == agent["id"]), None)
    others = [m for m in final if m["agentId"] != agent["id"]]
    prompt = prompts.MEMORY_PROMPT.format(
        own=f"[{own['stance']}] {own['keyPoint']}" if own else "(none)",
        others="\n".join(f"- {m['agentName']} [{m['stance']}]: {m['keyPoint']}" for m in others) or "(none)",
        count=ctx.memory_notes,
    )
    return [SystemMessage(seat_system(agent, ctx, state)), HumanMessage(prompt)]


def keep_notes(state: MemoryInput, ctx: RoundTableContext, notes: MemoryNotes) -> dict[str, Any]:
    agent = state["agent"]
    kept = [n.strip() for n in notes.notes if n.strip()][: ctx.memory_notes]
    return {"memories": [{"agentId": agent["id"], "notes": kept}]}


# Write a few short notes of what this agent learned in the debate (none when its answer is unreadable).
form_memories = synthesize_node(
    schema=MemoryNotes, prompt=memory_prompt, shape=keep_notes, context=RoundTableContext,
    fallback=lambda state, exc: MemoryNotes(notes=[]), model=lambda state: state["agent"].get("model"),
    temperature=0.2, label=lambda state: f"roundtable:memory:{state['agent']['id']}", what="memory notes",
)
form_memories.__name__ = "form_memories"
