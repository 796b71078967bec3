"""`parley agents`: the workspace's agents, documents and memories from the command line, under the API's rules."""

from __future__ import annotations

from typer.testing import CliRunner

from parley.cli.main import app
from parley.core.settings import get_settings
from parley.store.agents import MAX_DOCUMENT_CHARS

runner = CliRunner()


def parley(*args: str):
    return runner.invoke(app, list(args), terminal_width=200)


def test_add_prints_the_id_last_and_list_shows_the_seating_order(parley_env, sync_db):
    first = parley("agents", "add", "Claire", "--role", "Finance", "--persona", "Cash first.")
    assert first.exit_code == 0, first.output
    claire_id = first.output.strip().splitlines()[-1]
    stored = sync_db.agents.find_one({"_id": claire_id})
    assert (stored["workspace"], stored["name"], stored["role"], stored["persona"], stored["model"]) == (
        "default", "Claire", "Finance", "Cash first.", None)
    assert parley("agents", "add", "Marc", "--model", "openai:gpt-5", "--workspace", "acme").exit_code == 0
    assert parley("agents", "add", "Zoe", "--workspace", "acme").exit_code == 0

    listed = parley("agents", "list", "--workspace", "acme").output
    assert listed.index("Marc") < listed.index("Zoe") and "openai:gpt-5" in listed and "Claire" not in listed
    assert "Claire" in parley("agents", "list").output
    assert "No agents in workspace 'nobody'" in parley("agents", "list", "--workspace", "nobody").output


def test_add_and_edit_refuse_what_the_api_refuses(parley_env, sync_db):
    too_long = parley("agents", "add", "x" * 101)
    assert too_long.exit_code == 2 and "name: String should have at most 100 characters" in too_long.output
    blank = parley("agents", "add", "   ")
    assert blank.exit_code == 2 and "name: String should have at least 1 character" in blank.output
    assert sync_db.agents.count_documents({}) == 0

    parley("agents", "add", "Claire")
    assert parley("agents", "edit", "Claire").exit_code == 2  # nothing to change
    assert "no agent 'Nobody'" in parley("agents", "edit", "Nobody", "--role", "x").output
    persona = parley("agents", "edit", "claire", "--persona", "p" * 8001)
    assert persona.exit_code == 2 and "persona: String should have at most 8000 characters" in persona.output


def test_a_model_this_deployment_cannot_reach_is_refused(parley_env, monkeypatch, sync_db):
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    get_settings.cache_clear()
    refused = parley("agents", "add", "Claire", "--model", "openai:gpt-5")
    assert refused.exit_code == 2 and "model: openai:gpt-5: no API key" in refused.output
    assert sync_db.agents.count_documents({}) == 0
    assert parley("agents", "add", "Claire", "--model", "local:smollm2").exit_code == 0  # started when needed


def test_edit_changes_fields_by_name_or_id_and_restores_the_default_model(parley_env, sync_db):
    agent_id = parley("agents", "add", "Claire", "--role", "Finance", "--model", "openai:gpt-5").output.split()[-1]
    result = parley("agents", "edit", "claire", "--role", "CFO", "--name", "Claire B.")
    assert result.exit_code == 0, result.output
    stored = sync_db.agents.find_one({"_id": agent_id})
    assert (stored["name"], stored["role"], stored["model"]) == ("Claire B.", "CFO", "openai:gpt-5")
    assert parley("agents", "edit", agent_id, "--default-model", "--role", "").exit_code == 0
    stored = sync_db.agents.find_one({"_id": agent_id})
    assert stored["model"] is None and stored["role"] == ""
    assert parley("agents", "edit", agent_id, "--model", "local:smollm2").exit_code == 0  # started when needed
    assert parley("agents", "edit", agent_id, "--model", "x", "--default-model").exit_code == 2


def test_documents_are_added_from_text_or_file_and_listed(parley_env, sync_db, tmp_path):
    parley("agents", "add", "Claire")
    added = parley("agents", "documents", "Claire", "--title", "Lyon lease", "--text", "42,000 EUR a year.")
    assert added.exit_code == 0, added.output
    assert "Added Lyon lease (18 characters) to Claire." in added.output
    notes = tmp_path / "pipeline.md"
    notes.write_text("Three letters of intent in Lyon.", encoding="utf-8")
    assert parley("agents", "documents", "Claire", "--file", str(notes)).exit_code == 0
    listed = parley("agents", "documents", "Claire").output
    assert "Lyon lease" in listed and "pipeline.md" in listed and "32" in listed
    docs = list(sync_db.agent_documents.find().sort("createdAt", 1))
    assert [d["title"] for d in docs] == ["Lyon lease", "pipeline.md"] and docs[1]["text"].startswith("Three")

    big = tmp_path / "big.txt"
    big.write_text("x" * (MAX_DOCUMENT_CHARS + 1))
    refused = parley("agents", "documents", "Claire", "--file", str(big))
    assert refused.exit_code == 2 and "a document holds at most 100000" in refused.output
    assert parley("agents", "documents", "Claire", "--text", "no title").exit_code == 2
    assert parley("agents", "documents", "Claire", "--text", "a", "--file", str(notes), "--title", "t").exit_code == 2
    assert sync_db.agent_documents.count_documents({}) == 2


def test_memories_are_listed_and_forgotten(parley_env, sync_db):
    agent_id = parley("agents", "add", "Claire").output.split()[-1]
    assert "remembers nothing yet" in parley("agents", "memories", "Claire").output
    sync_db.agent_memories.insert_many([
        {"_id": "mem_1", "workspace": "default", "agentId": agent_id, "content": "Lyon demand is real.",
         "conversationId": "conv_1", "createdAt": __import__("datetime").datetime(2026, 1, 1)},
        {"_id": "mem_2", "workspace": "default", "agentId": agent_id, "content": "Leases need a break clause.",
         "conversationId": "conv_1", "createdAt": __import__("datetime").datetime(2026, 1, 2)},
    ])
    shown = parley("agents", "memories", "Claire").output
    assert shown.index("Leases need a break clause.") < shown.index("Lyon demand is real.")  # newest first
    assert "forgot 2 memories" in parley("agents", "memories", "Claire", "--forget").output
    assert sync_db.agent_memories.count_documents({}) == 0
