"""Each kind of run has one visibility rule, the same on its mode's routes and on `/v1/runs`.

Duels and chat runs are their owner's (and admin keys'): another user of the workspace gets 404 everywhere,
as for a run that does not exist. Round tables and workflows are the workspace's. Only the owner or an
admin key stops a run.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from tests.support.duel import script_duel
from tests.support.sse import parse_sse

BODY = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada", "bio": "secret bio"},
        "rounds": 1}
WORKFLOW = {
    "version": 1, "name": "One answer",
    "state": {"question": {"type": "string", "required": True}, "answer": {"type": "string"}},
    "nodes": [{"id": "answer", "type": "llm", "inputs": {"prompt": "{question}"}, "output_key": "answer"}],
    "edges": [], "entry": "answer", "finish": ["answer"],
}
SCOPES = ["debate", "chat", "conversations", "workflows"]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_another_users_live_duel_is_invisible_and_cannot_be_stopped(http, make_key, llm):
    script_duel(llm, opponent_turn={"hold": "opponent"})
    alice, bob, admin = make_key(SCOPES), make_key(SCOPES, user="bob"), make_key(["admin"], user="root")
    box: dict = {}

    def duel() -> None:
        box["resp"] = http.post("/api/debate", json=BODY, headers=auth(alice))

    thread = threading.Thread(target=duel)
    thread.start()
    try:
        llm.wait_held("opponent")  # the duel is under way, waiting for the opponent's first turn
        run_id = http.get("/v1/runs?kind=duel", headers=auth(alice)).json()["data"][0]["id"]
        for method, path in (("GET", f"/v1/runs/{run_id}"), ("GET", f"/v1/runs/{run_id}/events"),
                             ("POST", f"/v1/runs/{run_id}/cancel"), ("GET", f"/api/debate/{run_id}"),
                             ("GET", f"/api/debate/{run_id}/events")):
            resp = http.request(method, path, headers=auth(bob))
            assert resp.status_code == 404, (method, path, resp.text)
            assert "secret bio" not in resp.text
        assert http.get("/v1/runs?kind=duel", headers=auth(bob)).json()["data"] == []
        assert http.get("/v1/runs", headers=auth(bob)).json()["data"] == []
        # An admin key of the workspace sees it (input included), on both APIs.
        assert http.get(f"/v1/runs/{run_id}", headers=auth(admin)).json()["input"]["user_profile"]["bio"] == "secret bio"
        assert http.get(f"/api/debate/{run_id}", headers=auth(admin)).status_code == 200
        assert [r["id"] for r in http.get("/v1/runs?kind=duel", headers=auth(admin)).json()["data"]] == [run_id]
    finally:
        llm.release("opponent")
        thread.join(60)
    events = parse_sse(box["resp"].text)
    assert events[-1].event == "done"  # bob's cancel stopped nothing
    assert http.get(f"/v1/runs/{run_id}", headers=auth(alice)).json()["status"] == "completed"


def test_chat_runs_are_their_owners_and_shared_kinds_the_workspaces(http, make_key, llm):
    alice, bob, admin = make_key(SCOPES), make_key(SCOPES, user="bob"), make_key(["admin"], user="root")
    chat = http.post("/v1/chat/completions", headers=auth(alice),
                     json={"model": "openai:scripted", "messages": [{"role": "user", "content": "My secret plan"}]})
    assert chat.status_code == 200
    chat_id = chat.headers["x-run-id"]
    flow = http.post("/v1/workflows/runs", json={"workflow": WORKFLOW, "input": {"question": "Why?"}},
                     headers=auth(alice))
    flow_id = flow.headers["x-run-id"]

    for path in (f"/v1/runs/{chat_id}", f"/v1/runs/{chat_id}/events"):
        assert http.get(path, headers=auth(bob)).status_code == 404
    assert [r["id"] for r in http.get("/v1/runs", headers=auth(bob)).json()["data"]] == [flow_id]
    assert [r["id"] for r in http.get("/v1/runs?kind=panel", headers=auth(admin)).json()["data"]] == [chat_id]
    assert "My secret plan" in http.get(f"/v1/runs/{chat_id}", headers=auth(admin)).text
    # A workflow run is the workspace's to read, as on /v1/workflows/runs/{id}, but only its owner or an admin stops it.
    assert http.get(f"/v1/runs/{flow_id}", headers=auth(bob)).status_code == 200
    assert http.get(f"/v1/workflows/runs/{flow_id}", headers=auth(bob)).status_code == 200
    refused = http.post(f"/v1/runs/{flow_id}/cancel", headers=auth(bob))
    assert refused.status_code == 403 and refused.json()["code"] == "not_run_owner"
    for owner in (alice, admin):  # allowed, and the run has ended
        assert http.post(f"/v1/runs/{flow_id}/cancel", headers=auth(owner)).json()["code"] == "run_finished"


def test_the_list_filters_in_the_query_so_every_page_is_full(http, make_key, sync_db):
    bob = make_key(["debate"], user="bob")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(30):  # alice's newer duels would fill bob's pages if they were filtered after paging
        sync_db.runs.insert_one(_run(f"run_a{i:02}", "alice", start + timedelta(hours=1, minutes=i)))
    for i in range(3):
        sync_db.runs.insert_one(_run(f"run_b{i}", "bob", start + timedelta(minutes=i)))
    first = http.get("/v1/runs?limit=2", headers=auth(bob)).json()
    assert [r["id"] for r in first["data"]] == ["run_b2", "run_b1"]
    rest = http.get(f"/v1/runs?limit=2&cursor={first['nextCursor']}", headers=auth(bob)).json()
    assert [r["id"] for r in rest["data"]] == ["run_b0"] and rest["nextCursor"] is None
    indexes = [[field for field, _ in index["key"]] for index in sync_db.runs.index_information().values()]
    assert ["workspace", "user", "createdAt", "_id"] in indexes


def _run(run_id: str, user: str, created: datetime) -> dict:
    return {"_id": run_id, "kind": "duel", "workspace": "ws1", "user": user, "title": "t", "input": {}, "ref": {},
            "status": "completed", "worker": None, "leaseUntil": None, "heartbeatAt": created, "claims": 1,
            "cancelRequested": False, "createdAt": created, "startedAt": created, "finishedAt": created,
            "updatedAt": created, "usage": None, "result": None, "error": None}
