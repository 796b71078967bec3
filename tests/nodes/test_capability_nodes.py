"""The capability nodes on their own, on the scripted model server: fan_out, arbitrate, judge, select_opponent,
synthesize and score_convergence, and the helpers they share (ask_structured, the anonymiser)."""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel

from parley.evals.judge import build_judge_graph
from parley.graphs.duel import JUDGE_RETRY, DuelContext, pick_opponent
from parley.graphs.duel.personas import fallback_opponent
from parley.graphs.multiagent_debate import MultiAgentDebateContext
from parley.graphs.multiagent_debate import graph as debate_graph
from parley.llm.factory import ModelFactory
from parley.llm.failures import classify_failure, is_model_failure
from parley.llm.tools import ToolSet
from parley.nodes.anonymise import Anonymiser
from parley.nodes.arbitrate import AllModelsFailedError, InvalidStructuredAnswerError, arbitrate
from parley.nodes.context import RunContext
from parley.nodes.convergence import score_convergence
from parley.nodes.fan_out import FanOut, TooFewSuccessesError
from parley.nodes.structured import ask_structured, is_unreadable
from parley.nodes.synthesize import synthesize
from tests.support.duel import JUDGE_MARK, OPPONENT, SELECT_MARK, judgement

MODEL = "openai:gpt-4o-mini"


def context(parley_env, cls=RunContext, **knobs):
    return cls(models=ModelFactory(parley_env), model=MODEL, **knobs)


def one_node(name: str, node, state_schema: type = dict, *, retry=None):
    builder = StateGraph(state_schema)
    builder.add_node(name, node, retry_policy=retry)
    builder.add_edge(START, name)
    builder.add_edge(name, END)
    return builder.compile()


# --- fan_out ----------------------------------------------------------------------------------


class SpreadState(TypedDict, total=False):
    models: list[str]
    results: Annotated[list[dict[str, Any]], operator.add]
    gathered: list[dict[str, Any]]


def spread_graph(**settings):
    """ask (one branch per model) → gather; a branch asks its model to say hello."""

    async def ask(task: dict[str, Any], runtime) -> dict[str, Any]:
        if task["model"] == "broken":
            raise ValueError("a bug, not a model failure")
        reply = await runtime.context.chat(task["model"], label=f"branch:{task['index']}").ainvoke(
            [HumanMessage("Say hello")])
        return {"results": [{"index": task["index"], "success": True, "answer": reply.content}]}

    def failure(task, exc):
        return {"index": task["index"], "success": False, "error": classify_failure(exc)}

    spread = FanOut(node="ask", results_key="results", tolerate=is_model_failure, failure=failure, **settings)

    async def gather(state: SpreadState) -> dict[str, Any]:
        return {"gathered": spread.gather(state)}

    builder = StateGraph(SpreadState, context_schema=RunContext)
    builder.add_node("ask", ask, **spread.node_options(then="gather"))
    builder.add_node("gather", gather)
    builder.add_conditional_edges(
        START, spread.dispatch(lambda state: [{"index": i, "model": m} for i, m in enumerate(state["models"])]),
        ["ask"])
    builder.add_edge("ask", "gather")
    builder.add_edge("gather", END)
    return builder.compile()


async def test_fan_out_records_tolerated_failures_and_keeps_the_other_answers_in_task_order(parley_env, llm):
    llm.script(model="denied", status=401)
    out = await spread_graph(min_successes=2).ainvoke(
        {"models": ["openai:one", "openai:denied", "openai:three"]}, context=context(parley_env))
    assert [(r["index"], r["success"]) for r in out["gathered"]] == [(0, True), (1, False), (2, True)]
    assert out["gathered"][1]["error"] == "auth"
    assert out["gathered"][0]["answer"].startswith("one answer")


async def test_fan_out_with_too_few_successes_fails(parley_env, llm):
    llm.script(model="denied", status=401)
    with pytest.raises(TooFewSuccessesError, match="Only 2 of 3 branches succeeded"):
        await spread_graph(min_successes=3).ainvoke(
            {"models": ["openai:one", "openai:denied", "openai:three"]}, context=context(parley_env))


async def test_fan_out_fails_on_a_failure_outside_its_classes(parley_env, llm):
    with pytest.raises(ValueError, match="a bug"):
        await spread_graph(min_successes=1).ainvoke({"models": ["openai:one", "broken"]}, context=context(parley_env))


async def test_fan_out_times_a_branch_out_on_its_own(parley_env, llm):
    # The held answer never comes (the gate opens only at reset), so the branch's limit is what ends it.
    llm.script(model="stuck", reply="too late", hold="never")
    out = await spread_graph(min_successes=1, timeout=0.5).ainvoke({"models": ["openai:one", "openai:stuck"]}, context=context(parley_env))
    assert [(r["success"], r.get("error")) for r in out["gathered"]] == [(True, None), (False, "timeout")]


def test_fan_out_routes_each_task_to_its_node():
    spread = FanOut(node=lambda task: "b" if task["odd"] else "a")
    sends = spread.send([{"odd": False}, {"odd": True}])
    assert [s.node for s in sends] == ["a", "b"] and sends[1].arg == {"odd": True}
    with pytest.raises(ValueError, match="needs `failure`"):
        FanOut(node="a", tolerate=is_model_failure)


# --- arbitrate --------------------------------------------------------------------------------


class ArbiterState(TypedDict, total=False):
    messages: list[dict[str, Any]]
    answers: list[dict[str, Any]]
    arbitrators: list[str]
    answer: str
    arbitrator: str
    attempts: list[dict[str, Any]]


def arbiter_graph():
    node = arbitrate(candidates=lambda state, ctx: state["arbitrators"])
    return one_node("arbitrate", node, ArbiterState)


ANSWERS = [
    {"model": "openai:alpha", "answer": "As alpha, I say 4."},
    {"model": "openai:beta", "answer": "Four, says beta."},
]


async def test_arbitrate_falls_back_down_its_chain_and_hides_the_authors(parley_env, llm):
    llm.script(model="first-judge", status=503)  # transient: asked twice, then the next candidate
    llm.script(model="second-judge", reply="The answer is 4.")
    events = []
    out = None
    async for mode, data in arbiter_graph().astream(
            {"messages": [{"role": "user", "content": "2+2?"}], "answers": ANSWERS,
             "arbitrators": ["openai:first-judge", "openai:second-judge"]},
            context=context(parley_env), stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(data)
        else:
            out = data
    assert out["answer"] == "The answer is 4." and out["arbitrator"] == "openai:second-judge"
    assert [(a["model"], a["error"]) for a in out["attempts"]] == [("openai:first-judge", "server")]
    assert [e["event"] for e in events if e["event"] != "chunk"] == ["answering", "fallback", "answering"]
    asked = [r for r in llm.requests if r["model"] == "second-judge"][0]["messages"][-1]["content"]
    assert "### Answer A" in asked and "### Answer B" in asked
    assert "alpha" not in asked and "beta" not in asked and asked.count("[a panelist]") == 2


async def test_arbitrate_with_every_candidate_failing_says_why(parley_env, llm):
    llm.script(model="denied", status=401)
    with pytest.raises(AllModelsFailedError, match="denied: auth"):
        await arbiter_graph().ainvoke(
            {"messages": [{"role": "user", "content": "2+2?"}], "answers": ANSWERS, "arbitrators": ["openai:denied"]},
            context=context(parley_env))


class ToolArbiterState(ArbiterState, total=False):
    tools: dict[str, Any] | None
    response_format: dict[str, Any] | None
    tool_calls: list[dict[str, Any]]


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


async def test_arbitrate_is_offered_the_states_tools_and_holds_its_answer_to_the_states_format(parley_env, llm):
    graph = one_node("arbitrate", arbitrate(candidates=lambda state, ctx: ["openai:judge"]), ToolArbiterState)
    question = {"messages": [{"role": "user", "content": "Rain in Paris?"}], "answers": ANSWERS}
    llm.script(model="judge", tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}], with_tools=True)
    out = await graph.ainvoke({**question, "tools": ToolSet.from_request([WEATHER]).dump()},
                              context=context(parley_env))
    assert out["answer"] == "" and out["tool_calls"][0]["function"]["name"] == "get_weather"
    assert llm.requests[-1]["tools"] == [WEATHER]

    schema = {"type": "object", "properties": {"rain": {"type": "boolean"}}, "required": ["rain"]}
    llm.script(model="judge", json={"rain": "yes"}, times=1)  # not a boolean: repaired once
    out = await graph.ainvoke({**question, "response_format": {"type": "json_schema", "json_schema": {
        "name": "rain", "schema": schema}}}, context=context(parley_env))
    assert json.loads(out["answer"]) == {"rain": True} and "tool_calls" not in out
    first, repair = [r for r in llm.requests if r["model"] == "judge"][1:]
    assert "Write the final answer as JSON only" in first["messages"][0]["content"] and any(
        '"yes" is not of type "boolean"' in str(m.get("content")) for m in repair["messages"])

    llm.script(model="judge", json={"rain": "no"})
    with pytest.raises(InvalidStructuredAnswerError, match="even after one repair: at \\$.rain"):
        await graph.ainvoke({**question, "response_format": {"type": "json_schema", "json_schema": {
            "name": "rain", "schema": schema}}}, context=context(parley_env))


async def test_the_multi_agent_debate_can_end_with_the_arbitrator(parley_env, llm):
    llm.script(model="arbiter", reply="Final: 9")
    llm.script(reply="Answer: 9")
    ctx = context(parley_env, MultiAgentDebateContext, agents=2, rounds=1, arbitrators=["openai:arbiter"])
    out = await debate_graph.ainvoke({"question": "3+6?"}, context=ctx)
    assert out["final_answers"] == ["Answer: 9", "Answer: 9"]
    assert out["answer"] == "Final: 9" and out["arbitrator"] == "openai:arbiter"
    asked = [r for r in llm.requests if r["model"] == "arbiter"]
    assert len(asked) == 1 and len(llm.requests) == 5  # 2 agents × 2 rounds, then the arbitrator
    # Without arbitrators the debate ends after its last round, as before.
    plain = await debate_graph.ainvoke({"question": "3+6?"},
                                       context=context(parley_env, MultiAgentDebateContext, agents=2, rounds=1))
    assert "answer" not in plain


# --- judge ------------------------------------------------------------------------------------


def judge_graph():
    return build_judge_graph().compile()  # the duel's judging on its own (evals/judge.py)


DEBATE = {
    "topic": "Is tea better than coffee?",
    "user_profile": {"name": "Ada"},
    "opponent_profile": {"name": "Bob"},
    "messages": [
        {"role": "user", "name": "Ada", "content": "Tea calms. Bob ignores that."},
        {"role": "opponent", "name": "Bob", "content": "Coffee wakes. Ada is too gentle."},
    ],
}


async def test_judge_reads_both_orders_anonymised_and_names_the_winner_back(parley_env, llm):
    # Both judgings prefer whoever spoke first: the order swap is what exposes it.
    llm.script(match=JUDGE_MARK, json=judgement("A", winnerReason="Speaker A beat Speaker B."))
    out = await judge_graph().ainvoke(DEBATE, context=context(parley_env, DuelContext))
    verdicts = {v["order"]: v for v in out["verdicts"]}
    assert (verdicts["as_debated"]["speakerA"], verdicts["swapped"]["speakerA"]) == ("user", "opponent")
    assert (verdicts["as_debated"]["winner"], verdicts["swapped"]["winner"]) == ("user", "opponent")
    assert verdicts["as_debated"]["winnerReason"] == "Ada beat Bob."
    assert verdicts["swapped"]["winnerReason"] == "Bob beat Ada."
    prompts = [r["messages"][-1]["content"] for r in llm.requests]
    assert len(prompts) == 2 and not any("Ada" in p or "Bob" in p for p in prompts)
    assert any("Speaker A: Coffee wakes. Speaker B is too gentle." in p for p in prompts)  # swapped: Bob is A


async def test_an_unreadable_verdict_is_asked_again_then_counts_as_a_tie(parley_env, llm):
    llm.script(match="Speaker A: Coffee", json={"winner": "nobody"})  # the swapped judging never reads
    llm.script(match=JUDGE_MARK, json=judgement("A"))
    out = await judge_graph().ainvoke(DEBATE, context=context(parley_env, DuelContext))
    verdicts = {v["order"]: v for v in out["verdicts"]}
    assert verdicts["swapped"]["winner"] == "tie" and verdicts["as_debated"]["winner"] == "user"
    assert len([r for r in llm.requests if "Speaker A: Coffee" in r["messages"][-1]["content"]]) == 2


# --- select_opponent --------------------------------------------------------------------------


async def test_select_opponent_takes_the_model_cast_else_the_fallback(parley_env, llm):
    graph = one_node("select_opponent", pick_opponent)
    state = {"topic": "Remote work", "user_profile": {"name": "Ada"}}
    llm.script(match=SELECT_MARK, json=OPPONENT, times=1)
    assert (await graph.ainvoke(state, context=context(parley_env, DuelContext)))["opponent_profile"] == OPPONENT

    llm.script(match=SELECT_MARK, json={**OPPONENT, "name": "Ada"}, times=1)  # the user themself: unusable
    assert (await graph.ainvoke(state, context=context(parley_env, DuelContext)))["opponent_profile"] == (
        fallback_opponent("Remote work", "Ada"))

    llm.script(match=SELECT_MARK, status=401, times=1)  # a failed call: the built-in persona, no error
    assert (await graph.ainvoke(state, context=context(parley_env, DuelContext)))["opponent_profile"] == (
        fallback_opponent("Remote work", "Ada"))


# --- synthesize -------------------------------------------------------------------------------


class Draft(BaseModel):
    summary: str
    votes: int


def synthesis_graph(*, attempts: int = 1):
    node = synthesize(
        schema=Draft, prompt=lambda state, ctx: [HumanMessage(f"Synthesize: {state['topic']}")],
        shape=lambda state, ctx, draft: {"synthesis": draft.model_dump()},
        fallback=lambda state, exc: Draft(summary="fallback", votes=0), attempts=attempts,
    )
    return one_node("synthesize", node, retry=JUDGE_RETRY if attempts > 1 else None)


async def test_synthesize_writes_the_structured_answer(parley_env, llm):
    llm.script(match="Synthesize", json={"summary": "All agree.", "votes": 3})
    out = await synthesis_graph().ainvoke({"topic": "x"}, context=context(parley_env))
    assert out["synthesis"] == {"summary": "All agree.", "votes": 3}


async def test_synthesize_falls_back_on_the_last_attempt_only(parley_env, llm):
    llm.script(match="Synthesize", json={"summary": "no votes"})
    out = await synthesis_graph(attempts=2).ainvoke({"topic": "x"}, context=context(parley_env))
    assert out["synthesis"] == {"summary": "fallback", "votes": 0} and len(llm.requests) == 2


# --- score_convergence ------------------------------------------------------------------------


def said(agent: str, round_number: int, stance: str, tokens: int = 10) -> dict[str, Any]:
    return {"agentId": agent, "roundNumber": round_number, "stance": stance, "confidence": 0.9, "keyPoint": "",
            "usage": {"inputTokens": tokens, "outputTokens": 1}}


@dataclass(kw_only=True)
class StrictContext(RunContext):
    bar: float = 0.99


async def test_score_convergence_reads_and_writes_the_keys_it_is_given():
    node = score_convergence(transcript_key="talk", round_key="now", rounds_key="log", converged_key="done",
                             threshold_role="bar")
    talk = [said("a", 0, "for"), said("b", 0, "against"), said("a", 1, "for"), said("b", 1, "for", tokens=5)]
    builder = StateGraph(dict, context_schema=StrictContext)
    builder.add_node("score", node)
    builder.add_edge(START, "score")
    builder.add_edge("score", END)
    graph = builder.compile()
    out = await graph.ainvoke({"talk": talk, "now": 1}, context=StrictContext())
    assert out["done"] is False  # agreement now, but b moved: below a 0.99 bar
    assert out["log"][0]["usage"]["b"] == {"inputTokens": 5, "outputTokens": 1}
    out = await graph.ainvoke({"talk": talk, "now": 1}, context=StrictContext(bar=0.5))
    assert out["done"] is True


# --- shared helpers ---------------------------------------------------------------------------


async def test_ask_structured_falls_back_only_on_its_classes_and_its_last_attempt(parley_env, llm):
    llm.script(json={"summary": "no votes"})
    model = context(parley_env).structured(Draft)
    prompt = [HumanMessage("Synthesize")]
    with pytest.raises(Exception) as raised:
        await ask_structured(model, prompt, fallback=lambda exc: "fallback", attempt=1, attempts=2)
    assert is_unreadable(raised.value)
    assert await ask_structured(model, prompt, fallback=lambda exc: "fallback", attempt=2, attempts=2) == "fallback"
    with pytest.raises(Exception):
        await ask_structured(model, prompt)  # no fallback: the failure is the caller's


def test_the_anonymiser_hides_and_reveals():
    names = Anonymiser({"Ada": "Speaker A", "Bob": "Speaker B", "X": "Speaker C"})
    assert names.hide("Ada and Bob and X") == "Speaker A and Speaker B and X"  # one letter is too short to hide
    assert names.reveal("Speaker B beat Speaker A") == "Bob beat Ada"
    redact = Anonymiser.redacting(["openai:gpt-5", "gpt-5"], "[a panelist]")
    assert redact.hide("As GPT-5 (openai:gpt-5) I think gpt-5x is other") == (
        "As [a panelist] ([a panelist]) I think gpt-5x is other")
