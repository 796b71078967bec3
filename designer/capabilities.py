"""The workflow node types backed by Parley's capability nodes: `select_opponent`, `synthesize`,
`score_convergence`, `fan_out`, `arbitrate`, `judge` and `vote`.

Each renders its inputs from workflow state, runs the capability node the modes are built of (the duel's
`select_opponent` and `judge`, the round table's `synthesize` and `score_convergence`, the panel's and the
multi-agent debate's `fan_out` and `arbitrate`, the evaluation's majority vote) with its settings taken from
the node's config, and writes the result to the node's output key. The node's own stream events (the
opponent once cast, each branch's answer, the convergence score) come out as `progress` events under the
workflow node's id, as a mode node's do; streamed tokens (the arbitrator's) as `chunk` events.

`fan_out` and `judge` send their branches on LangGraph's `Send`: each is a small graph of its own
(dispatch → branch × N → gather) run as the workflow node's nested graph.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated, Any, TypedDict

from langchain_core.messages import BaseMessage, SystemMessage
from langgraph.graph import END, START, StateGraph

from parley.core.limits import DUEL_CONCLUSION_MAX_CHARS
from parley.designer.context import WorkflowContext
from parley.designer.modes import DEFAULT_USER_PROFILE, NodeInputError, run_nested, tag_event, user_profile_input
from parley.designer.nodes import NodeFn, prompt_of
from parley.designer.schemas import model_from_schema
from parley.designer.spec import (
    ArbitrateNode,
    AwaitNode,
    FanOutNode,
    JudgeNode,
    ScoreConvergenceNode,
    SelectOpponentNode,
    SynthesizeNode,
    VoteNode,
)
from parley.designer.templates import render
from parley.graphs.duel import prompts as duel_prompts
from parley.graphs.duel.personas import fallback_opponent
from parley.llm.failures import MODEL_RETRY, classify_failure, describe_failure, is_model_failure
from parley.nodes.answers import AnswerRule, Ballot, parse_rule
from parley.nodes.arbitrate import arbitrate, content_text
from parley.nodes.convergence import score_convergence
from parley.nodes.events import EVENT_SINK, event_writer, relay
from parley.nodes.fan_out import FanOut
from parley.nodes.judge import JUDGE_RETRY, agreed_winner, judge, judge_both_orders, verdicts_by_order
from parley.nodes.prompts import multiagent_debate as debate_prompts
from parley.nodes.revise import revision_messages
from parley.nodes.select_opponent import select_opponent
from parley.nodes.steer import boundary
from parley.nodes.synthesize import synthesize
from parley.nodes.vote import vote


@contextmanager
def events_under(node_id: str) -> Iterator[None]:
    """Send the events of the capability node run inside this block as the workflow node's own."""
    write = event_writer()
    token = EVENT_SINK.set(lambda event: write(relay(event, tag_event(node_id, event))))
    try:
        yield
    finally:
        EVENT_SINK.reset(token)


def select_opponent_node(node: SelectOpponentNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `select_opponent` spec: the duel's caster, on the node's model and temperature."""
    cast = select_opponent(
        system=duel_prompts.SELECT_OPPONENT_SYSTEM, prompt=duel_prompts.SELECT_OPPONENT_PROMPT,
        fallback=fallback_opponent, model_role=None, temperature_role=None, temperature=node.config.temperature,
        label=node.id,
    )

    async def choose_opponent(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Cast an opponent for the rendered topic and write its profile."""
        profile = user_profile_input(node.config.user_profile, node.inputs.user_profile, state, defaults)
        with events_under(node.id):
            out = await cast({"topic": render(node.inputs.topic, state, defaults), "user_profile": profile}, runtime)
        return {node.output_key: out["opponent_profile"]}

    choose_opponent.__wrapped__ = cast  # type: ignore[attr-defined]
    return choose_opponent


def synthesize_node(node: SynthesizeNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `synthesize` spec: a structured answer, or the config's fallback when unreadable."""
    config = node.config
    schema = model_from_schema(config.output_schema, node.id)
    return synthesize(
        schema=schema, prompt=prompt_of(node, defaults),
        shape=lambda state, ctx, draft: {node.output_key: draft.model_dump(mode="json")},
        fallback=None if config.fallback is None else lambda state, exc: schema.model_validate(config.fallback),
        temperature=config.temperature, label=node.id, what=f"synthesis of node {node.id!r}",
    )


def score_convergence_node(node: ScoreConvergenceNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `score_convergence` spec: the round table's score, at the config's threshold."""
    score = score_convergence(threshold_role=None, threshold=node.config.threshold)

    async def measure(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Score the rendered transcript's round and write the score and whether it converged."""
        transcript = render(node.inputs.transcript, state, defaults, raw=True)
        if not isinstance(transcript, list) or not all(isinstance(m, Mapping) for m in transcript):
            raise NodeInputError(f"inputs.transcript must give a list of messages, not {type(transcript).__name__}")
        if node.inputs.round:
            round_number = render(node.inputs.round, state, defaults, raw=True)
            if isinstance(round_number, bool) or not isinstance(round_number, int):
                raise NodeInputError(f"inputs.round must give an integer, not {round_number!r}")
        else:
            round_number = max((int(m.get("roundNumber", 0)) for m in transcript), default=0)
        with events_under(node.id):
            out = await score({"transcript": transcript, "round": round_number}, runtime)
        record = out["rounds"][0]
        return {node.output_key: {"roundNumber": record["roundNumber"], "convergenceScore": record["convergenceScore"],
                                  "converged": out["converged"], "usage": record["usage"]}}

    measure.__wrapped__ = score  # type: ignore[attr-defined]
    return measure


# --- answers read from state ----------------------------------------------------------------


def answer_list(value: Any, slot: str) -> list[dict[str, Any]]:
    """The answers a placeholder gave, as `{index, label, model?, content}`: a list of texts, or a fan_out's
    results (whose failed branches, `success: false`, are left out)."""
    if not isinstance(value, list):
        raise NodeInputError(f"inputs.{slot} must give a list of answers, not {type(value).__name__}")
    answers = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            answers.append({"index": i, "label": f"answer {i + 1}", "content": item})
        elif isinstance(item, Mapping) and isinstance(item.get("content"), str):
            if item.get("success", True) is False:
                continue
            index = item.get("branch", i)
            answers.append({"index": index, "label": f"branch {int(index) + 1}", "model": item.get("model"),
                            "content": item["content"]})
        elif not (isinstance(item, Mapping) and item.get("success") is False):
            raise NodeInputError(f"inputs.{slot}[{i}] must be a text or a fan_out result {{branch, content}}")
    return answers


# --- fan_out ----------------------------------------------------------------------------------


class _FanOutState(TypedDict, total=False):
    tasks: list[dict[str, Any]]
    results: Annotated[list[dict[str, Any]], operator.add]
    answers: list[dict[str, Any]]


def fan_out_node(node: FanOutNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `fan_out` spec: every branch asked at once on `Send`, gathered in branch order.

    With `inputs.previous`, branch i revises its own answer there after reading the others' (the prompt of
    `graphs.multiagent_debate`, `nodes.revise.revision_messages`); a branch with no previous answer is asked
    the prompt alone.
    """
    config = node.config
    tolerant = config.min_successes is not None
    revise_prompt = config.revise_prompt or debate_prompts.REVISE_PROMPT

    def failed(task: Mapping[str, Any], exc: BaseException) -> dict[str, Any]:
        return {"branch": task["branch"], "model": task["model_id"], "success": False,
                "error": classify_failure(exc), "detail": describe_failure(exc)}

    spread = FanOut(node="branch", results_key="results", timeout=config.timeout, min_successes=config.min_successes,
                    tolerate=is_model_failure if tolerant else None, failure=failed if tolerant else None,
                    index_key="branch")

    async def branch(task: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Ask one branch's model the prompt (or its revision) and record its answer."""
        ctx = WorkflowContext.of(runtime)
        model = task["model"]
        messages: list[BaseMessage] = [SystemMessage(task["system"])] if task["system"] else []
        messages += revision_messages(task["question"], task["own"], task["others"],
                                      prompt_budget=ctx.factory.prompt_budget(model, config.max_tokens),
                                      revise_prompt=revise_prompt)
        chat = ctx.chat(model, temperature=config.temperature, max_tokens=config.max_tokens,
                        label=f"{node.id}:{task['branch']}")
        reply = await chat.ainvoke(messages)
        answer = {"branch": task["branch"], "model": task["model_id"], "content": content_text(reply.content).strip()}
        event_writer()({"event": "answer", **answer})
        return {"results": [answer]}

    def gather(state: _FanOutState) -> dict[str, Any]:
        """Every branch's result in branch order (too few successes fail the node)."""
        return {"answers": spread.gather(state)}

    builder = StateGraph(_FanOutState, context_schema=WorkflowContext)
    builder.add_node("branch", branch, **spread.node_options(then="gather", retry=MODEL_RETRY))
    builder.add_node("gather", gather)
    builder.add_conditional_edges(START, spread.dispatch(lambda state: state["tasks"]), ["branch"])
    builder.add_edge("branch", "gather")
    builder.add_edge("gather", END)
    graph = builder.compile(name=f"{node.id}/fan_out")

    def model_of(index: int) -> str | None:
        return config.models[index % len(config.models)] if config.models else config.model

    async def fan_out(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Ask every branch at once and write their answers in branch order."""
        ctx = WorkflowContext.of(runtime)
        question = render(node.inputs.prompt, state, defaults)
        system = render(node.inputs.system, state, defaults) if node.inputs.system else None
        previous: dict[int, str] = {}
        if node.inputs.previous:
            answers = answer_list(render(node.inputs.previous, state, defaults, raw=True), "previous")
            previous = {int(a["index"]): a["content"] for a in answers}
        tasks = [
            {"branch": i, "model": model_of(i), "model_id": ctx.model_id(model_of(i)), "question": question,
             "system": system, "own": previous.get(i),
             "others": [previous[other] for other in sorted(previous) if other != i]}
            for i in range(node.branch_count())
        ]
        final = await run_nested(node.id, graph, {"tasks": tasks}, ctx)
        return {node.output_key: final.get("answers", [])}

    fan_out.nested_graph = graph  # type: ignore[attr-defined]  # what it runs (tests/test_architecture.py reads it)
    return fan_out


# --- arbitrate ------------------------------------------------------------------------------


def arbitrate_node(node: ArbitrateNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for an `arbitrate` spec: the panel's arbitrator over the rendered answers, anonymised."""
    config = node.config
    step = arbitrate(
        candidates=lambda state, ctx: config.arbitrators or [ctx.model_id()],
        timeout=lambda ctx: config.timeout,
        context=WorkflowContext,
        messages=lambda state: [{"role": "user", "content": state["question"]}],
    )

    async def arbitrate_answers(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Have the first arbitrator that answers write the best answer from the rendered ones."""
        answers = answer_list(render(node.inputs.answers, state, defaults, raw=True), "answers")
        if not answers:
            raise NodeInputError("inputs.answers gave no answers to arbitrate")
        shown = [{"model": a["label"], "model_id": a.get("model"), "answer": a["content"]} for a in answers]
        inner = {
            "question": render(node.inputs.question, state, defaults), "answers": shown,
            "system_prompt": render(node.inputs.system, state, defaults) if node.inputs.system else None,
            "arbitrator_prompt": config.prompt, "temperature": config.temperature, "max_tokens": config.max_tokens,
        }
        with events_under(node.id):
            out = await step(inner, runtime)
        return {node.output_key: out["answer"]}

    arbitrate_answers.__wrapped__ = step  # type: ignore[attr-defined]
    return arbitrate_answers


# --- judge ----------------------------------------------------------------------------------


@dataclasses.dataclass(kw_only=True)
class JudgeContext(WorkflowContext):
    """The knobs the duel's judge reads, from a `judge` node's config."""

    judge_model: str | None = None
    synthesis_temperature: float | None = 0.3
    conclusion_max_chars: int = DUEL_CONCLUSION_MAX_CHARS


class _JudgeState(TypedDict, total=False):
    topic: str
    user_profile: dict[str, Any]
    opponent_profile: dict[str, Any]
    messages: list[dict[str, Any]]
    verdicts: Annotated[list[dict[str, Any]], operator.add]


def _profile(template: str | None, state: Mapping[str, Any], defaults: Mapping[str, Any], fallback: dict[str, Any],
             slot: str) -> dict[str, Any]:
    if not template:
        return dict(fallback)
    value = render(template, state, defaults, raw=True)
    if isinstance(value, str):
        return {"name": value}
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        raise NodeInputError(f"inputs.{slot} must give a name or an object with a name, not {value!r}")
    return dict(value)


def judge_node(node: JudgeNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `judge` spec: the duel's judge, both orders at once on `Send`."""
    config = node.config
    builder = StateGraph(_JudgeState, context_schema=JudgeContext)
    builder.add_node("judge", judge(system=duel_prompts.JUDGE_SYSTEM, prompt=duel_prompts.JUDGE_PROMPT,
                                    unreadable=duel_prompts.UNREADABLE_VERDICT, context=JudgeContext, label=node.id),
                     retry_policy=JUDGE_RETRY)
    builder.add_conditional_edges(START, judge_both_orders, ["judge"])
    builder.add_edge("judge", END)
    graph = builder.compile(name=f"{node.id}/judge")

    async def judge_debate(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Judge the rendered debate in both orders; write the agreed winner and both verdicts."""
        messages = render(node.inputs.messages, state, defaults, raw=True)
        if not isinstance(messages, list) or not all(
                isinstance(m, Mapping) and m.get("role") in ("user", "opponent") and isinstance(m.get("content"), str)
                for m in messages):
            raise NodeInputError("inputs.messages must give a list of turns {role: user|opponent, content}")
        ctx = WorkflowContext.of(runtime)
        shared = {f.name: getattr(ctx, f.name) for f in dataclasses.fields(WorkflowContext)}
        context = JudgeContext(**shared, judge_model=config.model, synthesis_temperature=config.temperature,
                               conclusion_max_chars=config.conclusion_max_chars)
        payload = {
            "topic": render(node.inputs.topic, state, defaults), "messages": [dict(m) for m in messages],
            "user_profile": _profile(node.inputs.user_profile, state, defaults, DEFAULT_USER_PROFILE, "user_profile"),
            "opponent_profile": _profile(node.inputs.opponent_profile, state, defaults, {"name": "Opponent"},
                                         "opponent_profile"),
        }
        final = await run_nested(node.id, graph, payload, context)
        first, second = verdicts_by_order(final.get("verdicts") or [])
        return {node.output_key: {"winner": agreed_winner(first["winner"], second["winner"]),
                                  "verdicts": [first, second]}}

    judge_debate.nested_graph = graph  # type: ignore[attr-defined]
    return judge_debate


# --- vote -----------------------------------------------------------------------------------


def vote_node(node: VoteNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `vote` spec: the majority of the rendered answers under an answer rule (`nodes.vote`)."""

    def rule(state: dict[str, Any]) -> AnswerRule:
        name = render(node.inputs.rule, state, defaults) if node.inputs.rule else node.config.rule
        try:
            return parse_rule(name)
        except ValueError as exc:
            raise NodeInputError(f"inputs.rule: {exc}") from None

    def report(ballot: Ballot, reading: AnswerRule) -> None:
        event_writer()({"event": "progress", "node": node.id, "kind": "vote",
                        "data": {"rule": reading.name, "answer": ballot.vote.answer, "count": ballot.vote.count,
                                 "tied": ballot.vote.tied, "votes": ballot.votes}})

    count = vote(rule=rule, output_key=node.output_key, on_ballot=report,
                 answers=lambda state: [a["content"] for a in answer_list(
                     render(node.inputs.answers, state, defaults, raw=True), "answers")])

    async def vote_here(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Read every answer by the rule, take the majority, and write the first answer read as the winner."""
        return await count(state)

    return vote_here


# --- await ----------------------------------------------------------------------------------


def await_node(node: AwaitNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for an `await` spec: the boundary (`nodes.steer`) at this node, its events the node's own
    (`progress` with `kind` human, resumed, stopping); `output_key` gets the texts of the messages taken in."""
    step = boundary(
        at=node.id, context=WorkflowContext, always=node.config.wait == "always", more=lambda state, ctx: True,
        # Where the run stands: the inputs taken in so far (a pass after a wait has taken one more).
        position=lambda state: len(state.get("consumed") or []),
        doc="Take in what a person sent; wait for them here if told to; end early on `end` or the budget.",
    )

    async def steer_here(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Take in what a person sent, wait for them if told to, and note an early end (routed to `on_end`)."""
        with events_under(node.id):
            update = await step(state, runtime)
        if node.output_key:
            update[node.output_key] = [message["content"] for message in update.get("human") or []]
        return update

    steer_here.__wrapped__ = step  # type: ignore[attr-defined]
    return steer_here
