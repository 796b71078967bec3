"""The node types that need no mode (`llm`, `transform`, `condition`) and routing, run on the scripted model."""

from __future__ import annotations

import pytest

from parley.designer import WorkflowRunError, load_example
from tests.designer.conftest import run_workflow, wf


def names(events, kind):
    return [e["node"] for e in events if e["event"] == kind]


async def test_llm_node_streams_its_tokens_and_writes_its_key(llm, ctx):
    llm.script(match="Answer: tea or coffee?", reply="Tea wins because it calms the mind.")
    doc = wf([{"id": "answer", "type": "llm", "inputs": {"system": "You are {persona}.", "prompt": "Answer: {question}"},
               "output_key": "verdict"}],
             {"question": "string", "persona": {"type": "string", "default": "a tea merchant"}, "verdict": "string"})
    events, done = await run_workflow(doc, {"question": "tea or coffee?"}, ctx)

    assert done["state"]["verdict"] == "Tea wins because it calms the mind."
    chunks = [e for e in events if e["event"] == "chunk"]
    assert len(chunks) > 1 and {e["node"] for e in chunks} == {"answer"}
    assert "".join(e["content"] for e in chunks) == done["state"]["verdict"]
    assert [e["event"] for e in events][0] == "node_start" and events[-1]["event"] == "node_end"
    assert events[-1]["keys"] == ["verdict"] and events[-1]["output"] == {"verdict": done["state"]["verdict"]}
    request = llm.requests[-1]
    assert request["stream"] is True and request["model"] == "gpt-4o-mini"
    assert request["messages"][0] == {"role": "system", "content": "You are a tea merchant."}


async def test_llm_node_uses_its_own_model_and_knobs_billed_to_the_node(llm, ctx):
    doc = wf([
        {"id": "first", "type": "llm", "inputs": {"prompt": "One {topic}"}, "output_key": "a"},
        {"id": "second", "type": "llm", "config": {"model": "anthropic:claude-sonnet-4-5", "temperature": 0.2,
                                                    "max_tokens": 50},
         "inputs": {"prompt": "Two {a}"}, "output_key": "b"},
    ], {"topic": "string", "a": "string", "b": "string"}, [{"from": "first", "to": "second"}])
    events, done = await run_workflow(doc, {"topic": "x"}, ctx)

    first, second = llm.requests
    assert first["model"] == "gpt-4o-mini" and "temperature" not in first
    assert second["model"] == "claude-sonnet-4-5" and second["temperature"] == 0.2
    assert second["max_completion_tokens"] == 50
    usage = done["usage"]
    assert [m["model"] for m in usage["nodes"]["second"]["models"]] == ["anthropic:claude-sonnet-4-5"]
    assert usage["nodes"]["first"]["calls"] == usage["nodes"]["second"]["calls"] == 1
    assert usage["totalTokens"] == sum(n["totalTokens"] for n in usage["nodes"].values()) > 0
    ends = {e["node"]: e for e in events if e["event"] == "node_end"}
    assert ends["second"]["usage"]["totalTokens"] == usage["nodes"]["second"]["totalTokens"]
    assert {r.label for r in ctx.ledger.records} == {"first", "second"}


async def test_llm_node_with_an_output_schema_writes_an_object(llm, ctx):
    llm.script(match="Rate", json={"score": 7, "reasons": ["clear", "short"], "tone": "calm"})
    schema = {"type": "object", "properties": {
        "score": {"type": "integer", "description": "0 to 10"},
        "reasons": {"type": "array", "items": {"type": "string"}},
        "tone": {"enum": ["calm", "angry"]}}}
    doc = wf([{"id": "rate", "type": "llm", "config": {"output_schema": schema}, "inputs": {"prompt": "Rate {text}"},
               "output_key": "rating"}], {"text": "string", "rating": "object"})
    events, done = await run_workflow(doc, {"text": "hello"}, ctx)

    assert done["state"]["rating"] == {"score": 7, "reasons": ["clear", "short"], "tone": "calm"}
    assert not [e for e in events if e["event"] == "chunk"]
    sent = llm.requests[-1]["response_format"]["json_schema"]["schema"]
    assert sent["properties"]["score"]["description"] == "0 to 10" and set(sent["required"]) == {"score", "reasons",
                                                                                                 "tone"}


async def test_transform_node_picks_joins_and_formats(ctx):
    doc = wf([
        {"id": "winner", "type": "transform", "config": {"op": "pick", "key": "duel.synthesis.winner"},
         "output_key": "who"},
        {"id": "lines", "type": "transform",
         "config": {"op": "join", "keys": ["duel.messages", "closing"], "field": "content", "separator": " | "},
         "output_key": "text"},
        {"id": "line", "type": "transform", "config": {"op": "format"},
         "inputs": {"template": "{who} won {score:.1f} to {duel.messages.-1.name}; {{braces}} {duel.synthesis}"},
         "output_key": "headline"},
    ], {"duel": "object", "closing": {"type": "string", "default": "the end"}, "score": "number", "who": "any",
        "text": "string", "headline": "string"},
        [{"from": "winner", "to": "lines"}, {"from": "lines", "to": "line"}])
    duel = {"synthesis": {"winner": "user"}, "messages": [{"name": "Ada", "content": "A"}, {"name": "Bo", "content": "B"}]}
    _, done = await run_workflow(doc, {"duel": duel, "score": 7.25}, ctx)

    state = done["state"]
    assert state["who"] == "user"
    assert state["text"] == "A | B | the end"
    assert state["headline"] == 'user won 7.2 to Bo; {braces} {"winner": "user"}'


def gate_doc():
    return wf([
        {"id": "start", "type": "transform", "config": {"op": "pick", "key": "score"}, "output_key": "seen"},
        {"id": "gate", "type": "condition", "config": {"key": "score", "cases": [
            {"op": "gte", "value": 7, "goto": "accept"}, {"op": "lt", "value": 0, "goto": "__end__"}],
            "default": "reject"}, "output_key": "route"},
        {"id": "accept", "type": "transform", "config": {"op": "format"}, "inputs": {"template": "yes {score}"},
         "output_key": "result"},
        {"id": "reject", "type": "transform", "config": {"op": "format"}, "inputs": {"template": "no {score}"},
         "output_key": "result"},
    ], {"score": "number", "seen": "number", "route": "string", "result": "string"},
        [{"from": "start", "to": "gate"}], finish=["accept", "reject"])


@pytest.mark.parametrize(("score", "route", "result", "ran"), [
    (9, "accept", "yes 9", ["start", "gate", "accept"]),
    (3, "reject", "no 3", ["start", "gate", "reject"]),
    (-1, "__end__", None, ["start", "gate"]),
])
async def test_condition_node_routes_on_a_state_value(ctx, score, route, result, ran):
    events, done = await run_workflow(gate_doc(), {"score": score}, ctx)
    assert names(events, "node_end") == ran
    assert done["state"]["route"] == route
    assert done["state"].get("result") == result


def edges_doc(with_fallback: bool):
    edges = [
        {"from": "start", "to": "high", "when": {"key": "label", "op": "matches", "value": "(?i)^urgent"}},
        {"from": "start", "to": "tagged", "when": {"key": "tags", "op": "contains", "value": "vip"}},
    ]
    if with_fallback:
        edges.append({"from": "start", "to": "low"})
    node = {"type": "transform", "config": {"op": "format"}, "output_key": "result"}
    return wf([
        {"id": "start", "type": "transform", "config": {"op": "pick", "key": "label"}, "output_key": "seen"},
        {"id": "high", **node, "inputs": {"template": "high"}},
        {"id": "tagged", **node, "inputs": {"template": "tagged"}},
        {"id": "low", **node, "inputs": {"template": "low"}},
    ], {"label": "string", "tags": {"type": "array", "default": []}, "seen": "string", "result": "string"}, edges)


@pytest.mark.parametrize(("values", "with_fallback", "result"), [
    ({"label": "URGENT: fix", "tags": ["vip"]}, True, "high"),  # the first passing edge wins
    ({"label": "later", "tags": ["vip"]}, True, "tagged"),
    ({"label": "later"}, True, "low"),  # the plain edge is the fallback
    ({"label": "later"}, False, None),  # no fallback: the run finishes
])
async def test_conditional_edges_take_the_first_passing_test(ctx, values, with_fallback, result):
    doc = edges_doc(with_fallback)
    if not with_fallback:
        doc["nodes"] = [n for n in doc["nodes"] if n["id"] != "low"]
    events, done = await run_workflow(doc, values, ctx)
    assert done["state"].get("result") == result
    assert len(names(events, "node_end")) == (1 if result is None else 2)


async def test_a_loop_runs_until_its_exit_test_passes_and_append_collects(llm, ctx):
    llm.script(match="Review this tagline", json={"approved": False, "feedback": "shorter"})
    llm.script(match="Write one tagline", replies=["Hot for hours.", "Six hours hot.", "Heat that lasts."])
    events, done = await run_workflow(load_example("tagline-loop"), {"product": "a cup"}, ctx)

    assert done["state"]["drafts"] == ["Hot for hours.", "Six hours hot.", "Heat that lasts."]
    assert names(events, "node_end") == ["write", "review"] * 3
    assert done["usage"]["nodes"]["write"]["calls"] == 3
    second_prompt = [r for r in llm.requests if "Write one tagline" in r["messages"][-1]["content"]][1]
    assert 'Earlier drafts: ["Hot for hours."]' in second_prompt["messages"][-1]["content"]
    assert "Reviewer feedback: shorter" in second_prompt["messages"][-1]["content"]


async def test_plain_edges_fan_out_and_an_append_key_collects_both(llm, ctx):
    doc = wf([
        {"id": "split", "type": "transform", "config": {"op": "pick", "key": "topic"}, "output_key": "seen"},
        {"id": "pro", "type": "llm", "inputs": {"prompt": "For {topic}"}, "output_key": "views"},
        {"id": "con", "type": "llm", "inputs": {"prompt": "Against {topic}"}, "output_key": "views"},
        {"id": "merge", "type": "transform", "config": {"op": "join", "keys": ["views"], "separator": "\n"},
         "output_key": "both"},
    ], {"topic": "string", "seen": "string", "views": {"type": "array", "reducer": "append", "default": []},
        "both": "string"},
        [{"from": "split", "to": "pro"}, {"from": "split", "to": "con"}, {"from": "pro", "to": "merge"},
         {"from": "con", "to": "merge"}])
    events, done = await run_workflow(doc, {"topic": "tax"}, ctx)

    assert len(done["state"]["views"]) == 2
    assert set(done["state"]["both"].split("\n")) == set(done["state"]["views"])
    assert names(events, "node_end").count("merge") == 1


async def test_a_value_missing_at_run_time_names_the_node(ctx):
    doc = wf([{"id": "ask", "type": "llm", "inputs": {"prompt": "About {topic}"}, "output_key": "answer"}],
             {"topic": "string", "answer": "string"})
    with pytest.raises(WorkflowRunError) as caught:
        await run_workflow(doc, {}, ctx)
    assert caught.value.node == "ask"
    assert str(caught.value) == ("At node 'ask': state key 'topic' has no value; pass it as input or give it "
                                 "a default")


async def test_a_model_failure_names_the_node(llm, ctx):
    llm.script(match="About", status=500)
    doc = wf([{"id": "ask", "type": "llm", "inputs": {"prompt": "About {topic}"}, "output_key": "answer"}],
             {"topic": "string", "answer": "string"})
    with pytest.raises(WorkflowRunError) as caught:
        await run_workflow(doc, {"topic": "x"}, ctx)
    assert caught.value.node == "ask" and "500" in str(caught.value)


async def test_a_node_with_retries_survives_a_transient_failure(llm, ctx):
    llm.script(match="About", status=503, times=1)
    doc = wf([{"id": "ask", "type": "llm", "retries": 1, "inputs": {"prompt": "About {topic}"},
               "output_key": "answer"}], {"topic": "string", "answer": "string"})
    events, done = await run_workflow(doc, {"topic": "x"}, ctx)
    assert [e["attempt"] for e in events if e["event"] == "node_start"] == [1, 2]
    assert done["state"]["answer"].startswith("gpt-4o-mini answer")
