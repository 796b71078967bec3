"""Compiled workflows are plain LangGraph graphs: their topology, checkpoints, nesting, and their input."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from parley.designer import (
    WorkflowContext,
    WorkflowInputError,
    build_workflow,
    compile_workflow,
    load_example,
    parse_assignments,
    prepare_input,
    validate_workflow,
)
from tests.designer.conftest import wf

SNAPSHOTS = Path(__file__).parent / "snapshots"


def fanout_doc() -> dict[str, Any]:
    node = {"type": "transform", "config": {"op": "format"}, "inputs": {"template": "{topic}"}}
    return wf([
        {"id": "split", **node, "output_key": "a"},
        {"id": "left", **node, "output_key": "b"},
        {"id": "right", **node, "output_key": "c"},
        {"id": "gate", "type": "condition", "config": {"key": "b", "cases": [{"op": "eq", "value": "stop",
                                                                               "goto": "__end__"}],
                                                        "default": "split"}},
    ], {"topic": "string", "a": "string", "b": "string", "c": "string"},
        [{"from": "split", "to": "left"}, {"from": "split", "to": "right"}, {"from": "left", "to": "gate"}],
        finish=["right"], name="fan out")


TOPOLOGIES = {
    "tagline-loop": lambda: load_example("tagline-loop"),
    "roundtable-decision": lambda: load_example("roundtable-decision"),
    "fanout": fanout_doc,
}


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_compiled_topology_matches_its_snapshot(name):
    drawn = compile_workflow(TOPOLOGIES[name]()).get_graph().draw_mermaid()
    path = SNAPSHOTS / f"{name}.mmd"
    if os.environ.get("PARLEY_UPDATE_SNAPSHOTS"):
        path.write_text(drawn)
    assert drawn == path.read_text(), f"topology of {name} changed; rerun with PARLEY_UPDATE_SNAPSHOTS=1 if intended"


def test_compiled_graph_is_named_after_the_workflow_and_takes_the_workflow_context():
    graph = compile_workflow(load_example("outline-brief"))
    assert graph.name == "Outline, then brief"
    assert graph.builder.context_schema is WorkflowContext
    assert [n for n in graph.get_graph().nodes if not n.startswith("__")] == ["outline", "bullets", "brief"]
    assert isinstance(build_workflow(load_example("outline-brief")), StateGraph)


def echo_doc() -> dict[str, Any]:
    return wf([{"id": "shout", "type": "transform", "config": {"op": "format"},
                "inputs": {"template": "{word}!"}, "output_key": "loud"}],
              {"word": "string", "loud": "string"}, name="echo")


async def test_a_compiled_workflow_takes_a_checkpointer():
    graph = compile_workflow(echo_doc(), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    assert await graph.ainvoke({"word": "hey"}, config) == {"word": "hey", "loud": "hey!"}
    snapshot = await graph.aget_state(config)
    assert snapshot.values["loud"] == "hey!" and snapshot.next == ()


async def test_a_compiled_workflow_nests_as_a_node_of_another_graph():
    class Outer(TypedDict, total=False):
        word: str
        loud: str
        done: bool

    async def finish(state: Outer) -> dict:
        return {"done": True}

    builder = StateGraph(Outer)
    builder.add_node("echo", compile_workflow(echo_doc()))
    builder.add_node("finish", finish)
    builder.add_edge(START, "echo")
    builder.add_edge("echo", "finish")
    builder.add_edge("finish", END)
    assert await builder.compile().ainvoke({"word": "yo"}) == {"word": "yo", "loud": "yo!", "done": True}


def test_input_is_checked_against_the_declared_state():
    spec = validate_workflow(wf(
        [{"id": "n", "type": "transform", "config": {"op": "pick", "key": "count"}, "output_key": "copy"}],
        {"count": {"type": "integer", "required": True}, "ratio": "number", "flag": "boolean",
         "profile": {"type": "object", "default": {"name": "Ada"}}, "copy": "any"}))
    assert prepare_input(spec, {"count": 2}) == {"count": 2, "profile": {"name": "Ada"}}
    assert prepare_input(spec, {"count": 2, "ratio": 1}) == {"count": 2, "ratio": 1, "profile": {"name": "Ada"}}

    with pytest.raises(WorkflowInputError) as caught:
        prepare_input(spec, {"coutn": 1, "ratio": "high", "flag": 1, "profile": None})
    assert [str(i) for i in caught.value.issues] == [
        "At input.coutn: unknown state key 'coutn' (did you mean 'count'?); declared: count, ratio, flag, profile, copy",
        "At input.ratio: expected number, got string",
        "At input.flag: expected boolean, got integer",
        "At input.profile: expected object, got null",
        "At input.count: missing required input 'count'",
    ]
    with pytest.raises(WorkflowInputError, match="expected integer, got boolean"):
        prepare_input(spec, {"count": True})


def test_defaults_are_copied_per_run():
    spec = validate_workflow(load_example("tagline-loop"))
    first = prepare_input(spec, {"product": "x"})
    first["drafts"].append("mutated")
    assert prepare_input(spec, {"product": "x"})["drafts"] == []


def test_command_line_values_are_typed_by_their_key():
    spec = validate_workflow(wf(
        [{"id": "n", "type": "transform", "config": {"op": "pick", "key": "count"}, "output_key": "copy"}],
        {"count": "integer", "ratio": "number", "flag": "boolean", "profile": "object", "tags": "array",
         "text": "string", "copy": "any"}))
    values = parse_assignments(spec, ["count=3", "ratio=0.5", "flag=yes", 'profile={"name": "Ada"}',
                                      'tags=["a"]', "text=a=b", "copy=[1]"])
    assert values == {"count": 3, "ratio": 0.5, "flag": True, "profile": {"name": "Ada"}, "tags": ["a"],
                      "text": "a=b", "copy": [1]}
    with pytest.raises(WorkflowInputError) as caught:
        parse_assignments(spec, ["count=three", "flag=maybe", "profile=[1]", "noequals"])
    assert [i.path for i in caught.value.issues] == ["input.count", "input.flag", "input.profile", "input.noequals"]
    assert caught.value.issues[0].message == "'three' is not an integer"
