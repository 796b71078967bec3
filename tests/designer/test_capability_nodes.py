"""The capability node types (`select_opponent`, `synthesize`, `score_convergence`): the nodes the modes are built
of, composed in a workflow and run on the scripted model."""

from __future__ import annotations

import pytest

from designer import WorkflowError, validate_workflow
from nodes.personas import fallback_opponent
from tests.designer.conftest import run_workflow, wf
from tests.support.duel import OPPONENT, SELECT_MARK

VERDICT = {"type": "object", "properties": {"summary": {"type": "string"}, "votes": {"type": "integer"}},
           "required": ["summary", "votes"]}


async def test_select_opponent_casts_for_the_topic_and_announces_it_under_the_node(llm, ctx):
    llm.script(match=SELECT_MARK, json=OPPONENT)
    doc = wf([{"id": "cast", "type": "select_opponent", "config": {"user_profile": {"name": "Ada"}},
               "output_key": "opponent"}], {"topic": "string", "opponent": "object"})
    events, done = await run_workflow(doc, {"topic": "Remote work"}, ctx)
    assert done["state"]["opponent"] == OPPONENT
    progress = [e for e in events if e["event"] == "progress"]
    assert progress == [{"event": "progress", "node": "cast", "kind": "opponent", "data": {"opponentProfile": OPPONENT}}]
    request = llm.requests[-1]
    assert request["temperature"] == 0.8 and "Remote work" in request["messages"][-1]["content"]


async def test_select_opponent_falls_back_to_a_built_in_persona(llm, ctx):
    llm.script(match=SELECT_MARK, status=401)
    doc = wf([{"id": "cast", "type": "select_opponent", "inputs": {"topic": "{topic}", "user_profile": "{who}"},
               "output_key": "opponent"}], {"topic": "string", "who": "string", "opponent": "object"})
    _, done = await run_workflow(doc, {"topic": "Remote work", "who": "Ada"}, ctx)
    assert done["state"]["opponent"] == fallback_opponent("Remote work", "Ada")


async def test_synthesize_writes_the_object_or_its_fallback(llm, ctx):
    doc = wf([{"id": "sum", "type": "synthesize", "config": {"output_schema": VERDICT,
                                                               "fallback": {"summary": "unreadable", "votes": 0}},
               "inputs": {"prompt": "Synthesize {notes}"}, "output_key": "verdict"}],
             {"notes": "string", "verdict": "object"})
    llm.script(match="Synthesize", json={"summary": "All agree.", "votes": 3}, times=1)
    _, done = await run_workflow(doc, {"notes": "a, b"}, ctx)
    assert done["state"]["verdict"] == {"summary": "All agree.", "votes": 3}
    llm.script(match="Synthesize", json={"summary": "no votes"})
    _, done = await run_workflow(doc, {"notes": "a, b"}, ctx)
    assert done["state"]["verdict"] == {"summary": "unreadable", "votes": 0}


def test_a_synthesize_fallback_must_fit_its_schema():
    doc = wf([{"id": "sum", "type": "synthesize", "config": {"output_schema": VERDICT, "fallback": {"summary": 1}},
               "inputs": {"prompt": "Synthesize"}, "output_key": "verdict"}], {"verdict": "object"})
    with pytest.raises(WorkflowError) as caught:
        validate_workflow(doc)
    assert [(i.node, i.path) for i in caught.value.issues] == [("sum", "nodes[0].config.fallback")]


async def test_score_convergence_scores_the_last_round_of_a_transcript(ctx):
    def said(agent, round_number, stance):
        return {"agentId": agent, "roundNumber": round_number, "stance": stance, "confidence": 0.9,
                "usage": {"inputTokens": 3, "outputTokens": 1}}

    transcript = [said("a", 0, "for"), said("b", 0, "for"), said("a", 1, "for"), said("b", 1, "for")]
    doc = wf([{"id": "score", "type": "score_convergence", "config": {"threshold": 0.8},
               "inputs": {"transcript": "{outcome.transcript}"}, "output_key": "convergence"}],
             {"outcome": "object", "convergence": "object"})
    events, done = await run_workflow(doc, {"outcome": {"transcript": transcript}}, ctx)
    result = done["state"]["convergence"]
    assert result["roundNumber"] == 1 and result["converged"] is True and result["convergenceScore"] >= 0.8
    assert result["usage"]["a"] == {"inputTokens": 3, "outputTokens": 1}
    assert [e["kind"] for e in events if e["event"] == "progress"] == ["convergence"]
