"""`parley keys list` and `parley keys revoke`: keys by id, never their secret; a revoked key is refused at once."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from parley.cli.main import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one table row a line


def parley(*args: str):
    return runner.invoke(app, list(args), terminal_width=200)


def create(user: str, workspace: str, scopes: str) -> tuple[str, str]:
    """Create a key with the CLI; return its id and plaintext."""
    result = parley("keys", "create", "--user", user, "--workspace", workspace, "--scopes", scopes)
    assert result.exit_code == 0, result.output
    return result.output.split()[1], result.output.strip().splitlines()[-1]


def row(output: str, key_id: str) -> str:
    return next(line for line in output.splitlines() if key_id in line)


def test_list_shows_each_key_without_its_secret(parley_env, sync_db, http):
    ada_id, ada_key = create("ada", "acme", "debate,chat")
    bob_id, bob_key = create("bob", "globex", "readonly")
    assert http.get("/v1/me", headers={"Authorization": f"Bearer {ada_key}"}).status_code == 200

    listed = parley("keys", "list")
    assert listed.exit_code == 0, listed.output
    ada, bob = row(listed.output, ada_id), row(listed.output, bob_id)
    assert listed.output.index(ada_id) < listed.output.index(bob_id)  # oldest first
    assert "ada" in ada and "acme" in ada and "chat, debate" in ada and "active" in ada
    assert "bob" in bob and "globex" in bob and "readonly" in bob
    # Ada's key was used (to the minute), Bob's never; the created time is shown for both.
    used = sync_db.api_keys.find_one({"_id": ada_id})["lastUsedAt"]
    assert used.strftime("%Y-%m-%d %H:%M UTC") in ada and "never" in bob and ada.count(" UTC") == 2
    stored = sync_db.api_keys.find_one({"_id": bob_id})
    for secret in (ada_key, bob_key, ada_key[3:], stored["hash"]):
        assert secret not in listed.output

    only_acme = parley("keys", "list", "--workspace", "acme")
    assert ada_id in only_acme.output and bob_id not in only_acme.output
    assert "No keys match." in parley("keys", "list", "--user", "carol").output


def test_a_key_is_used_to_the_minute_not_written_on_every_request(parley_env, sync_db, http):
    key_id, key = create("ada", "acme", "debate")
    headers = {"Authorization": f"Bearer {key}"}
    assert http.get("/v1/me", headers=headers).status_code == 200
    first = sync_db.api_keys.find_one({"_id": key_id})["lastUsedAt"]
    assert http.get("/v1/me", headers=headers).status_code == 200
    assert sync_db.api_keys.find_one({"_id": key_id})["lastUsedAt"] == first


def test_revoke_refuses_the_key_on_its_next_request(parley_env, sync_db, http):
    key_id, key = create("ada", "acme", "debate")
    other_id, other = create("ada", "acme", "debate")
    headers = {"Authorization": f"Bearer {key}"}
    assert http.get("/api/debates", headers=headers).status_code == 200

    revoked = parley("keys", "revoke", key_id)
    assert revoked.exit_code == 0, revoked.output
    assert f"Revoked {key_id} (ada in acme)." in revoked.output
    refused = http.get("/api/debates", headers=headers)
    assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}
    assert http.get("/v1/me", headers={"x-api-key": key}).status_code == 401
    # Only that key: the user's other key still works.
    assert http.get("/api/debates", headers={"Authorization": f"Bearer {other}"}).status_code == 200

    assert "revoked 20" in row(parley("keys", "list").output, key_id)
    assert "active" in row(parley("keys", "list").output, other_id)
    again = parley("keys", "revoke", key_id)
    assert again.exit_code == 0 and "was already revoked" in again.output
    stored = sync_db.api_keys.find_one({"_id": key_id})
    assert stored["revoked"] is True and stored["revokedAt"] is not None


def test_revoking_an_unknown_id_is_refused(parley_env, sync_db):
    create("ada", "acme", "debate")
    result = parley("keys", "revoke", "key_nope")
    assert result.exit_code == 2 and "no key key_nope" in result.output
    assert sync_db.api_keys.count_documents({"revoked": True}) == 0
