"""`parley ask`: the panel graph run in-process from the command line."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from parley.cli.main import app
from parley.core.settings import get_settings

PANEL = "openai:gpt-5,anthropic:claude-sonnet-4-5,google:gemini-2.5-pro"


@pytest.fixture
def env(parley_env, monkeypatch):
    monkeypatch.setenv("PARLEY_DEBATE_MODELS", PANEL)
    monkeypatch.setenv("PARLEY_ARBITRATOR_MODEL", "openai:gpt-4o")
    get_settings.cache_clear()
    # The panel's models are priced: a question reserves its estimate from workspace default's credit, as the API's.
    assert CliRunner().invoke(app, ["workspaces", "credit", "default", "--add", "5"]).exit_code == 0
    yield get_settings()
    get_settings.cache_clear()


def test_ask_prints_the_arbitrated_answer_and_the_panel(env, llm):
    llm.script(model="gpt-4o", reply="Forty-two.")
    llm.script(model="gemini-2.5-pro", status=401)
    result = CliRunner().invoke(app, ["ask", "What is the answer?", "--router", "debate"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Forty-two." in result.output
    for model in PANEL.split(","):
        assert model in result.output
    assert "answered" in result.output and "auth" in result.output
    assert "arbitrator openai:gpt-4o" in result.output


def test_ask_panel_prints_every_answer(env, llm):
    llm.script(model="gpt-5", reply="Yes.")
    result = CliRunner().invoke(app, ["ask", "Tabs?", "--panel"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "**openai:gpt-5**\n\nYes.\n\n---\n\n**anthropic:claude-sonnet-4-5**" in result.output
    assert not any(r["model"] == "gpt-4o" for r in llm.requests)


def test_ask_with_models_and_a_stored_router(env, llm, sync_db):
    result = CliRunner().invoke(app, ["ask", "Q?", "--model", "openai:gpt-5", "--model", "openai:gpt-5-mini"])
    assert result.exit_code == 1 and "distinct families" in result.output
    sync_db.routers.insert_one({"workspace": "default", "id": "solo", "models": ["openai:gpt-4o"], "debate": False,
                                "panel_size": 3})
    llm.script(model="gpt-4o", reply="Alone.")
    result = CliRunner().invoke(app, ["ask", "Q?", "--router", "solo"])
    assert result.exit_code == 0 and "Alone." in result.output
    missing = CliRunner().invoke(app, ["ask", "Q?", "--router", "nope"])
    assert missing.exit_code == 2 and "no router 'nope'" in missing.output


def test_ask_can_fill_the_panel_by_resampling(env, llm, sync_db):
    result = CliRunner().invoke(app, ["ask", "Q?", "--model", "openai:gpt-4o", "--panel", "--allow-same-family"],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    for seat in ("**openai:gpt-4o**", "**openai:gpt-4o #2**", "**openai:gpt-4o #3**"):
        assert seat in result.output
    sync_db.routers.insert_one({"workspace": "default", "id": "same", "models": ["openai:gpt-4o"], "debate": True,
                                "panel_size": 2, "allow_same_family": True})
    llm.reset()
    result = CliRunner().invoke(app, ["ask", "Q?", "--router", "same"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "openai:gpt-4o #2" in result.output and len(llm.requests) == 3  # two samples and the arbitrator
    refused = CliRunner().invoke(app, ["ask", "Q?", "--router", "same", "--distinct-families"])
    assert refused.exit_code == 1 and "distinct families" in refused.output


def test_ask_decides_by_a_rule(env, llm):
    llm.script(model="gpt-5", reply="Answer: 16")
    llm.script(model="claude-sonnet-4-5", reply="Eight each.\nAnswer: 16")
    llm.script(model="gemini-2.5-pro", reply="Answer: 14")
    result = CliRunner().invoke(app, ["ask", "Legs of two spiders?", "--rule", "vote", "--answer-rule", "number"],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "**Majority vote** (answers read as `number`): 16 × 2" in result.output
    assert "rule vote: majority chose openai:gpt-5's answer" in result.output
    assert not any(r["model"] == "gpt-4o" for r in llm.requests)
    refused = CliRunner().invoke(app, ["ask", "Q?", "--rule", "coin"])
    assert refused.exit_code == 1 and "rule must be one of synthesis, vote, rank, best-of-n" in refused.output
    refused = CliRunner().invoke(app, ["ask", "Q?", "--rule", "vote", "--panel"])
    assert refused.exit_code == 1 and "a rule decides a debate" in refused.output


def test_ask_runs_a_models_self_moa(env, llm):
    llm.script(model="gpt-4o", reply="Sampled.")
    result = CliRunner().invoke(app, ["ask", "Q?", "--router", "self-moa/openai:gpt-4o", "--rule", "rank"],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "openai:gpt-4o #3" in result.output and "rule rank:" in result.output
