"""The mode node adapters' plumbing, against stand-in modes that follow the interface contract.

The real modes are exercised in `test_mode_nodes.py` (marker `modes`); here small fakes of the mode modules
(`graphs.panel`: `graph`, `question_input`, `PanelContext`; `graphs.duel`: `graph`, `DuelContext`;
`graphs.roundtable`: `graph`, `RoundTableContext`) check what the adapters pass in (inputs, config, context, models) and what they make of the result
(output key, tagged stream events, per-node usage).
"""

from __future__ import annotations

import operator
import sys
import types
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import HumanMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph

from parley.core.limits import MAX_DUEL_ROUNDS, MIN_DUEL_ROUNDS
from parley.designer import WorkflowContext, WorkflowRunError, load_example
from parley.designer.modes import tag_event, winner_argument
from parley.nodes.context import RunContext
from tests.designer.conftest import run_workflow, wf

CALLS: dict[str, Any] = {}


@dataclass(kw_only=True)
class PanelContext(RunContext):
    panelist_timeout: float = 60


class PanelState(TypedDict, total=False):
    messages: list
    mode: str
    answer: str


def fake_panel() -> types.ModuleType:
    def question_input(question, *, models=None, arbitrators=None, panel_size=3, system_prompt=None,
                       arbitrator_prompt=None, mode="debate", allow_same_family=None, default_arbitrator=None,
                       rule="synthesis", answer_rule=None):
        CALLS["panel"] = dict(question=question, models=models, arbitrators=arbitrators, panel_size=panel_size,
                              system_prompt=system_prompt, arbitrator_prompt=arbitrator_prompt, mode=mode,
                              allow_same_family=allow_same_family, default_arbitrator=default_arbitrator,
                              rule=rule, answer_rule=answer_rule)
        if not str(question).strip():
            raise ValueError(f"the {mode} node needs a question")
        return {"messages": [{"role": "user", "content": question}], "mode": mode}

    async def answer(state: PanelState, runtime) -> dict:
        ctx = runtime.context
        CALLS["panel_context"] = ctx
        get_stream_writer()({"event": "panelists", "models": CALLS["panel"]["models"]})
        question = state["messages"][-1]["content"]
        reply = await ctx.chat("openai:gpt-5", label="arbitrator").ainvoke([HumanMessage(question)])
        return {"answer": f"[{state['mode']}] {reply.content}"}

    builder = StateGraph(PanelState, context_schema=PanelContext)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    module = types.ModuleType("graphs.panel")
    module.graph, module.question_input, module.PanelContext = builder.compile(), question_input, PanelContext
    return module


@dataclass(kw_only=True)
class DuelContext(RunContext):
    temperature: float = 0.8


class DuelState(TypedDict, total=False):
    topic: str
    user_profile: dict
    rounds: int
    opponent_profile: dict
    messages: Annotated[list, operator.add]
    synthesis: dict


def fake_duel() -> types.ModuleType:
    async def argue(state: DuelState, runtime) -> dict:
        CALLS["duel_input"] = dict(state)
        CALLS["duel_context"] = runtime.context
        write = get_stream_writer()
        write({"event": "turn_start", "role": "user"})
        reply = await runtime.context.chat(label="user").ainvoke([HumanMessage(state["topic"])])
        for word in reply.content.split(" ")[:3]:
            write({"event": "chunk", "content": word, "role": "user"})
        return {"opponent_profile": {"name": "Bo"},
                "messages": [{"role": "user", "name": state["user_profile"]["name"], "content": "Remote works."},
                             {"role": "opponent", "name": "Bo", "content": "Offices win."}],
                "synthesis": {"winner": "user", "winnerReason": "evidence", "conclusion": "mixed"}}

    builder = StateGraph(DuelState, context_schema=DuelContext)
    builder.add_node("argue", argue)
    builder.add_edge(START, "argue")
    builder.add_edge("argue", END)
    module = types.ModuleType("graphs.duel")
    module.graph, module.DuelContext = builder.compile(), DuelContext
    return module


@dataclass(kw_only=True)
class RoundTableContext(RunContext):
    max_rounds: int = 3


class TableState(TypedDict, total=False):
    question: str
    topic: str | None
    agents: list
    history: Any
    synthesis: dict
    total_rounds: int
    rounds: list
    transcript: list


def fake_roundtable(action: str = "Go ahead with Lyon.") -> types.ModuleType:
    async def debate(state: TableState, runtime) -> dict:
        CALLS["table_input"] = dict(state)
        names = ", ".join(a["name"] for a in state["agents"])
        return {"synthesis": {"summary": f"{names} debated", "recommendedAction": action},
                "total_rounds": 1, "rounds": [{"round": 1}], "transcript": [{"content": "…"}]}

    builder = StateGraph(TableState, context_schema=RoundTableContext)
    builder.add_node("debate", debate)
    builder.add_edge(START, "debate")
    builder.add_edge("debate", END)
    module = types.ModuleType("graphs.roundtable")
    module.graph, module.RoundTableContext = builder.compile(), RoundTableContext
    return module


@pytest.fixture
def modes(monkeypatch):
    CALLS.clear()
    monkeypatch.setitem(sys.modules, "graphs.panel", fake_panel())
    monkeypatch.setitem(sys.modules, "graphs.duel", fake_duel())
    monkeypatch.setitem(sys.modules, "graphs.roundtable", fake_roundtable())
    return monkeypatch


def test_nested_events_are_tagged_with_the_workflow_node():
    assert tag_event("d", {"event": "chunk", "content": "hi", "role": "user", "node": "inner"}) == {
        "event": "chunk", "node": "d", "content": "hi", "role": "user"}
    assert tag_event("d", {"event": "round_start", "round": 2}) == {
        "event": "progress", "node": "d", "kind": "round_start", "data": {"round": 2}}
    assert tag_event("d", "raw") == {"event": "progress", "node": "d", "kind": "custom", "data": "raw"}


def test_winner_argument_is_the_winning_side_or_everything_on_a_tie():
    messages = [{"role": "user", "name": "Ada", "content": "A1"}, {"role": "opponent", "name": "Bo", "content": "B1"},
                {"role": "user", "name": "Ada", "content": "A2"}]
    assert winner_argument({"messages": messages, "synthesis": {"winner": "user"}}) == "Ada: A1\n\nAda: A2"
    assert winner_argument({"messages": messages, "synthesis": {"winner": "Bo"}}) == "Bo: B1"
    assert winner_argument({"messages": messages, "synthesis": {"winner": "tie"}}).count("\n\n") == 2


async def test_debate_node_passes_its_config_and_writes_the_answer(modes, llm, ctx):
    llm.script(model="gpt-5", reply="Adopt it gradually.")
    document = load_example("debate-summary")
    document["nodes"][0]["config"].update(models=["openai:gpt-5", "google:gemini-2.5-pro"], panel_size=2,
                                          arbitrators=["openai:gpt-5"], allow_same_family=True, rule="vote",
                                          answer_rule="number")
    events, done = await run_workflow(document, document["sampleInput"], ctx)

    assert CALLS["panel"] == {
        "question": document["sampleInput"]["question"],
        "models": ["openai:gpt-5", "google:gemini-2.5-pro"], "arbitrators": ["openai:gpt-5"], "panel_size": 2,
        "system_prompt": "Answer in at most five sentences and give one concrete reason.",
        "arbitrator_prompt": "Combine the strongest points of the answers into one clear recommendation.",
        "mode": "debate", "allow_same_family": True, "default_arbitrator": ctx.factory.settings.arbitrator_model,
        "rule": "vote", "answer_rule": "number"}
    assert done["state"]["verdict"] == "[debate] Adopt it gradually."
    panel_ctx = CALLS["panel_context"]  # the panel's own context class, sharing the workflow's models and ledger
    assert isinstance(panel_ctx, PanelContext) and panel_ctx.models is ctx.models
    progress = [e for e in events if e["event"] == "progress"]
    assert progress == [{"event": "progress", "node": "debate", "kind": "panelists",
                         "data": {"models": ["openai:gpt-5", "google:gemini-2.5-pro"]}}]
    assert done["usage"]["nodes"]["debate"]["models"][0]["model"] == "openai:gpt-5"
    assert "Verdict: [debate] Adopt it gradually." in llm.requests[-1]["messages"][-1]["content"]


async def test_panel_node_asks_for_raw_answers(modes, llm, ctx):
    document = wf([{"id": "ask", "type": "panel", "output_key": "answers"}], {"input": "string", "answers": "string"})
    _, done = await run_workflow(document, {"input": "Why?"}, ctx)
    assert CALLS["panel"]["mode"] == "panel" and CALLS["panel"]["arbitrators"] is None
    assert CALLS["panel"]["allow_same_family"] is None  # unset: the preset decides when no models are listed
    assert done["state"]["answers"].startswith("[panel] gpt-5 answer: Why")


async def test_duel_node_passes_topic_profile_rounds_and_its_own_context(modes, llm, ctx):
    document = load_example("duel-panel-review")
    document["nodes"][0]["config"].update(model="anthropic:claude-sonnet-4-5", options={"temperature": 0.3})
    events, done = await run_workflow(document, {"topic": "Remote work?"}, ctx)

    # (`messages: []` is LangGraph's empty value for the fake duel's list reducer)
    assert CALLS["duel_input"] == {"topic": "Remote work?", "rounds": 2, "messages": [], "user_profile": {
        "name": "Ada", "bio": "Software engineer who values evidence over anecdotes"}}
    duel_ctx = CALLS["duel_context"]
    assert isinstance(duel_ctx, DuelContext) and duel_ctx.temperature == 0.3
    assert duel_ctx.model == "anthropic:claude-sonnet-4-5" and duel_ctx.models is ctx.models
    duel = done["state"]["duel"]
    assert duel["winner_argument"] == "Ada: Remote works."
    assert duel["synthesis"]["winner"] == "user" and duel["opponent_profile"] == {"name": "Bo"}
    chunks = [e for e in events if e["event"] == "chunk" and e["node"] == "duel"]
    assert chunks and all(e["role"] == "user" for e in chunks)
    assert {"event": "progress", "node": "duel", "kind": "turn_start", "data": {"role": "user"}} in events
    assert done["usage"]["nodes"]["duel"]["models"][0]["model"] == "anthropic:claude-sonnet-4-5"
    review_prompt = llm.requests[-1]["messages"][-1]["content"]
    assert 'A debate on "Remote work?" was won by the user side (evidence)' in review_prompt
    assert review_prompt.endswith("Ada: Remote works.")
    assert [e["node"] for e in events if e["event"] == "node_end"] == ["duel", "review"]


async def test_duel_node_refuses_unknown_options_naming_the_node(modes, ctx):
    document = load_example("duel-panel-review")
    document["nodes"][0]["config"]["options"] = {"temprature": 1}
    with pytest.raises(WorkflowRunError) as caught:
        await run_workflow(document, {"topic": "x"}, ctx)
    assert caught.value.node == "duel" and "unknown option(s) temprature" in str(caught.value)



@pytest.mark.parametrize("rounds", [0, MAX_DUEL_ROUNDS + 1])
async def test_duel_rounds_from_the_state_are_held_to_the_duels_bounds(modes, ctx, rounds):
    document = load_example("duel-panel-review")
    document["state"]["rounds"] = {"type": "integer"}
    document["nodes"][0]["inputs"]["rounds"] = "{rounds}"
    with pytest.raises(WorkflowRunError) as caught:
        await run_workflow(document, {"topic": "x", "rounds": rounds}, ctx)
    assert caught.value.node == "duel" and f"{MIN_DUEL_ROUNDS} to {MAX_DUEL_ROUNDS}, not {rounds}" in str(caught.value)
    assert "duel_input" not in CALLS  # refused before the duel ran

async def test_duel_profile_may_be_a_name(modes, ctx):
    document = load_example("duel-panel-review")
    document["state"]["profile"] = {"type": "any"}
    await run_workflow(document, {"topic": "x", "profile": "Grace"}, ctx)
    assert CALLS["duel_input"]["user_profile"] == {"name": "Grace"}


@pytest.mark.parametrize(("action", "branch"), [("Go ahead with Lyon.", "plan"), ("Do not open Lyon yet.", "memo")])
async def test_round_table_recommendation_feeds_the_condition(modes, llm, ctx, action, branch):
    modes.setitem(sys.modules, "graphs.roundtable", fake_roundtable(action))
    document = load_example("roundtable-decision")
    events, done = await run_workflow(document, document["sampleInput"], ctx)

    agents = CALLS["table_input"]["agents"]
    assert [(a["id"], a["name"]) for a in agents] == [("table-1", "Claire"), ("table-2", "Marc"), ("table-3", "Ines")]
    assert agents[0] == {"id": "table-1", "name": "Claire", "role": "Finance", "persona": agents[0]["persona"],
                         "isDevilsAdvocate": False, "memories": [], "documents": []}
    assert CALLS["table_input"]["question"] == document["sampleInput"]["question"]
    assert done["state"]["route"] == branch and done["state"].get(branch)
    assert done["state"]["outcome"]["total_rounds"] == 1
    assert [e["node"] for e in events if e["event"] == "node_end"] == ["table", "decide", branch]


async def test_round_table_seats_workspace_agents_from_the_context(modes, factory):
    document = load_example("roundtable-decision")
    document["nodes"][0]["config"]["agents"] = "workspace"
    agents = [{"id": "a1", "name": "Zoe", "role": "CEO", "persona": "Bold", "isDevilsAdvocate": False,
               "memories": ["likes growth"], "documents": []}]
    await run_workflow(document, document["sampleInput"], WorkflowContext(models=factory, workspace_agents=agents))
    assert CALLS["table_input"]["agents"] == agents


async def test_workspace_agents_outside_http_runs_are_a_clear_error(factory):
    # Needs no mode at all: the agents are resolved before the round table is built.
    document = load_example("roundtable-decision")
    document["nodes"][0]["config"]["agents"] = "workspace"
    with pytest.raises(WorkflowRunError) as caught:
        await run_workflow(document, document["sampleInput"], WorkflowContext(models=factory))
    assert caught.value.node == "table" and "only known to HTTP runs" in str(caught.value)


async def test_a_panel_node_on_an_empty_question_is_refused_naming_the_node(modes, ctx):
    document = wf([{"id": "ask", "type": "panel", "output_key": "answers"}], {"input": "string", "answers": "string"})
    with pytest.raises(WorkflowRunError) as caught:
        await run_workflow(document, {"input": "   "}, ctx)
    assert caught.value.node == "ask" and "gives no question" in str(caught.value)
    assert "panel_context" not in CALLS  # refused before the panel ran
