"""The mode node types (`debate`, `panel`, `duel`, `roundtable`) on the real mode graphs (`parley.graphs.panel`,
`parley.graphs.duel`, `parley.graphs.roundtable`) and the scripted model server.

What each adapter passes in is read off what the models were sent (models, prompts, rounds, temperature) and off
the context it built (`designer.modes.mode_context`, watched): the mode's own context class, sharing the workflow's
models and ledger. What it makes of the result: the output key, the nested events tagged with the workflow node,
the node's usage; and an input it cannot use is refused naming the node, before any model is called.
"""

from __future__ import annotations

from typing import Any

import pytest

from parley.core.limits import MAX_DUEL_ROUNDS, MIN_DUEL_ROUNDS
from parley.core.settings import Settings
from parley.designer import WorkflowContext, WorkflowRunError, load_example
from parley.designer import modes as mode_adapters
from parley.designer.modes import tag_event, winner_argument
from parley.graphs.duel import DuelContext
from parley.graphs.panel import PanelContext
from parley.graphs.roundtable import RoundTableContext
from parley.llm.factory import ModelFactory
from tests.designer.conftest import run_workflow, wf
from tests.support.duel import JUDGE_MARK, SELECT_MARK, USER_REPLY, script_duel

PANEL = ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]
SYNTHESIZER = "You are the synthesizer of a round-table debate"


def models_asked(llm) -> set[str]:
    return {r["model"] for r in llm.requests}


def text_of(request: dict) -> str:
    return "\n".join(str(m.get("content")) for m in request["messages"])


def prompts(llm) -> str:
    return "\n".join(text_of(r) for r in llm.requests)


def asked_with(llm, words: str) -> list[dict]:
    """The requests whose messages contain `words`."""
    return [r for r in llm.requests if words in text_of(r)]


@pytest.fixture
def contexts(monkeypatch) -> list[Any]:
    """Every context a mode node hands its graph, in order (`designer.modes.mode_context`, watched)."""
    made: list[Any] = []
    real = mode_adapters.mode_context

    def watched(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(mode_adapters, "mode_context", watched)
    return made


def shares_the_workflows(mode_ctx: Any, ctx: WorkflowContext, node: str) -> bool:
    """The mode's context has the workflow's models, and its ledger is the node's: every call it recorded is the
    node's and is in the workflow's ledger too."""
    records = mode_ctx.ledger.records
    return (mode_ctx.models is ctx.models and bool(records) and all(r.node == node for r in records)
            and all(any(r is seen for seen in ctx.ledger.records) for r in records))


# --- the adapters' own helpers ----------------------------------------------------------------


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


# --- debate and panel -------------------------------------------------------------------------


async def test_debate_node_passes_its_config_and_writes_the_answer(llm, ctx, contexts):
    llm.script(model="gpt-5", reply="Adopt it gradually.")
    document = load_example("debate-summary")
    document["nodes"][0]["config"].update(models=PANEL, panel_size=2, arbitrators=["openai:gpt-5"])
    question = document["sampleInput"]["question"]
    events, done = await run_workflow(document, document["sampleInput"], ctx)

    # The arbitrator: the one listed, with the node's arbitrator prompt.
    arbitrated = asked_with(llm, "Combine the strongest points of the answers into one clear recommendation.")
    # The panel: the first two families of the listed models, each sent the node's system prompt and the question.
    panelists = [r for r in asked_with(llm, "Answer in at most five sentences and give one concrete reason.")
                 if r not in arbitrated]
    assert sorted(r["model"] for r in panelists) == ["claude-sonnet-4-5", "gpt-4o-mini"]
    assert all(question in text_of(r) for r in panelists)
    assert {r["model"] for r in arbitrated} == {"gpt-5"} and question in text_of(arbitrated[0])
    assert "Adopt it gradually." in done["state"]["verdict"]
    # Its own context class, sharing the workflow's models and (through the node's) its ledger.
    (panel_ctx,) = contexts
    assert type(panel_ctx) is PanelContext and shares_the_workflows(panel_ctx, ctx, "debate")
    assert {"event": "progress", "node": "debate", "kind": "panelists",
            "data": {"models": ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5"]}} in events
    assert any(e["event"] == "chunk" and e["node"] == "debate" for e in events)  # the arbitrator's tokens
    used = done["usage"]["nodes"]["debate"]
    assert {m["model"] for m in used["models"]} == {"openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5",
                                                    "openai:gpt-5"} and used["calls"] == 3
    assert "Verdict: Adopt it gradually." in asked_with(llm, "Summarize this verdict")[0]["messages"][-1]["content"]
    assert [e["node"] for e in events if e["event"] == "node_end"] == ["debate", "summarize"]


async def test_debate_node_without_arbitrators_asks_the_deployments(llm, tmp_path):
    settings = Settings(openai_base_url=llm.base_url, openai_api_key="sk-test", openai_model="openai:gpt-4o-mini",
                        parley_arbitrator_model="openai:o3", parley_home=tmp_path, _env_file=None)
    document = wf([{"id": "debate", "type": "debate", "config": {"models": PANEL, "arbitrator_prompt": "ARBITER"},
                    "inputs": {"input": "{question}"}, "output_key": "verdict"}],
                  {"question": "string", "verdict": "string"})
    _, done = await run_workflow(document, {"question": "Four-day week?"},
                                 WorkflowContext(models=ModelFactory(settings)))
    assert {r["model"] for r in asked_with(llm, "ARBITER")} == {"o3"}
    assert done["state"]["verdict"].startswith("o3 answer:")


@pytest.mark.parametrize("allow", [True, False])
async def test_debate_node_passes_allow_same_family(llm, ctx, allow):
    """Two models of one family fill a panel of two only when the node allows it."""
    document = wf([{"id": "debate", "type": "debate",
                    "config": {"models": ["openai:gpt-5", "openai:gpt-5-mini"], "panel_size": 2,
                               "arbitrators": ["openai:gpt-5"], "allow_same_family": allow},
                    "inputs": {"input": "{question}"}, "output_key": "verdict"}],
                  {"question": "string", "verdict": "string"})
    if allow:
        _, done = await run_workflow(document, {"question": "Four-day week?"}, ctx)
        assert models_asked(llm) == {"gpt-5", "gpt-5-mini"} and done["state"]["verdict"]
    else:
        with pytest.raises(WorkflowRunError) as caught:
            await run_workflow(document, {"question": "Four-day week?"}, ctx)
        assert caught.value.node == "debate" and "famil" in str(caught.value)
        assert llm.requests == []


async def test_debate_node_decides_by_its_rule(llm, ctx):
    llm.script(model="gpt-4o-mini", reply="Four days.\nAnswer: 4")
    llm.script(model="claude-sonnet-4-5", reply="Answer: 4")
    llm.script(model="gemini-2.5-pro", reply="Answer: 5")
    document = wf([{"id": "debate", "type": "debate",
                    "config": {"models": PANEL, "arbitrators": ["openai:gpt-5"], "rule": "vote",
                               "answer_rule": "number"},
                    "inputs": {"input": "{question}"}, "output_key": "verdict"}],
                  {"question": "string", "verdict": "string"})
    events, done = await run_workflow(document, {"question": "How many days?"}, ctx)
    assert done["state"]["verdict"].startswith("Four days.\nAnswer: 4\n\n---\n\n**Majority vote**")
    assert "gpt-5" not in models_asked(llm)  # the majority needed no arbitrator
    assert any(e["event"] == "progress" and e["node"] == "debate" and e["kind"] == "decision" for e in events)


async def test_panel_node_writes_every_labelled_raw_answer(llm, ctx):
    for model, words in zip(PANEL, ["ALPHA", "BRAVO", "CHARLIE"], strict=True):
        llm.script(model=model.split(":", 1)[1], reply=f"{words} says yes.")
    document = wf([{"id": "panel", "type": "panel", "config": {"models": PANEL}, "output_key": "answers"}],
                  {"input": "string", "answers": "string"})
    events, done = await run_workflow(document, {"input": "Explain CAP."}, ctx)

    answers = done["state"]["answers"]
    for model, words in zip(PANEL, ["ALPHA", "BRAVO", "CHARLIE"], strict=True):
        assert f"{words} says yes." in answers and model.split(":", 1)[1] in answers
    assert len(llm.requests) == 3  # raw answers: no arbitrator
    assert sum(e["event"] == "progress" and e["kind"] == "panelist" for e in events) == 3


async def test_panel_node_listing_no_models_asks_the_preset(llm, ctx):
    document = wf([{"id": "ask", "type": "panel", "output_key": "answers"}], {"input": "string", "answers": "string"})
    _, done = await run_workflow(document, {"input": "Why?"}, ctx)
    preset = ctx.factory.settings.debate_models
    assert models_asked(llm) == {m.split(":", 1)[1] for m in preset} and len(llm.requests) == len(preset)
    assert all(f"{m.split(':', 1)[1]} answer: Why" in done["state"]["answers"] for m in preset)


async def test_a_panel_node_on_an_empty_question_is_refused_naming_the_node(llm, ctx):
    document = wf([{"id": "ask", "type": "panel", "output_key": "answers"}], {"input": "string", "answers": "string"})
    with pytest.raises(WorkflowRunError) as caught:
        await run_workflow(document, {"input": "   "}, ctx)
    assert caught.value.node == "ask" and "gives no question" in str(caught.value)
    assert llm.requests == []  # refused before the panel ran


# --- duel -------------------------------------------------------------------------------------


async def test_duel_node_passes_topic_profile_rounds_and_its_own_context(llm, ctx, contexts):
    script_duel(llm)
    document = load_example("duel-panel-review")
    document["nodes"][0]["config"].update(model="anthropic:claude-sonnet-4-5", options={"temperature": 0.3})
    events, done = await run_workflow(document, {"topic": "Remote work?"}, ctx)

    turns = asked_with(llm, "You are Ada,")
    assert len(turns) == 2  # the example's two rounds, one turn of the user's side each
    assert all("Remote work?" in text_of(r) for r in turns)
    assert "values evidence over anecdotes" in text_of(turns[0])  # the profile's bio
    assert {r["temperature"] for r in turns} == {0.3}
    duel_calls = turns + asked_with(llm, "You are Margaret Hale,") + asked_with(llm, SELECT_MARK)
    duel_calls += asked_with(llm, JUDGE_MARK)
    assert {r["model"] for r in duel_calls} == {"claude-sonnet-4-5"}
    duel_ctx = contexts[0]
    assert type(duel_ctx) is DuelContext and duel_ctx.temperature == 0.3
    assert duel_ctx.model == "anthropic:claude-sonnet-4-5" and shares_the_workflows(duel_ctx, ctx, "duel")

    duel = done["state"]["duel"]
    assert duel["winner_argument"] == f"Ada: {USER_REPLY}\n\nAda: {USER_REPLY}"
    assert duel["synthesis"]["winner"] == "user" and duel["opponent_profile"]["name"] == "Margaret Hale"
    assert len(duel["messages"]) == 4
    chunks = [e for e in events if e["event"] == "chunk" and e["node"] == "duel"]
    assert chunks and {e["speaker"]["name"] for e in chunks} == {"Ada", "Margaret Hale"}
    assert any(e["event"] == "progress" and e["node"] == "duel" and e["kind"] == "start"
               and e["data"]["role"] == "user" for e in events)
    assert {m["model"] for m in done["usage"]["nodes"]["duel"]["models"]} == {"anthropic:claude-sonnet-4-5"}
    review_prompt = asked_with(llm, "Review the winning argument")[0]["messages"][-1]["content"]
    assert 'A debate on "Remote work?" was won by the user side (' in review_prompt
    assert review_prompt.endswith(f"Ada: {USER_REPLY}")
    assert [e["node"] for e in events if e["event"] == "node_end"] == ["duel", "review"]


async def test_duel_node_refuses_unknown_options_naming_the_node(llm, ctx):
    document = load_example("duel-panel-review")
    document["nodes"][0]["config"]["options"] = {"temprature": 1}
    with pytest.raises(WorkflowRunError) as caught:
        await run_workflow(document, {"topic": "x"}, ctx)
    assert caught.value.node == "duel" and "unknown option(s) temprature" in str(caught.value)
    assert llm.requests == []


@pytest.mark.parametrize("rounds", [0, MAX_DUEL_ROUNDS + 1])
async def test_duel_rounds_from_the_state_are_held_to_the_duels_bounds(llm, ctx, rounds):
    document = load_example("duel-panel-review")
    document["state"]["rounds"] = {"type": "integer"}
    document["nodes"][0]["inputs"]["rounds"] = "{rounds}"
    with pytest.raises(WorkflowRunError) as caught:
        await run_workflow(document, {"topic": "x", "rounds": rounds}, ctx)
    assert caught.value.node == "duel" and f"{MIN_DUEL_ROUNDS} to {MAX_DUEL_ROUNDS}, not {rounds}" in str(caught.value)
    assert llm.requests == []  # refused before the duel ran


async def test_duel_rounds_and_profile_from_the_state(llm, ctx):
    script_duel(llm, user_name="Grace")
    document = load_example("duel-panel-review")
    document["state"] |= {"rounds": {"type": "integer"}, "profile": {"type": "any"}}
    document["nodes"][0]["inputs"]["rounds"] = "{rounds}"
    _, done = await run_workflow(document, {"topic": "x", "rounds": 1, "profile": "Grace"}, ctx)
    assert len(asked_with(llm, "You are Grace,")) == 1  # a name is a profile; one round, one turn
    assert [m["name"] for m in done["state"]["duel"]["messages"]] == ["Grace", "Margaret Hale"]


# --- round table ------------------------------------------------------------------------------


def synthesis(action: str) -> dict[str, Any]:
    return {"summary": "The table weighed Lyon.", "debateEvolution": "Marc moved.", "devilsAdvocateMainAttack": "Cost.",
            "consensus": [], "riskPoints": [], "recommendedAction": action, "conditions": [],
            "confidenceLevel": "medium", "urgency": "low"}


@pytest.mark.parametrize(("action", "branch"), [("Go ahead with Lyon.", "plan"), ("Do not open Lyon yet.", "memo")])
async def test_round_table_recommendation_feeds_the_condition(llm, ctx, contexts, action, branch):
    llm.script(match=SYNTHESIZER, json=synthesis(action))
    document = load_example("roundtable-decision")
    question = document["sampleInput"]["question"]
    events, done = await run_workflow(document, document["sampleInput"], ctx)

    outcome = done["state"]["outcome"]
    speakers = {(m["agentId"], m["agentName"]) for m in outcome["transcript"]}
    assert {("table-1", "Claire"), ("table-2", "Marc"), ("table-3", "Ines")} < speakers  # and the devil's advocate
    claire = asked_with(llm, "You are Claire,")[0]
    assert "Careful controller who checks the cash runway first." in text_of(claire) and question in text_of(claire)
    assert outcome["synthesis"]["recommendedAction"] == action and isinstance(outcome["total_rounds"], int)
    assert type(contexts[0]) is RoundTableContext and shares_the_workflows(contexts[0], ctx, "table")
    assert any(e["event"] == "progress" and e["node"] == "table" and e["kind"] == "round_start" for e in events)
    assert done["usage"]["nodes"]["table"]["calls"] >= 4
    assert done["state"]["route"] == branch and done["state"].get(branch)
    assert f"The team decided: {action}" in prompts(llm)
    assert [e["node"] for e in events if e["event"] == "node_end"] == ["table", "decide", branch]


async def test_round_table_seats_workspace_agents_from_the_context(llm, factory):
    document = load_example("roundtable-decision")
    document["nodes"][0]["config"]["agents"] = "workspace"
    agents = [{"id": "a1", "name": "Zoltan", "role": "CEO", "persona": "Bold founder", "isDevilsAdvocate": False,
               "memories": ["likes growth"], "documents": []}]
    _, done = await run_workflow(document, document["sampleInput"],
                                 WorkflowContext(models=factory, workspace_agents=agents))
    zoltan = asked_with(llm, "You are Zoltan,")
    assert zoltan and "Bold founder" in text_of(zoltan[0]) and "likes growth" in text_of(zoltan[0])
    assert "a1" in {m["agentId"] for m in done["state"]["outcome"]["transcript"]}
    assert "Claire" not in prompts(llm)  # the inline table is not seated
    assert done["state"]["outcome"]["synthesis"]


async def test_workspace_agents_outside_http_runs_are_a_clear_error(llm, factory):
    document = load_example("roundtable-decision")
    document["nodes"][0]["config"]["agents"] = "workspace"
    with pytest.raises(WorkflowRunError) as caught:
        await run_workflow(document, document["sampleInput"], WorkflowContext(models=factory))
    assert caught.value.node == "table" and "only known to HTTP runs" in str(caught.value)
    assert llm.requests == []


def test_workspace_agents_over_http(http, make_key, llm):
    """`"agents": "workspace"` seats the caller's workspace agents (created through the round table's API)."""
    key = make_key(["workflows", "conversations"])
    headers = {"Authorization": f"Bearer {key}"}
    created = http.post("/v1/agents", headers=headers,
                        json={"name": "Zoltan", "role": "CEO", "persona": "Bold founder"})
    assert created.status_code in (200, 201), created.text
    document = load_example("roundtable-decision")
    document["nodes"][0]["config"]["agents"] = "workspace"
    resp = http.post("/v1/workflows/runs", headers=headers, json={"workflow": document})
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "completed"
    assert "Zoltan" in prompts(llm)


# --- every mode example -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["debate-summary", "duel-panel-review", "roundtable-decision"])
async def test_mode_example_runs_as_is(name, llm, ctx):
    document = load_example(name)
    events, done = await run_workflow(document, document["sampleInput"], ctx)
    written = {key for e in events if e["event"] == "node_end" for key in e["keys"]}
    assert written and all(done["state"][key] for key in written)
    finishers = set(document["finish"])
    assert finishers & {e["node"] for e in events if e["event"] == "node_end"}
