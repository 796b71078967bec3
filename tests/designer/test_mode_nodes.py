"""The mode node types against the real modes (`graphs.panel`, `graphs.duel`, `graphs.roundtable`).

Marked `modes`: these fail with ImportError until the mode branches are merged, and must pass after.
Run them alone with `pytest -m modes`.
"""

from __future__ import annotations

import pytest

from parley.designer import WorkflowContext, load_example
from tests.designer.conftest import run_workflow, wf

pytestmark = pytest.mark.modes

PANEL = ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]


def models_asked(llm) -> set[str]:
    return {r["model"] for r in llm.requests}


def prompts(llm) -> str:
    return "\n".join(str(m.get("content")) for r in llm.requests for m in r["messages"])


async def test_debate_node_writes_the_arbitrated_answer(llm, ctx):
    llm.script(model="gpt-5", reply="ARBITRATED: adopt it gradually.")
    document = wf([{"id": "debate", "type": "debate",
                    "config": {"models": PANEL, "arbitrators": ["openai:gpt-5"],
                               "system_prompt": "PANEL-SYSTEM-PROMPT", "arbitrator_prompt": "ARBITER-INSTRUCTIONS"},
                    "inputs": {"input": "{question}"}, "output_key": "verdict"}],
                  {"question": "string", "verdict": "string"})
    events, done = await run_workflow(document, {"question": "Four-day week?"}, ctx)

    assert "ARBITRATED: adopt it gradually." in done["state"]["verdict"]
    assert {"gpt-4o-mini", "claude-sonnet-4-5", "gemini-2.5-pro", "gpt-5"} <= models_asked(llm)
    assert "PANEL-SYSTEM-PROMPT" in prompts(llm) and "ARBITER-INSTRUCTIONS" in prompts(llm)
    assert "Four-day week?" in prompts(llm)
    assert done["usage"]["nodes"]["debate"]["calls"] >= 4
    assert [e["node"] for e in events if e["event"] == "node_end"] == ["debate"]


async def test_panel_node_writes_every_labelled_answer(llm, ctx):
    for model, words in zip(PANEL, ["ALPHA", "BRAVO", "CHARLIE"], strict=True):
        llm.script(model=model.split(":", 1)[1], reply=f"{words} says yes.")
    document = wf([{"id": "panel", "type": "panel", "config": {"models": PANEL}, "output_key": "answers"}],
                  {"input": "string", "answers": "string"})
    _, done = await run_workflow(document, {"input": "Explain CAP."}, ctx)

    answers = done["state"]["answers"]
    for model, words in zip(PANEL, ["ALPHA", "BRAVO", "CHARLIE"], strict=True):
        assert f"{words} says yes." in answers and model.split(":", 1)[1] in answers


async def test_duel_node_writes_transcript_verdict_and_winner_argument(llm, ctx):
    document = wf([{"id": "duel", "type": "duel", "config": {"rounds": 1},
                    "inputs": {"topic": "{topic}", "user_profile": "{profile}"}, "output_key": "duel"}],
                  {"topic": "string", "profile": {"type": "object", "default": {"name": "Ada", "bio": "engineer"}},
                   "duel": "object"})
    events, done = await run_workflow(document, {"topic": "Remote work by default?"}, ctx)

    duel = done["state"]["duel"]
    assert isinstance(duel["opponent_profile"], dict) and duel["opponent_profile"]
    assert duel["messages"] and all({"role", "content"} <= set(m) for m in duel["messages"])
    assert {"winner", "conclusion"} <= set(duel["synthesis"])
    assert isinstance(duel["winner_argument"], str) and duel["winner_argument"]
    assert any(e["event"] == "chunk" and e["node"] == "duel" for e in events)
    assert done["usage"]["nodes"]["duel"]["calls"] >= 2
    assert "Remote work by default?" in prompts(llm)


async def test_round_table_node_with_inline_agents(llm, ctx):
    document = load_example("roundtable-decision")
    events, done = await run_workflow(document, document["sampleInput"], ctx)

    outcome = done["state"]["outcome"]
    assert isinstance(outcome["synthesis"]["recommendedAction"], str)
    assert isinstance(outcome["total_rounds"], int)
    assert done["state"]["route"] in ("plan", "memo") and done["state"][done["state"]["route"]]
    for name in ("Claire", "Marc", "Ines"):
        assert name in prompts(llm)
    assert done["usage"]["nodes"]["table"]["calls"] >= 4


async def test_round_table_node_with_workspace_agents_from_the_context(llm, factory):
    document = load_example("roundtable-decision")
    document["nodes"][0]["config"]["agents"] = "workspace"
    agents = [{"id": "a1", "name": "Zoltan", "role": "CEO", "persona": "Bold founder", "isDevilsAdvocate": False,
               "memories": [], "documents": []}]
    _, done = await run_workflow(document, document["sampleInput"],
                                 WorkflowContext(models=factory, workspace_agents=agents))
    assert "Zoltan" in prompts(llm)
    assert done["state"]["outcome"]["synthesis"]


@pytest.mark.parametrize("name", ["debate-summary", "duel-panel-review", "roundtable-decision"])
async def test_mode_example_runs_as_is(name, llm, ctx):
    document = load_example(name)
    events, done = await run_workflow(document, document["sampleInput"], ctx)
    written = {key for e in events if e["event"] == "node_end" for key in e["keys"]}
    assert written and all(done["state"][key] for key in written)
    finishers = set(document["finish"])
    assert finishers & {e["node"] for e in events if e["event"] == "node_end"}


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



async def test_debate_node_streams_the_arbitrators_tokens_and_panel_progress(llm, ctx):
    document = wf([{"id": "debate", "type": "debate", "config": {"models": PANEL, "arbitrators": ["openai:gpt-5"]},
                    "inputs": {"input": "{question}"}, "output_key": "verdict"}],
                  {"question": "string", "verdict": "string"})
    events, _ = await run_workflow(document, {"question": "Four-day week?"}, ctx)
    chunks = [e for e in events if e["event"] == "chunk" and e["node"] == "debate"]
    progress = [e for e in events if e["event"] == "progress" and e["node"] == "debate"]
    assert chunks and any(p["kind"] == "panelist" for p in progress)


async def test_debate_node_decides_by_its_rule(llm, ctx):
    llm.script(model="gpt-4o-mini", reply="Four days.\nAnswer: 4")
    llm.script(model="claude-sonnet-4-5", reply="Answer: 4")
    llm.script(model="gemini-2.5-pro", reply="Answer: 5")
    document = wf([{"id": "debate", "type": "debate",
                    "config": {"models": PANEL, "arbitrators": ["openai:gpt-5"], "rule": "vote",
                               "answer_rule": "number"},
                    "inputs": {"input": "{question}"}, "output_key": "verdict"}],
                  {"question": "string", "verdict": "string"})
    _, done = await run_workflow(document, {"question": "How many days?"}, ctx)
    assert done["state"]["verdict"].startswith("Four days.\nAnswer: 4\n\n---\n\n**Majority vote**")
    assert "gpt-5" not in models_asked(llm)  # the majority needed no arbitrator
