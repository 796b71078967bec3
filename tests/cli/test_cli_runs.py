"""The runs the CLI makes (`parley debate`, `parley ask`, `parley workflow run`) go through the run engine as the API's
do: stored for user `local` in workspace `default`, listed by `GET /v1/runs` (the Studio's History) with the first
key's user and workspace, and billed as the API bills them."""

from __future__ import annotations

from typer.testing import CliRunner

from parley.cli.main import app
from tests.support.duel import script_duel

runner = CliRunner()


def parley(*args: str):
    return runner.invoke(app, list(args), terminal_width=200)


def history(http, make_key, **query: str) -> list[dict]:
    """The runs `GET /v1/runs` lists for a key of user local in workspace default (the first key's)."""
    key = make_key(["debate", "chat", "conversations", "workflows"], user="local", workspace="default")
    resp = http.get("/v1/runs", params=query, headers={"Authorization": f"Bearer {key}"})
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def test_a_cli_debate_is_stored_and_listed_in_history(http, make_key, llm, sync_db):
    script_duel(llm)
    result = parley("debate", "Should remote work be the default?", "--name", "Ada", "--rounds", "1")
    assert result.exit_code == 0, result.output
    [run] = history(http, make_key)
    assert (run["kind"], run["status"], run["user"]) == ("duel", "completed", "local")
    assert run["title"] == "Should remote work be the default?" and run["id"] in result.output
    debate = sync_db.debates.find_one({"_id": run["id"]})
    assert debate["workspace"] == "default" and debate["synthesis"]["winner"]


def test_a_cli_question_to_a_panel_is_stored_and_listed_in_history(http, make_key, llm):
    llm.script(reply="Forty-two.")
    # A model without a price costs nothing: the question needs no credit.
    result = parley("ask", "What is the answer?", "--model", "openai:house-model", "--no-debate")
    assert result.exit_code == 0, result.output
    assert "Forty-two." in result.output
    [run] = history(http, make_key, kind="panel")
    assert (run["status"], run["user"], run["title"]) == ("completed", "local", "What is the answer?")
    assert run["usage"]["calls"] == 1 and run["id"] in result.output


def test_a_cli_workflow_run_is_stored_and_listed_in_history(http, make_key, llm, sync_db):
    llm.script(match="Write a brief", reply="Tides follow the moon.")
    result = parley("workflow", "run", "outline-brief", "--input", "topic=tides")
    assert result.exit_code == 0, result.output
    [run] = history(http, make_key, kind="workflow")
    assert (run["status"], run["user"]) == ("completed", "local") and run["id"] in result.output
    stored = sync_db.workflow_runs.find_one({"_id": run["id"]})
    assert stored["workspace"] == "default" and "Tides follow the moon." in str(stored["output"])


def test_a_cli_question_to_priced_models_is_paid_from_the_workspace_credit(parley_env, llm, sync_db):
    panel = ["--model", "openai:gpt-5", "--model", "anthropic:claude-sonnet-4-5", "--model", "google:gemini-2.5-pro",
             "--arbitrator", "openai:gpt-4o"]
    refused = parley("ask", "Q?", *panel)
    assert refused.exit_code == 1 and "Insufficient credits" in refused.output
    assert "parley workspaces credit default --add USD" in " ".join(refused.output.split())
    assert not llm.requests  # refused before any model was called

    assert parley("workspaces", "credit", "default", "--add", "1").exit_code == 0
    answered = parley("ask", "Q?", *panel)
    assert answered.exit_code == 0, answered.output
    workspace = sync_db.workspaces.find_one({"_id": "default"})
    assert 0 < workspace["creditUsd"] < 1  # settled to what the calls cost
