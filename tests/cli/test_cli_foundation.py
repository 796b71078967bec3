"""The `parley` command line: keys, workspaces and the model layer."""

from __future__ import annotations

import httpx
from typer.testing import CliRunner

from parley.store.keys import hash_key
from parley.cli.main import app

runner = CliRunner()


def test_keys_create_prints_the_plaintext_last_and_stores_only_a_hash(parley_env, sync_db, http):
    result = runner.invoke(app, ["keys", "create", "--user", "ada", "--workspace", "acme",
                                 "--scopes", "debate,chat"])
    assert result.exit_code == 0, result.output
    key = result.output.strip().splitlines()[-1]
    assert key.startswith("pk_")
    stored = sync_db.api_keys.find_one({"user": "ada"})
    assert stored["hash"] == hash_key(key) and stored["scopes"] == ["chat", "debate"] and key not in str(stored)
    assert http.get("/healthz", headers={"Authorization": f"Bearer {key}"}).status_code == 200


def test_keys_create_refuses_unknown_scopes(parley_env, sync_db):
    result = runner.invoke(app, ["keys", "create", "--user", "ada", "--workspace", "acme", "--scopes", "debate,god"])
    assert result.exit_code == 2
    assert "unknown scope(s) god" in result.output
    assert sync_db.api_keys.count_documents({}) == 0


def test_workspace_credit_and_allowance(parley_env, sync_db):
    assert runner.invoke(app, ["workspaces", "credit", "acme", "--add", "2.5"]).exit_code == 0
    assert runner.invoke(app, ["workspaces", "credit", "acme", "--add", "1"]).exit_code == 0
    assert runner.invoke(app, ["workspaces", "allowance", "acme", "--set", "5000"]).exit_code == 0
    ws = sync_db.workspaces.find_one({"_id": "acme"})
    assert ws["creditUsd"] == 3.5 and ws["allowanceTokens"] == 5000
    bad = runner.invoke(app, ["workspaces", "credit", "acme", "--add", "-1"])
    assert bad.exit_code == 2 and "positive" in bad.output
    assert sync_db.workspaces.find_one({"_id": "acme"})["creditUsd"] == 3.5
    shown = runner.invoke(app, ["workspaces", "show", "acme"])
    assert "3.500000" in shown.output and "5000" in shown.output


def test_workspace_default_budget(parley_env, sync_db):
    result = runner.invoke(app, ["workspaces", "budget", "acme", "--max-cost", "0.5", "--max-seconds", "120"])
    assert result.exit_code == 0 and "$0.5, 120 s" in result.output, result.output
    assert sync_db.workspaces.find_one({"_id": "acme"})["budget"] == {"maxCost": 0.5, "maxSeconds": 120.0}
    assert "$0.5, 120 s" in runner.invoke(app, ["workspaces", "show", "acme"], terminal_width=200).output
    bad = runner.invoke(app, ["workspaces", "budget", "acme", "--max-tokens", "0"])
    assert bad.exit_code == 2 and "maxTokens: must be a positive number" in bad.output
    assert runner.invoke(app, ["workspaces", "budget", "acme"]).exit_code == 2  # neither limits nor --clear
    assert runner.invoke(app, ["workspaces", "budget", "acme", "--clear"]).exit_code == 0
    assert sync_db.workspaces.find_one({"_id": "acme"})["budget"] is None


def test_model_chat_streams_through_the_model_layer(parley_env, llm):
    llm.script(model="gpt-5-mini", reply="Bonjour tout le monde.")
    result = runner.invoke(app, ["model", "chat", "Say hello in French", "--model", "openai:gpt-5-mini"])
    assert result.exit_code == 0, result.output
    assert "Bonjour tout le monde." in result.output
    assert "openai:gpt-5-mini:" in result.output and "in," in result.output
    assert llm.requests[-1]["stream"] is True


def test_model_chat_reports_an_unreachable_endpoint(parley_env, monkeypatch):
    from parley.core.embedded import free_port
    from parley.core.settings import get_settings

    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    get_settings.cache_clear()
    result = runner.invoke(app, ["model", "chat", "hi", "--model", "openai:gpt-5"])
    assert result.exit_code == 1
    assert "error" in result.output.lower() and "connection" in result.output.lower()


def test_help_lists_the_commands():
    result = runner.invoke(app, ["--help"])
    for command in ("serve", "model", "keys", "workspaces"):
        assert command in result.output
    assert httpx  # the CLI tests above use real HTTP through the `http` fixture
