"""The bundled `multiagent-debate` example, built from capability nodes (`fan_out` × 3 rounds, then `vote`), asks
the scripted model the same calls as `graphs.multiagent_debate` (same bodies, the same multiset per round) and
gives the same answers."""

from __future__ import annotations

import copy
import json
from collections import Counter

from designer import load_example
from graphs.multiagent_debate import MultiAgentDebateContext
from graphs.multiagent_debate import graph as debate_graph
from nodes.answers import majority_answer, parse_rule
from tests.designer.conftest import run_workflow

REVISE_MARK = "Other agents answered the same question"
MODELS = ["openai:model-a", "openai:model-b", "openai:model-c"]
# Each agent's answer by round: the majority of the last round is 9 (model-b keeps 7).
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


def with_models(document: dict, models: list[str]) -> dict:
    document = copy.deepcopy(document)
    for node in document["nodes"]:
        if node["type"] == "fan_out":
            node["config"]["models"] = models
    return document


async def run_both(llm, factory, ctx, document: dict, agent_models: list[str] | None):
    question = document["sampleInput"]["question"]
    debate = await debate_graph.ainvoke({"question": question}, context=MultiAgentDebateContext(
        models=factory, agents=3, rounds=2, agent_models=agent_models))
    asked = len(llm.requests)
    events, done = await run_workflow(document, document["sampleInput"], ctx)
    return debate, llm.requests[:asked], llm.requests[asked:], events, done["state"]


async def test_the_example_asks_the_debates_calls_and_gives_its_answers(llm, factory, ctx):
    script(llm)
    document = with_models(load_example("multiagent-debate"), MODELS)
    debate, graph_calls, workflow_calls, events, state = await run_both(llm, factory, ctx, document, MODELS)

    assert len(graph_calls) == len(workflow_calls) == 9  # 3 agents × (first answers + 2 revision rounds)
    assert by_round(workflow_calls) == by_round(graph_calls)
    assert all(sum(round.values()) == 3 for round in by_round(workflow_calls))

    answers = {key: [a["content"] for a in state[key]] for key in ("first", "second", "final")}
    for number, key in enumerate(("first", "second", "final")):
        assert answers[key] == [a["content"] for a in sorted(debate["answers"], key=lambda a: a["agent"])
                                if a["round"] == number]
    assert answers["final"] == debate["final_answers"]
    ballot = majority_answer(debate["final_answers"], parse_rule("number"))
    assert ballot.vote.answer == "9" and state["answer"] == ballot.text == "model-a: Revised twice. Answer: 9"
    vote = next(e for e in events if e["event"] == "progress" and e["kind"] == "vote")
    assert vote["data"]["votes"] == ["9", "7", "9"] and vote["node"] == "majority"


async def test_the_example_as_shipped_asks_what_the_debate_asks_on_the_runs_model(llm, factory, ctx):
    debate, graph_calls, workflow_calls, _, state = await run_both(llm, factory, ctx, load_example("multiagent-debate"),
                                                                   None)
    assert by_round(workflow_calls) == by_round(graph_calls) and len(workflow_calls) == 9
    assert [a["content"] for a in state["final"]] == debate["final_answers"]
    assert {body["model"] for body in workflow_calls} == {"gpt-4o-mini"}
