"""The capability node types (`select_opponent`, `synthesize`, `score_convergence`): the nodes the modes are built
of, composed in a workflow and run on the scripted model."""

from __future__ import annotations

import pytest

from parley.designer import WorkflowError, validate_workflow
from parley.designer.run import WorkflowRunError
from parley.graphs.duel.personas import fallback_opponent
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


# --- fan_out, arbitrate, judge, vote ---------------------------------------------------------

FAN = {"id": "ask", "type": "fan_out", "config": {"models": ["openai:model-a", "openai:model-b", "openai:model-c"]},
       "inputs": {"prompt": "Q: {question}"}, "output_key": "answers"}


async def test_fan_out_asks_every_branch_at_once_and_writes_them_in_branch_order(llm, ctx):
    llm.script(model="model-b", reply="Bee.")
    doc = wf([FAN], {"question": "string", "answers": "array"})
    events, done = await run_workflow(doc, {"question": "why?"}, ctx)
    answers = done["state"]["answers"]
    assert [(a["branch"], a["model"]) for a in answers] == [(0, "openai:model-a"), (1, "openai:model-b"),
                                                            (2, "openai:model-c")]
    assert answers[1]["content"] == "Bee." and all(a["content"] for a in answers)
    assert sorted(r["model"] for r in llm.requests) == ["model-a", "model-b", "model-c"]
    assert all(r["messages"] == [{"role": "user", "content": "Q: why?"}] for r in llm.requests)
    shown = [e for e in events if e["event"] == "progress" and e["kind"] == "answer"]
    assert len(shown) == 3 and {e["node"] for e in shown} == {"ask"}


async def test_fan_out_with_min_successes_records_a_failed_branch_and_goes_on(llm, ctx):
    llm.script(model="model-b", status=401)
    node = {**FAN, "config": {**FAN["config"], "min_successes": 2}}
    _, done = await run_workflow(wf([node], {"question": "string", "answers": "array"}), {"question": "why?"}, ctx)
    answers = done["state"]["answers"]
    assert [a.get("success", True) for a in answers] == [True, False, True]
    assert answers[1]["error"] and answers[1]["model"] == "openai:model-b"


async def test_fan_out_fails_when_too_few_branches_answer(llm, ctx):
    llm.script(status=401)
    node = {**FAN, "config": {**FAN["config"], "min_successes": 2}}
    with pytest.raises(WorkflowRunError) as caught:
        await run_workflow(wf([node], {"question": "string", "answers": "array"}), {"question": "why?"}, ctx)
    assert caught.value.node == "ask" and "Only 0 of 3 branches succeeded (2 needed)" in str(caught.value)


async def test_arbitrate_streams_the_best_of_anonymised_answers_falling_back_down_its_chain(llm, ctx):
    llm.script(model="arb-1", status=401)
    llm.script(model="arb-2", reply="The best answer is 9.")
    doc = wf([FAN, {"id": "settle", "type": "arbitrate", "config": {"arbitrators": ["openai:arb-1", "openai:arb-2"]},
                    "inputs": {"answers": "{answers}"}, "output_key": "answer"}],
             {"question": "string", "answers": "array", "answer": "string"}, [{"from": "ask", "to": "settle"}])
    events, done = await run_workflow(doc, {"question": "why?"}, ctx)
    assert done["state"]["answer"] == "The best answer is 9."
    arbitration = llm.requests[-1]["messages"]
    assert "Answer A" in arbitration[-1]["content"] and "Answer C" in arbitration[-1]["content"]
    assert "why?" in arbitration[-1]["content"] and "model-a" not in arbitration[-1]["content"]
    assert "".join(e["content"] for e in events if e["event"] == "chunk" and e["node"] == "settle") == \
        "The best answer is 9."
    assert [e["data"]["model"] for e in events if e["event"] == "progress" and e["kind"] == "fallback"] == \
        ["openai:arb-1"]


async def test_judge_reads_both_orders_and_names_the_agreed_winner(llm, ctx):
    from tests.support.duel import JUDGE_MARK

    verdict = {"consensus": [], "disagreements": ["cost"], "winner": "A", "winnerReason": "Speaker A was clearer.",
               "conclusion": "Mixed.", "recommendations": []}
    llm.script(match=JUDGE_MARK, json=verdict)
    turns = [{"role": "user", "content": "Ada: remote is better."}, {"role": "opponent", "content": "Offices win."}]
    doc = wf([{"id": "verdict", "type": "judge", "inputs": {"topic": "{topic}", "messages": "{turns}",
                                                            "user_profile": "Ada", "opponent_profile": "Bo"},
               "output_key": "judged"}], {"topic": "string", "turns": "array", "judged": "object"})
    _, done = await run_workflow(doc, {"topic": "Remote work", "turns": turns}, ctx)
    judged = done["state"]["judged"]
    # Speaker A is the user as debated and the opponent when swapped: the two verdicts disagree, a tie.
    assert [v["order"] for v in judged["verdicts"]] == ["as_debated", "swapped"]
    assert [v["winner"] for v in judged["verdicts"]] == ["user", "opponent"] and judged["winner"] == "tie"
    transcripts = [r["messages"][-1]["content"] for r in llm.requests]
    assert len(transcripts) == 2 and all("Ada" not in t and "Speaker A" in t for t in transcripts)


async def test_vote_takes_the_majority_under_the_rule(ctx):
    doc = wf([{"id": "count", "type": "vote", "config": {"rule": "number"}, "inputs": {"answers": "{texts}"},
               "output_key": "answer"}], {"texts": "array", "answer": "string"})
    events, done = await run_workflow(doc, {"texts": ["Answer: 7", "so 9", "It is 9, Answer: 9"]}, ctx)
    assert done["state"]["answer"] == "so 9"
    vote = next(e for e in events if e["event"] == "progress")
    assert vote["data"] == {"rule": "number", "answer": "9", "count": 2, "tied": False, "votes": ["7", "9", "9"]}


@pytest.mark.parametrize("node, path, words", [
    ({**FAN, "config": {}}, "nodes[0].config.branches", "needs config.branches or config.models"),
    ({**FAN, "config": {"branches": 2, "min_successes": 3}}, "nodes[0].config.min_successes", "more than"),
    ({**FAN, "inputs": {"prompt": "Q", "previous": "was {answers}"}}, "nodes[0].inputs.previous", "one placeholder"),
    ({**FAN, "config": {"branches": 2, "revise_prompt": "{answers} {topic}"}, "inputs": {"prompt": "Q", "previous":
      "{answers}"}}, "nodes[0].config.revise_prompt", "unknown placeholder(s) {topic}"),
    ({**FAN, "config": {"branches": 2, "revise_prompt": "{answers}"}}, "nodes[0].config.revise_prompt",
     "needs inputs.previous"),
    ({"id": "ask", "type": "vote", "config": {"rule": "nonsense"}, "inputs": {"answers": "{answers}"},
      "output_key": "answers"}, "nodes[0].config.rule", "unknown answer rule"),
    ({"id": "ask", "type": "arbitrate", "inputs": {"answers": "{answer}s"}, "output_key": "answers"},
     "nodes[0].inputs.answers", "one placeholder"),
    ({**FAN, "config": {"branches": 9}}, "nodes[0].config.branches", "less than or equal to 8"),
])
def test_capability_node_problems_name_the_node(node, path, words):
    doc = wf([node], {"question": "string", "answers": "any", "answer": "any"})
    with pytest.raises(WorkflowError) as caught:
        validate_workflow(doc)
    assert [(i.node, i.path) for i in caught.value.issues] == [("ask", path)], caught.value.issues
    assert words in caught.value.issues[0].message
