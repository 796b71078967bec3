"""Multi-agent debate (Du et al. 2023): k agents answer a question on their own, then for r rounds each reads
the others' latest answers and revises its own. The caller reads the last round's answers (and usually
takes their majority).

    ask_agents -> agent_answer x k (Send) -> close_round -> steer -> ask_agents ... | arbitrate? | END

With `arbitrators` in the context, an arbitrator then writes one answer from the last round's,
anonymised (the `arbitrate` node the panel uses); without them the graph ends after the last round.

Each agent sees its own previous answer and the others' from the previous round only, so a prompt's
size does not grow with the number of rounds. `parley eval` uses this graph as its `debate` method.

After each round the boundary (`steer`, `nodes.steer`) takes in what a person sent (added to the question
from the next round on), waits when the run asked to (`await: "after_round"`) and goes to the end (or the
arbitrator) on `end` or a budget that holds no more rounds; with no steering and no budget it passes.

With an `answer_rule` in the context (a checkable answer: `nodes.answers`), the majority of the first answers is
recorded as `first_vote` the moment round 0 closes: the vote the debate rounds must beat, at no extra cost.

    from parley.graphs.multiagent_debate import MultiAgentDebateContext, graph
    out = await graph.ainvoke({"question": "What is 3+4*5?"}, context=MultiAgentDebateContext(agents=3, rounds=2))
    out["final_answers"]
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from langchain_core.messages import BaseMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send
from typing_extensions import TypedDict  # as `nodes.steer.SteerState`, which the state extends

from parley.llm.failures import MODEL_RETRY
from parley.nodes.answers import parse_rule, vote_record
from parley.nodes.arbitrate import arbitrate, content_text
from parley.nodes.context import RunContext
from parley.nodes.fan_out import FanOut
from parley.nodes.prompts import multiagent_debate as prompts
from parley.nodes.revise import revision_messages as peer_revision
from parley.nodes.steer import SteerState, boundary, guidance_lines

__all__ = ["MultiAgentDebateContext", "build_multiagent_debate_graph", "graph"]


@dataclass(kw_only=True)
class MultiAgentDebateContext(RunContext):
    """Per-run knobs: how many agents, how many revision rounds, and how each agent samples.

    `agent_models` are dealt to the seats in turn (agent i gets `agent_models[i % len]`); when empty,
    every agent uses the run's model. Agents sample at `temperature` so that agents of one model start
    from different answers, which is what gives the debate something to reconcile.
    """

    agents: int = 3
    rounds: int = 1
    agent_models: list[str] | None = None
    temperature: float | None = 0.7
    max_tokens: int | None = 512
    arbitrators: list[str] | None = None  # when set, the last round's answers are arbitrated into `answer`
    arbitrator_timeout: float | None = None
    answer_rule: str | None = None  # how answers are read (`nodes.answers.parse_rule`): records `first_vote`

    def agent_model(self, agent: int) -> str | None:
        return self.agent_models[agent % len(self.agent_models)] if self.agent_models else None


def debate_context(runtime: Runtime | None) -> MultiAgentDebateContext:
    """The run's MultiAgentDebateContext (see `RunContext.of`)."""
    return MultiAgentDebateContext.of(runtime)


# --- state ----------------------------------------------------------------------------------


class DebateInput(TypedDict):
    question: str  # sent as it is: add any answer-format instructions to it


class DebateOutput(TypedDict, total=False):
    final_answers: list[str]  # the last round's answers, in agent order
    answers: list[dict[str, Any]]  # every answer of every round: {agent, round, model, content}
    answer: str  # the arbitrated answer (with `arbitrators` only)
    arbitrator: str  # the arbitrator that gave it
    first_vote: dict[str, Any]  # with `answer_rule`: the majority of round 0's answers (`nodes.answers.vote_record`)
    attempts: list[dict[str, Any]]  # arbitrator candidates that failed first: {model, role, error, detail, partial}
    human: list[dict[str, Any]]  # what a person sent during the debate, each with the `round` that first saw it
    stopped_by: str  # why the debate ended before its last round: user, budget
    consumed: list[str]  # the ids of the inputs its boundaries took in


class DebateState(DebateInput, DebateOutput, SteerState, total=False):
    round: int  # the round to ask next
    answers: Annotated[list[dict[str, Any]], operator.add]


class AgentTask(TypedDict):
    """What one agent's turn receives through `Send`."""

    question: str
    agent: int
    round: int
    own: str | None  # this agent's answer in the previous round
    others: list[str]  # the other agents' answers in the previous round
    human: list[dict[str, Any]]  # what a person sent during the debate (`nodes.steer`)


# --- nodes ----------------------------------------------------------------------------------


# One `agent_answer` branch per agent, every one needed (a failed agent fails the round).
AGENTS = FanOut(node="agent_answer", results_key="answers")


def agent_tasks(state: DebateState, runtime: Runtime) -> list[AgentTask]:
    """Every agent's turn: the question alone in round 0, with the previous round's answers after."""
    ctx = debate_context(runtime)
    if ctx.agents < 1 or ctx.rounds < 0:
        raise ValueError(f"a debate needs at least one agent and no negative rounds (got {ctx.agents}, {ctx.rounds})")
    round_number = state.get("round", 0)
    previous = {a["agent"]: a["content"] for a in state.get("answers") or [] if a["round"] == round_number - 1}
    return [
        AgentTask(
            question=state["question"], agent=agent, round=round_number, own=previous.get(agent),
            others=[previous[other] for other in sorted(previous) if other != agent], human=state.get("human") or [],
        )
        for agent in range(ctx.agents)
    ]


ask_agents = AGENTS.dispatch(agent_tasks, name="ask_agents", doc="Send every agent its turn at once.")


def revision_messages(task: AgentTask, *, prompt_budget: int | None) -> list[BaseMessage]:
    """An agent's prompt: the question, then (after round 0) its own last answer and the others' to weigh
    (`nodes.revise.revision_messages`, cut to the `prompt_budget`)."""
    own = None if task["round"] == 0 else task["own"]
    question = task["question"]
    if task.get("human"):
        question = prompts.GUIDANCE.format(question=question, guidance=guidance_lines(task["human"]))
    return peer_revision(question, own, task["others"], prompt_budget=prompt_budget)


async def agent_answer(task: AgentTask, runtime: Runtime) -> dict[str, Any]:
    """Answer the question as one agent, revising its previous answer in the light of the others'."""
    ctx = debate_context(runtime)
    model = ctx.agent_model(task["agent"])
    messages = revision_messages(task, prompt_budget=ctx.factory.prompt_budget(model, ctx.max_tokens))
    chat = ctx.chat(model, temperature=ctx.temperature, max_tokens=ctx.max_tokens,
                    label=f"debate:{task['round']}:{task['agent']}")
    reply = await chat.ainvoke(messages)
    answer = {"agent": task["agent"], "round": task["round"], "model": ctx.model_id(model),
              "content": content_text(reply.content).strip()}
    get_stream_writer()({"event": "answer", **answer})
    return {"answers": [answer]}


def close_round(state: DebateState, runtime: Runtime) -> dict[str, Any]:
    """Close the round that just ended: its answers become the final ones so far, and the next round is due.
    Closing round 0 with an answer rule records the first answers' majority (`first_vote`)."""
    finished = max(a["round"] for a in state["answers"])
    final = sorted((a for a in state["answers"] if a["round"] == finished), key=lambda a: a["agent"])
    update: dict[str, Any] = {"round": finished + 1, "final_answers": [a["content"] for a in final]}
    rule = debate_context(runtime).answer_rule
    if finished == 0 and rule:
        update["first_vote"] = vote_record(update["final_answers"], parse_rule(rule))
        get_stream_writer()({"event": "first_vote", **update["first_vote"]})
    return update


def rounds_left(state: DebateState, ctx: MultiAgentDebateContext) -> bool:
    """Whether a revision round is still to come."""
    return state["round"] <= ctx.rounds


# The boundary after each round (`nodes.steer`).
steer = boundary(
    at="after_round", context=MultiAgentDebateContext, position=lambda state: state["round"] - 1, more=rounds_left,
    round=lambda state: state["round"],
    doc="Take in what a person sent after a round; wait for them if asked; stop for `end` or the budget.",
)


def next_step(state: DebateState, runtime: Runtime) -> list[Send] | Literal["arbitrate", "__end__"]:
    """Another revision round, or (once `rounds` revisions have been made, or the boundary stopped the debate) the
    arbitrator, if any, or the end."""
    ctx = debate_context(runtime)
    if state.get("stopped_by") or not rounds_left(state, ctx):
        return "arbitrate" if ctx.arbitrators else END
    return ask_agents(state, runtime)


def final_round(state: DebateState) -> list[dict[str, Any]]:
    """The last round's answers as the arbitrator reads them: `{model, model_id, answer}` in agent order."""
    finished = state["round"] - 1
    final = sorted((a for a in state["answers"] if a["round"] == finished), key=lambda a: a["agent"])
    return [{"model": f"agent {a['agent'] + 1}", "model_id": a["model"], "answer": a["content"]} for a in final]


arbitrate_debate = arbitrate(
    candidates=lambda state, ctx: ctx.arbitrators or [],
    timeout=lambda ctx: ctx.arbitrator_timeout,
    context=MultiAgentDebateContext,
    messages=lambda state: [{"role": "user", "content": state["question"]}],
    answers=final_round,
)


# --- wiring ---------------------------------------------------------------------------------


def build_multiagent_debate_graph() -> StateGraph:
    """Return Du et al.'s multi-agent debate as an uncompiled `StateGraph`: agents answer, then revise in rounds.

    Its input is `{"question": ...}`; its output has `final_answers` (each agent's last answer) and, with
    `arbitrators` in the context, the arbitrated `answer`. Its knobs are the `MultiAgentDebateContext` (`agents`,
    `rounds`, `agent_models`, ...).

    Returns:
        The `StateGraph` builder, not yet compiled.

    Example:
        ```python
        # docs/python.md, usage.py: two agents answer, then revise once after reading each other
        graph = parley.build_multiagent_debate_graph().compile()
        out = await graph.ainvoke({"question": "What is 17 * 3?"},
                                  context=parley.MultiAgentDebateContext(agents=2, rounds=1))
        out["final_answers"]
        ```
    """
    builder = StateGraph(DebateState, context_schema=MultiAgentDebateContext, input_schema=DebateInput,
                         output_schema=DebateOutput)
    builder.add_node("agent_answer", agent_answer, retry_policy=MODEL_RETRY)
    builder.add_node("close_round", close_round)
    builder.add_node("steer", steer)
    builder.add_node("arbitrate", arbitrate_debate)
    builder.add_conditional_edges(START, ask_agents, ["agent_answer"])
    builder.add_edge("agent_answer", "close_round")
    builder.add_edge("close_round", "steer")
    builder.add_conditional_edges("steer", next_step, ["agent_answer", "arbitrate", END])
    builder.add_edge("arbitrate", END)
    return builder


graph = build_multiagent_debate_graph().compile(name="multiagent_debate")
