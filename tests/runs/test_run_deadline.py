"""A run has a total deadline (PARLEY_RUN_DEADLINE): past it, it is stopped and stored `failed` with the code
`run_deadline`, its listeners get a last `error` event, and its usage and reservation are settled as for any
failure. The model answers are held at a gate that never opens, so only the deadline can end these runs."""

from __future__ import annotations

import pytest

from tests.support.duel import script_duel
from tests.support.sse import parse_sse

DEADLINE = 2.0


@pytest.fixture
def parley_env(parley_env):
    parley_env.parley_run_deadline = DEADLINE
    return parley_env


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_duel_past_its_deadline_fails_with_run_deadline(http, make_key, llm, sync_db):
    script_duel(llm, user_turn={"hold": "never"})
    key = make_key(["debate"])
    resp = http.post("/api/debate", json={"topic": "Is tea better than coffee?", "userProfile": {"name": "Ada"},
                                          "rounds": 2}, headers=auth(key))
    events = parse_sse(resp.text)
    run_id = resp.headers["x-run-id"]
    assert events[0].event == "init" and events[-1].event == "error"
    assert events[-1].json()["code"] == "run_deadline" and "PARLEY_RUN_DEADLINE" in events[-1].json()["message"]
    run = http.get(f"/v1/runs/{run_id}", headers=auth(key)).json()
    assert run["status"] == "failed" and run["error"]["code"] == "run_deadline"
    # The opponent was chosen and billed; the held turn reached the provider and is billed too, at an estimate.
    assert run["usage"]["calls"] == 2
    assert sync_db.debates.find_one({"_id": run_id})["status"] == "failed"
    assert sync_db.usage.count_documents({"requestId": run_id}) == 1  # one usage row per run, holding both calls
    replay = parse_sse(http.get(f"/v1/runs/{run_id}/events", headers=auth(key)).text)
    assert replay[-1].event == "error" and replay[-1].json()["code"] == "run_deadline"


def test_a_chat_completion_past_its_deadline_releases_its_reservation(http, make_key, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(model="gpt-4o", hold="never")
    key = make_key(["chat"])
    resp = http.post("/v1/chat/completions", headers=auth(key), json={
        "model": "openai:gpt-4o", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 100000})
    assert resp.status_code == 504, resp.text
    assert resp.json()["error"]["code"] == "run_deadline"
    run_id = resp.headers["x-run-id"]  # a non-streamed error names its run too
    assert http.get(f"/v1/runs/{run_id}", headers=auth(key)).json()["status"] == "failed"
    assert sync_db.workspaces.find_one({"_id": "ws1"})["creditUsd"] == pytest.approx(10.0)


def test_a_streamed_chat_completion_past_its_deadline_ends_with_the_error(http, make_key, llm):
    llm.script(match="Hi", hold="never")
    key = make_key(["chat"])
    resp = http.post("/v1/chat/completions", headers=auth(key), json={
        "model": "openai:scripted", "stream": True, "messages": [{"role": "user", "content": "Hi"}]})
    last = [line for line in resp.text.splitlines() if line.startswith("data:")][-1]
    assert '"code":"run_deadline"' in last and resp.headers["x-run-id"]
