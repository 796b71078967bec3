"""The bundled `multiagent-debate` example, built from capability nodes (`fan_out` per round, then `vote`), asks the
scripted model the same calls as `graphs.multiagent_debate` (same bodies, the same multiset per round) and gives the
same answers: as shipped (Du et al.'s 3 agents × 2 rounds, the graph's `rounds=1`), and with one more revision
round chained on (`rounds=2`)."""

from __future__ import annotations

import copy
import json
from collections import Counter

import pytest

from parley.designer import load_example
from parley.graphs.multiagent_debate import MultiAgentDebateContext
from parley.graphs.multiagent_debate import graph as debate_graph
from parley.nodes.answers import majority_answer, parse_rule
from tests.designer.conftest import run_workflow

REVISE_MARK = "Other agents answered the same question"
MODELS = ["openai:model-a", "openai:model-b", "openai:model-c"]
# Each agent's answer by round: the majority of the last round is 9 whatever the rounds (model-b says 7).
SCRIPT = {"model-a": ("5", "9", "9"), "model-b": ("6", "7", "7"), "model-c": ("7", "9", "9")}


def script(llm) -> None:
    """Replies that depend on the model and the round only, so parallel branches may arrive in any order."""
    for model, (first, once, twice) in SCRIPT.items():
        llm.script(model=model, match="Revised once", reply=f"{model}: Revised twice. Answer: {twice}")
        llm.script(model=model, match=REVISE_MARK, reply=f"{model}: Revised once. Answer: {once}")
        llm.script(model=model, reply=f"{model}: First try. Answer: {first}")


def by_round(requests: list[dict]) -> list[Counter]:
    """The requests of each round as a multiset of whole bodies (round 0: the question alone)."""
    rounds: list[Counter] = [Counter(), Counter(), Counter()]
    for body in requests:
        text = json.dumps(body["messages"])
        number = 0 if len(body["messages"]) == 1 else 2 if "Revised once" in text else 1
        rounds[number][json.dumps(body, sort_keys=True)] += 1
    return rounds


def example(*, models: list[str] | None = None, extra_round: bool = False) -> dict:
    """The example, its fan_outs dealing `models`, with one more revision round when `extra_round`."""
    document = copy.deepcopy(load_example("multiagent-debate"))
    if extra_round:
        again = copy.deepcopy(next(n for n in document["nodes"] if n["id"] == "revise"))
        again.update(id="revise_again", inputs={**again["inputs"], "previous": "{final}"}, output_key="last")
        document["nodes"].insert(2, again)
        document["state"]["last"] = {"type": "array"}
        document["nodes"][-1]["inputs"]["answers"] = "{last}"
        document["edges"] = [{"from": "answer_alone", "to": "revise"}, {"from": "revise", "to": "revise_again"},
                             {"from": "revise_again", "to": "majority"}]
    for node in document["nodes"]:
        if node["type"] == "fan_out" and models:
            node["config"]["models"] = models
    return document


async def run_both(llm, factory, ctx, document: dict, *, rounds: int, agent_models: list[str] | None):
    question = document["sampleInput"]["question"]
    debate = await debate_graph.ainvoke({"question": question}, context=MultiAgentDebateContext(
        models=factory, agents=3, rounds=rounds, agent_models=agent_models))
    asked = len(llm.requests)
    events, done = await run_workflow(document, document["sampleInput"], ctx)
    return debate, llm.requests[:asked], llm.requests[asked:], events, done["state"]


@pytest.mark.parametrize("rounds", [1, 2])
async def test_the_example_asks_the_debates_calls_and_gives_its_answers(llm, factory, ctx, rounds):
    script(llm)
    document = example(models=MODELS, extra_round=rounds == 2)
    debate, graph_calls, workflow_calls, events, state = await run_both(llm, factory, ctx, document, rounds=rounds,
                                                                        agent_models=MODELS)

    assert len(graph_calls) == len(workflow_calls) == 3 * (rounds + 1)
    assert by_round(workflow_calls) == by_round(graph_calls)
    assert [sum(r.values()) for r in by_round(workflow_calls)] == [3, 3, 3 if rounds == 2 else 0]

    keys = ["first", "final", "last"][:rounds + 1]
    for number, key in enumerate(keys):
        assert [a["content"] for a in state[key]] == [
            a["content"] for a in sorted(debate["answers"], key=lambda a: a["agent"]) if a["round"] == number]
    assert [a["content"] for a in state[keys[-1]]] == debate["final_answers"]
    ballot = majority_answer(debate["final_answers"], parse_rule("number"))
    assert ballot.vote.answer == "9" and state["answer"] == ballot.text
    assert state["answer"] == f"model-a: Revised {'once' if rounds == 1 else 'twice'}. Answer: 9"
    vote = next(e for e in events if e["event"] == "progress" and e["kind"] == "vote")
    assert vote["data"]["votes"] == ["9", "7", "9"] and vote["node"] == "majority"


async def test_the_example_as_shipped_asks_what_the_debate_asks_on_the_runs_model(llm, factory, ctx):
    debate, graph_calls, workflow_calls, _, state = await run_both(llm, factory, ctx, example(), rounds=1,
                                                                   agent_models=None)
    assert by_round(workflow_calls) == by_round(graph_calls) and len(workflow_calls) == 6
    assert [a["content"] for a in state["final"]] == debate["final_answers"]
    assert {body["model"] for body in workflow_calls} == {"gpt-4o-mini"}
