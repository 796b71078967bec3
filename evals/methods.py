"""The methods an evaluation compares, each built from Parley's own model layer and graphs.

- `single`: one answer at temperature 0.
- `self-consistency`: k sampled answers, majority vote (Wang et al. 2022).
- `debate`: `graphs.multiagent_debate` (Du et al. 2023): k agents, r revision rounds, majority of the last round.
- `panel`: `graphs.panel` in debate mode: k panelists answer, an arbitrator writes the final answer.
- `roundtable`: `graphs.roundtable` with k solver agents (and its devil's advocate) for up to r debate rounds;
  the synthesis' `recommendedAction` is read as the answer.
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

from designer import WorkflowContext, compile_workflow, prepare_input, validate_workflow
from designer.spec import WorkflowSpec
from evals import prompts
from nodes.answers import AnswerRule, majority_answer
from graphs.multiagent_debate import MultiAgentDebateContext
from graphs.multiagent_debate import graph as debate_graph
from graphs.panel import PanelContext
from graphs.panel import graph as panel_graph
from graphs.roundtable import RoundTableContext
from graphs.roundtable import graph as roundtable_graph
from nodes.context import RunContext
from nodes.arbitrate import content_text

__all__ = ["METHODS", "WORKFLOW_PREFIX", "Attempt", "MethodOptions", "describe", "method_of", "workflow_spec"]


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
    """One method's answer to one item: the text the answer was read from, the answer, and any votes."""

    response: str
    prediction: str | None
    votes: list[str | None] | None = None
    tied: bool = False


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
        models=ctx.models, model=ctx.model, ledger=ctx.ledger, agents=options.agents, rounds=options.rounds,
        agent_models=options.models or None, temperature=options.temperature, max_tokens=options.max_tokens,
    )
    result = await debate_graph.ainvoke({"question": question}, context=context)
    ballot = majority_answer(result["final_answers"], rule)
    return Attempt(ballot.text, ballot.vote.answer, ballot.votes, ballot.vote.tied)


async def panel(question: str, rule: AnswerRule, ctx: RunContext, options: MethodOptions) -> Attempt:
    """A panel of `agents` answers; the run's model arbitrates. One model may fill several seats."""
    context = PanelContext(models=ctx.models, model=ctx.model, ledger=ctx.ledger)
    result = await panel_graph.ainvoke({
        "messages": [{"role": "user", "content": question}],
        "models": options.models or [ctx.model_id()],
        # The evaluator chose these models on purpose: a list short of families is resampled, not refused.
        "allow_same_family": True,
        "arbitrators": [ctx.model_id()],
        "panel_size": options.agents,
        "mode": "debate",
        "temperature": options.temperature,
        "max_tokens": options.max_tokens,
        "min_successes": min(2, options.agents),
    }, context=context)
    return Attempt(result["answer"], rule.extract(result["answer"]))


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
        models=ctx.models, model=ctx.model, ledger=ctx.ledger, max_rounds=options.rounds, max_seats=options.agents,
        max_tokens=options.max_tokens, temperature=options.temperature,
    )
    result = await roundtable_graph.ainvoke(
        {"question": question, "topic": prompts.ROUNDTABLE_TOPIC, "agents": agents}, context=context)
    action = result["synthesis"]["recommendedAction"]
    return Attempt(action, rule.extract(action))


METHODS: dict[str, Method] = {
    "single": single,
    "self-consistency": self_consistency,
    "debate": debate,
    "panel": panel,
    "roundtable": roundtable,
}


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
        context = WorkflowContext(models=ctx.models, model=ctx.model, ledger=ctx.ledger)
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
        "roundtable": f"roundtable ({agents} agents + devil's advocate, ≤{rounds} round{plural})",
    }[name]
