"""The methods an evaluation compares, each built from Parley's own model layer and graphs.

- `single`: one answer at temperature 0.
- `self-consistency`: k sampled answers, majority vote (Wang et al. 2022).
- `debate`: `graphs.multiagent_debate` (Du et al. 2023): k agents, r revision rounds, majority of the last round.
- `panel`: `graphs.panel` in debate mode: k panelists answer, an arbitrator writes the final answer.
- `panel:vote`, `panel:rank`, `panel:best-of-n`: the same panel deciding by that rule (`graphs.panel.rules`):
  the majority (ties to the arbitrator), the panelists' Borda count of each other's answers, a judge's pick in
  both reading orders. The run's model arbitrates ties and judges.
- `adaptive`: `panel` under adaptive depth (`depth: "adaptive"`): two seats answer first; when they agree
  (`nodes.analysis.agreement`) the first's answer is the attempt's, else the rest of the panel answers and the run's
  model arbitrates; the path taken is recorded.
- `self-moa`: Self-MoA (Li et al. 2025): k samples of the run's model, which then writes the final answer from
  them (the panel resampling one model, `synthesis`).
- `roundtable`: `graphs.roundtable` with k solver agents (and its devil's advocate) for up to r debate rounds;
  the synthesis' `recommendedAction` is read as the answer.

`debate` and `roundtable` also record the round-0 vote, the majority of the agents' first answers under the
task's rule (`first_vote`): the free baseline their debate rounds must beat.
- `workflow:<path>`: a designer workflow file (`designer/examples/multiagent-debate.json`, say). It receives the
  question in its state key `question` (and the rule's name in `rule`, when it declares that key) and its
  state key `answer` (a string) is read by the task's rule. Its own nodes fix its models and knobs; the
  options above do not reach it.

Every method takes the question as `Task.prompt` words it and a `RunContext` whose ledger collects the
item's usage; it returns what it answered and the answer the task's rule reads from it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from functools import cache
from pathlib import Path

from langchain_core.messages import HumanMessage

from parley.core.limits import ADAPTIVE_FIRST_SEATS
from parley.designer import WorkflowContext, compile_workflow, prepare_input, validate_workflow
from parley.designer.spec import WorkflowSpec
from parley.evals import prompts
from parley.nodes.answers import AnswerRule, majority_answer
from parley.graphs.multiagent_debate import MultiAgentDebateContext
from parley.graphs.multiagent_debate import graph as debate_graph
from parley.graphs.panel import PanelContext
from parley.graphs.panel import graph as panel_graph
from parley.graphs.panel.rules import chosen_text
from parley.graphs.roundtable import RoundTableContext
from parley.graphs.roundtable import graph as roundtable_graph
from parley.nodes.context import RunContext
from parley.nodes.arbitrate import content_text

__all__ = ["ADAPTIVE_MIN_AGENTS", "METHODS", "PANEL_METHODS", "WORKFLOW_PREFIX", "Attempt", "MethodOptions", "describe",
           "method_of", "workflow_spec"]


@dataclass(frozen=True)
class MethodOptions:
    """The knobs methods share; one set per run, recorded with its results.

    `models` are the multi-agent methods' agents, dealt in turn to the seats (the run's model when
    empty); `samples` is self-consistency's k.
    """

    agents: int = 3
    rounds: int = 1
    samples: int = 6
    temperature: float = 0.7
    max_tokens: int = 512
    models: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Attempt:
    """One method's answer to one item: the text the answer was read from, the answer, any votes, (for the
    methods that debate in rounds) the round-0 vote (`nodes.answers.vote_record`), and (for `adaptive`) the panel's
    report of the path it took (`{path: agreed | escalated, agreement, threshold, firstSeats, seats}`)."""

    response: str
    prediction: str | None
    votes: list[str | None] | None = None
    tied: bool = False
    first_vote: dict[str, Any] | None = None
    adaptive: dict[str, Any] | None = None


Method = Callable[[str, AnswerRule, RunContext, MethodOptions], Awaitable[Attempt]]


async def single(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions) -> Attempt:
    """Ask once, greedily."""
    reply = await ctx.chat(temperature=0.0, max_tokens=options.max_tokens, label="single").ainvoke(
        [HumanMessage(question)])
    text = content_text(reply.content)
    return Attempt(text, rule.extract(text))


async def self_consistency(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions) -> Attempt:
    """Sample `samples` answers at once and take their majority (ties: the first sample's of the tied)."""
    chat = ctx.chat(temperature=options.temperature, max_tokens=options.max_tokens, label="self-consistency")
    replies = await asyncio.gather(*(chat.ainvoke([HumanMessage(question)]) for _ in range(options.samples)))
    ballot = majority_answer([content_text(r.content) for r in replies], rule)
    return Attempt(ballot.text, ballot.vote.answer, ballot.votes, ballot.vote.tied)


async def debate(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions) -> Attempt:
    """Du et al.'s debate; the majority of the last round's answers (ties: the lowest-numbered agent's)."""
    context = MultiAgentDebateContext(
        **ctx.carried(), agents=options.agents, rounds=options.rounds,
        agent_models=options.models or None, temperature=options.temperature, max_tokens=options.max_tokens,
        answer_rule=rule.name,
    )
    result = await debate_graph.ainvoke({"question": question}, context=context)
    ballot = majority_answer(result["final_answers"], rule)
    return Attempt(ballot.text, ballot.vote.answer, ballot.votes, ballot.vote.tied, result.get("first_vote"))


async def _panel(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions, *, decide: str,
                 models: list[str] | None = None, depth: str = "full") -> Attempt:
    """A panel of `agents` seats of `models` (the `--models`, else the run's model resampled) deciding by the rule
    `decide`, at `depth` (`graphs.panel.PanelInput`); the run's model arbitrates (and judges)."""
    context = PanelContext(**ctx.carried())
    result = await panel_graph.ainvoke({
        "messages": [{"role": "user", "content": question}],
        "models": models or options.models or [ctx.model_id()],
        # The evaluator chose these models on purpose: a list short of families is resampled, not refused.
        "allow_same_family": True,
        "arbitrators": [ctx.model_id()],
        "panel_size": options.agents,
        "mode": "debate",
        "temperature": options.temperature,
        "max_tokens": options.max_tokens,
        "min_successes": min(2, options.agents),
        "rule": decide,
        "answer_rule": rule.name if decide == "vote" else None,
        "depth": depth,
    }, context=context)
    # A chosen answer is read as its panelist wrote it, without the note its rule adds (a tally has numbers too).
    text = chosen_text(result["answer"], result.get("decision"))
    return Attempt(text, rule.extract(text), adaptive=result.get("adaptive"))


async def panel(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions) -> Attempt:
    """A panel of `agents` answers; the run's model arbitrates. One model may fill several seats."""
    return await _panel(question, rule, ctx, options, decide="synthesis")


async def panel_vote(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions) -> Attempt:
    """A panel of `agents` answers; the majority under the task's rule wins, a tie goes to the run's model."""
    return await _panel(question, rule, ctx, options, decide="vote")


async def panel_rank(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions) -> Attempt:
    """A panel of `agents` answers, then each ranks the others' answers; the Borda count's winner is the answer."""
    return await _panel(question, rule, ctx, options, decide="rank")


async def panel_best_of_n(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions) -> Attempt:
    """A panel of `agents` answers; the run's model picks the best, reading them in both orders."""
    return await _panel(question, rule, ctx, options, decide="best-of-n")


# Adaptive depth asks its first seats, then the rest: with no more seats than those, there is nothing to skip.
ADAPTIVE_MIN_AGENTS = ADAPTIVE_FIRST_SEATS + 1


async def adaptive(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions) -> Attempt:
    """`panel` at adaptive depth: two of the `agents` seats answer first and settle it when they agree; else the rest
    answer and the run's model arbitrates. The attempt records the path (`adaptive`).

    Raises:
        ValueError: fewer than `ADAPTIVE_MIN_AGENTS` seats, where adaptive depth would be the full panel.
    """
    if options.agents < ADAPTIVE_MIN_AGENTS:
        raise ValueError(f"adaptive depth asks {ADAPTIVE_FIRST_SEATS} panelists first and the rest only when they "
                         f"disagree: it needs at least {ADAPTIVE_MIN_AGENTS} panelists, not {options.agents}")
    return await _panel(question, rule, ctx, options, decide="synthesis", depth="adaptive")


async def self_moa(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions) -> Attempt:
    """`agents` samples of the run's model, which then writes the final answer from them (Self-MoA)."""
    return await _panel(question, rule, ctx, options, decide="synthesis", models=[ctx.model_id()])


async def roundtable(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions) -> Attempt:
    """A round table of `agents` solvers (plus its devil's advocate); the recommended action is the answer."""
    seats = prompts.ROUNDTABLE_SOLVERS
    agents = [
        {"id": f"solver-{i + 1}", "name": seats[i % len(seats)][0], "role": "Problem solver",
         "persona": seats[i % len(seats)][1], "isDevilsAdvocate": False, "memories": [], "documents": [],
         "model": options.models[i % len(options.models)] if options.models else None}
        for i in range(options.agents)
    ]
    context = RoundTableContext(
        **ctx.carried(), max_rounds=options.rounds, max_seats=options.agents,
        max_tokens=options.max_tokens, temperature=options.temperature, answer_rule=rule.name,
    )
    result = await roundtable_graph.ainvoke(
        {"question": question, "topic": prompts.ROUNDTABLE_TOPIC, "agents": agents}, context=context)
    action = result["synthesis"]["recommendedAction"]
    return Attempt(action, rule.extract(action), first_vote=result.get("first_vote"))


METHODS: dict[str, Method] = {
    "single": single,
    "self-consistency": self_consistency,
    "debate": debate,
    "panel": panel,
    "panel:vote": panel_vote,
    "panel:rank": panel_rank,
    "panel:best-of-n": panel_best_of_n,
    "adaptive": adaptive,
    "self-moa": self_moa,
    "roundtable": roundtable,
}
# The methods that seat a panel (`--agents` panelists, 2-8); `self-moa`'s k is matched under `--match-budget`.
PANEL_METHODS = ("panel", "panel:vote", "panel:rank", "panel:best-of-n", "adaptive", "self-moa")


WORKFLOW_PREFIX = "workflow:"


@cache
def workflow_spec(path: str) -> WorkflowSpec:
    """The checked workflow a `workflow:<path>` method runs.

    Raises:
        ValueError: the file cannot be read, is not a valid workflow (`WorkflowError`), or does not declare
            the state keys `question` and `answer`.
    """
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read workflow {path}: {exc}") from exc
    spec = validate_workflow(document)
    missing = [key for key in ("question", "answer") if key not in spec.state]
    if missing:
        raise ValueError(f"workflow {path} must declare the state key(s) {', '.join(missing)}: a method's workflow "
                         "reads the question from `question` and writes its answer to `answer`")
    return spec


@cache
def _workflow_graph(path: str) -> Any:
    return compile_workflow(workflow_spec(path))


def workflow_method(path: str) -> Method:
    """The method running the workflow file at `path` (see the module's docstring)."""
    spec = workflow_spec(path)

    async def workflow(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions) -> Attempt:
        """Run the workflow on the question; its `answer` is read by the rule."""
        values = {"question": question, **({"rule": rule.name} if "rule" in spec.state else {})}
        context = WorkflowContext(**ctx.carried())
        final = await _workflow_graph(path).ainvoke(prepare_input(spec, values), context=context)
        answer = final.get("answer")
        text = answer if isinstance(answer, str) else "" if answer is None else json.dumps(answer, ensure_ascii=False)
        return Attempt(text, rule.extract(text))

    return workflow


def method_of(name: str) -> Method:
    """The method a `--methods` entry names: a built-in (`METHODS`) or `workflow:<path>`.

    Raises:
        KeyError: no such method.
        ValueError: a workflow file that cannot be used (see `workflow_spec`).
    """
    if name.startswith(WORKFLOW_PREFIX):
        return workflow_method(name.removeprefix(WORKFLOW_PREFIX))
    return METHODS[name]


def describe(name: str, options: MethodOptions) -> str:
    """The method with its knobs, as the results table names it (`debate (3 agents × 1 round)`)."""
    if name.startswith(WORKFLOW_PREFIX):
        path = name.removeprefix(WORKFLOW_PREFIX)
        return f"workflow {workflow_spec(path).name} ({Path(path).name})"
    agents, rounds = options.agents, options.rounds
    plural = "" if rounds == 1 else "s"
    return {
        "single": "single",
        "self-consistency": f"self-consistency (k={options.samples})",
        "debate": f"debate ({agents} agents × {rounds} round{plural})",
        "panel": f"panel ({agents} panelists + arbitrator)",
        "panel:vote": f"panel:vote ({agents} panelists, majority; ties to the arbitrator)",
        "panel:rank": f"panel:rank ({agents} panelists ranking each other, Borda count)",
        "panel:best-of-n": f"panel:best-of-n ({agents} panelists, a judge in both orders)",
        "adaptive": f"adaptive ({ADAPTIVE_FIRST_SEATS} panelists; all {agents} + arbitrator on disagreement)",
        "self-moa": f"self-moa ({agents} samples + aggregator)",
        "roundtable": f"roundtable ({agents} agents + devil's advocate, ≤{rounds} round{plural})",
    }[name]
