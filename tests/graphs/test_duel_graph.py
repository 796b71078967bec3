"""The duel graph as a composable LangGraph: shape, defaults, models per role, and the round limit."""

from __future__ import annotations

from langgraph.graph import StateGraph

from parley.graphs.duel import DuelContext, build_duel_graph, graph
from parley.llm.factory import ModelFactory
from tests.support.duel import JUDGE_MARK, SELECT_MARK, script_duel

INPUTS = {"topic": "Should remote work be the default?", "user_profile": {"name": "Ada"}}


def test_the_builder_returns_an_uncompiled_graph_and_the_module_a_compiled_one():
    builder = build_duel_graph()
    assert isinstance(builder, StateGraph)
    assert {"select_opponent", "user_turn", "opponent_turn", "steer", "announce_synthesis", "judge",
            "synthesize"} <= set(builder.nodes)
    assert graph.name == "duel"
    assert set(graph.get_output_jsonschema()["properties"]) == {"opponent_profile", "messages", "synthesis", "verdicts",
                                                               "human", "stopped_by", "consumed"}


async def test_runs_with_no_context_on_the_deployment_default(parley_env, llm):
    script_duel(llm)
    out = await build_duel_graph().compile().ainvoke({**INPUTS, "rounds": 1})
    assert len(out["messages"]) == 2 and out["synthesis"]["winner"] == "user"
    assert {r["model"] for r in llm.requests} == {"gpt-4o-mini"}  # OPENAI_API_KEY set, no OPENAI_MODEL


async def test_models_can_differ_per_role(parley_env, llm):
    script_duel(llm)
    context = DuelContext(models=ModelFactory(parley_env), rounds=1, model="openai:gpt-5",
                          opponent_model="anthropic:claude-sonnet-4-5", judge_model="google:gemini-2.5-pro")
    await graph.ainvoke(INPUTS, context=context)
    by_kind = {}
    for request in llm.requests:
        text = " ".join(m["content"] for m in request["messages"])
        kind = ("judge" if JUDGE_MARK in text else "select" if SELECT_MARK in text
                else "user" if "You are Ada," in text else "opponent")
        by_kind.setdefault(kind, set()).add(request["model"])
    assert by_kind == {"select": {"claude-sonnet-4-5"}, "user": {"gpt-5"}, "opponent": {"claude-sonnet-4-5"},
                       "judge": {"gemini-2.5-pro"}}
    assert {r.model for r in context.ledger.records} == {
        "openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"}


async def test_ten_rounds_fit_in_the_default_step_limit(parley_env, llm):
    script_duel(llm)
    out = await graph.ainvoke({**INPUTS, "rounds": 10}, context=DuelContext(models=ModelFactory(parley_env)))
    assert len(out["messages"]) == 20
    assert [m["role"] for m in out["messages"]] == ["user", "opponent"] * 10


async def test_rounds_in_the_input_override_the_context(parley_env, llm):
    script_duel(llm)
    out = await graph.ainvoke({**INPUTS, "rounds": 2}, context=DuelContext(models=ModelFactory(parley_env), rounds=4))
    assert len(out["messages"]) == 4
    out = await graph.ainvoke(INPUTS, context=DuelContext(models=ModelFactory(parley_env), rounds=3))
    assert len(out["messages"]) == 6


async def test_a_duel_given_its_opponent_and_turns_goes_on_from_the_next_turn(parley_env, llm):
    script_duel(llm)
    first = await graph.ainvoke({**INPUTS, "rounds": 2}, context=DuelContext(models=ModelFactory(parley_env)))
    before = len(llm.requests)
    made = first["messages"][:3]  # two turns of round 1 and Ada's of round 2
    out = await graph.ainvoke({**INPUTS, "rounds": 2, "opponent_profile": first["opponent_profile"],
                               "messages": made}, context=DuelContext(models=ModelFactory(parley_env)))
    assert out["messages"][:3] == made and [m["role"] for m in out["messages"]] == ["user", "opponent"] * 2
    assert out["opponent_profile"] == first["opponent_profile"] and out["synthesis"]["winner"] == "user"
    texts = [" ".join(m["content"] for m in r["messages"]) for r in llm.requests[before:]]
    assert not any(SELECT_MARK in text for text in texts)  # the opponent was not chosen again
    assert sum(JUDGE_MARK not in text for text in texts) == 1  # one turn asked: the opponent's of round 2
