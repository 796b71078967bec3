"""Every mode speaks through `nodes.speak`: its speaking nodes come from the factory, and the chunks its graph
streams are all in the one shape (each mode's stream reshapes them: tests/api, tests/studio)."""

from __future__ import annotations

import pytest

from parley.core.settings import Settings
from parley.designer import WorkflowContext, compile_workflow, prepare_input, stream_workflow, validate_workflow
from parley.designer.nodes import llm_node
from parley.graphs.duel import DuelContext
from parley.graphs.duel import graph as duel_graph
from parley.graphs.panel import graph as panel_graph
from parley.graphs.roundtable import RoundTableContext
from parley.graphs.roundtable import graph as roundtable_graph
from parley.nodes.context import RunContext
from parley.llm.factory import ModelFactory
from parley.nodes.speak import CHUNK_KEYS, is_chunk
from tests.support.duel import OPPONENT, USER_REPLY, script_duel

WORKFLOW = {
    "version": 1, "name": "one answer", "state": {"question": {"type": "string"}, "answer": {"type": "string"}},
    "nodes": [{"id": "answer", "type": "llm", "inputs": {"prompt": "Answer: {question}"}, "output_key": "answer"}],
    "edges": [], "entry": "answer", "finish": ["answer"],
}


@pytest.fixture
def factory(llm, tmp_path) -> ModelFactory:
    return ModelFactory(Settings(openai_base_url=llm.base_url, openai_api_key="sk-test",
                                 openai_model="openai:gpt-4o-mini", parley_home=tmp_path, _env_file=None))


def node_function(graph, name: str):
    return graph.builder.nodes[name].runnable.afunc


async def custom_events(graph, inputs: dict, context) -> list[dict]:
    return [event async for event in graph.astream(inputs, context=context, stream_mode="custom")]


def chunks(events: list[dict]) -> list[dict]:
    found = [e for e in events if e.get("event") == "chunk"]
    assert found and all(is_chunk(e) and tuple(e) == CHUNK_KEYS for e in found)
    return found


def test_the_speaking_nodes_of_the_graphs_come_from_the_factory():
    for graph, name in [(duel_graph, "user_turn"), (duel_graph, "opponent_turn"),
                        (roundtable_graph, "agent_turn"), (roundtable_graph, "devils_advocate_turn")]:
        assert getattr(node_function(graph, name), "capability", None) == "speak", name
    spec = validate_workflow(WORKFLOW)
    assert llm_node(spec.node("answer"), {}).capability == "speak"


async def test_the_duel_speaks_in_the_one_shape(llm, factory):
    script_duel(llm)
    events = await custom_events(duel_graph, {"topic": "Remote work?", "user_profile": {"name": "Ada"}},
                                 DuelContext(models=factory, rounds=1))
    said = chunks(events)
    assert {e["speaker"]["id"] for e in said} == {"user", "opponent"}
    assert {e["speaker"]["name"] for e in said} == {"Ada", OPPONENT["name"]}
    assert "".join(e["content"] for e in said if e["speaker"]["id"] == "user") == USER_REPLY


async def test_the_round_table_speaks_in_the_one_shape(llm, factory):
    agents = [{"id": "claire", "name": "Claire", "role": "Finance", "persona": "", "isDevilsAdvocate": False}]
    events = await custom_events(roundtable_graph, {"question": "Open a Lyon office?", "agents": agents},
                                 RoundTableContext(models=factory, max_rounds=1))
    said = chunks(events)
    assert {e["speaker"]["id"] for e in said} == {"claire", "devils-advocate"} and {e["round"] for e in said} == {0, 1}


async def test_the_panel_speaks_in_the_one_shape(llm, factory):
    llm.script(model="gpt-4o", reply="A hot dog is a taco.")
    events = await custom_events(panel_graph, {"mode": "single", "models": ["openai:gpt-4o"],
                                               "messages": [{"role": "user", "content": "Hot dog?"}]},
                                 RunContext(models=factory))
    said = chunks(events)
    assert {e["speaker"]["id"] for e in said} == {"openai:gpt-4o"}
    assert "".join(e["content"] for e in said) == "A hot dog is a taco."


async def test_the_designer_speaks_in_the_one_shape_and_its_stream_shows_node_and_content(llm, factory):
    llm.script(match="Answer: Tea?", reply="Tea, always.")
    context = WorkflowContext(models=factory)
    said = chunks(await custom_events(compile_workflow(WORKFLOW), {"question": "Tea?"}, context))
    assert {e["speaker"]["id"] for e in said} == {"answer"}
    spec = validate_workflow(WORKFLOW)
    shown = [e async for e in stream_workflow(spec, prepare_input(spec, {"question": "Tea?"}), context=context)]
    shown = [e for e in shown if e["event"] == "chunk"]
    assert shown and all(set(e) == {"event", "node", "content"} and e["node"] == "answer" for e in shown)
