"""`/v1/runs`: every mode's runs listed, read, followed and cancelled the same way, over real HTTP."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.duel import USER_REPLY, script_duel
from tests.support.sse import SseEvent, iter_sse, parse_sse

BODY = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 2}
WORKFLOW = {
    "version": 1, "name": "One answer",
    "state": {"question": {"type": "string", "required": True}, "answer": {"type": "string"}},
    "nodes": [{"id": "answer", "type": "llm", "inputs": {"prompt": "{question}"}, "output_key": "answer"}],
    "edges": [], "entry": "answer", "finish": ["answer"],
}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def start_duel(http: httpx.Client, key: str) -> tuple[str, list[SseEvent]]:
    resp = http.post("/api/debate", json=BODY, headers=auth(key))
    assert resp.status_code == 200, resp.text
    return resp.headers["x-run-id"], parse_sse(resp.text)


def test_every_mode_names_its_run_and_the_run_is_listed_and_readable(http, make_key, llm):
    script_duel(llm)
    key = make_key(["admin"])
    duel_id, _ = start_duel(http, key)
    run = http.post("/v1/workflows/runs", json={"workflow": WORKFLOW, "input": {"question": "Why?"}},
                    headers=auth(key))
    assert run.status_code == 200 and run.headers["x-run-id"] == run.json()["id"]

    listed = http.get("/v1/runs", headers=auth(key)).json()
    assert [(r["id"], r["kind"], r["status"]) for r in listed["data"]] == [
        (run.json()["id"], "workflow", "completed"), (duel_id, "duel", "completed")]
    assert listed["nextCursor"] is None
    assert [r["id"] for r in http.get("/v1/runs?kind=duel", headers=auth(key)).json()["data"]] == [duel_id]
    page = http.get("/v1/runs?limit=1", headers=auth(key)).json()
    assert len(page["data"]) == 1 and page["nextCursor"]
    rest = http.get(f"/v1/runs?limit=1&cursor={page['nextCursor']}", headers=auth(key)).json()
    assert [r["id"] for r in rest["data"]] == [duel_id] and rest["nextCursor"] is None

    detail = http.get(f"/v1/runs/{duel_id}", headers=auth(key)).json()
    assert detail["kind"] == "duel" and detail["status"] == "completed" and detail["title"] == BODY["topic"]
    assert detail["ref"] == {"debateId": duel_id} and detail["input"]["topic"] == BODY["topic"]
    assert detail["usage"]["calls"] == 7 and detail["usage"]["totalTokens"] > 0  # opponent, 4 turns, 2 judges
    assert detail["worker"] and detail["finishedAt"] and detail["result"]["messages"] == 4


def test_a_key_sees_only_its_workspace_and_the_kinds_its_scopes_allow(http, make_key, llm):
    script_duel(llm)
    duel_id, _ = start_duel(http, make_key(["debate"]))
    chat_only = make_key(["chat"])
    assert http.get("/v1/runs", headers=auth(chat_only)).json()["data"] == []
    assert http.get(f"/v1/runs/{duel_id}", headers=auth(chat_only)).status_code == 404
    elsewhere = make_key(["admin"], workspace="ws2")
    resp = http.get(f"/v1/runs/{duel_id}", headers=auth(elsewhere))
    assert resp.status_code == 404 and resp.json()["code"] == "run_not_found"
    assert http.get("/v1/runs", headers=auth(elsewhere)).json()["data"] == []
    reader = make_key(["readonly"])
    assert http.get(f"/v1/runs/{duel_id}", headers=auth(reader)).status_code == 200
    assert http.get("/v1/runs").status_code == 401
    for bad in ("kind=poem", "status=sleeping", "limit=0", "cursor=garbage"):
        resp = http.get(f"/v1/runs?{bad}", headers=auth(make_key(["admin"])))
        assert resp.status_code == 400, (bad, resp.text)


def test_run_events_replay_from_any_point_and_match_the_mode_stream(http, make_key, llm):
    script_duel(llm)
    key = make_key(["debate"])
    duel_id, streamed = start_duel(http, key)
    replay = parse_sse(http.get(f"/v1/runs/{duel_id}/events", headers=auth(key)).text)
    assert [(e.id, e.event, e.data) for e in replay] == [(e.id, e.event, e.data) for e in streamed]
    later = parse_sse(http.get(f"/v1/runs/{duel_id}/events", headers={**auth(key), "Last-Event-ID": "5"}).text)
    assert [e.id for e in later] == [e.id for e in streamed][6:]
    assert parse_sse(http.get(f"/v1/runs/{duel_id}/events?lastEventId=5", headers=auth(key)).text)[0].id == "6"
    resp = http.get(f"/v1/runs/{duel_id}/events", headers={**auth(key), "Last-Event-ID": "five"})
    assert resp.status_code == 400 and "Last-Event-ID" in resp.json()["error"]


def test_cancelling_a_duel_stops_its_model_calls_and_keeps_what_was_said(http, make_key, llm, sync_db):
    # Each opponent turn streams slowly, so the cancel lands while the opponent is speaking.
    script_duel(llm, opponent_turn={"token_delay": 0.2})
    key = make_key(["debate"])
    events: list[SseEvent] = []
    asked_at_cancel = None
    with http.stream("POST", "/api/debate", json={**BODY, "rounds": 3}, headers=auth(key)) as resp:
        run_id = resp.headers["x-run-id"]
        for event in iter_sse(resp.iter_lines()):
            events.append(event)
            if event.event == "chunk" and event.json()["role"] == "opponent" and asked_at_cancel is None:
                cancelled = http.post(f"/v1/runs/{run_id}/cancel", headers=auth(key))
                assert cancelled.status_code == 202 and cancelled.json()["cancelRequested"] is True
                asked_at_cancel = len(llm.requests)
    assert events[-1].event == "cancelled" and events[-1].json() == {"message": "Debate cancelled"}
    run = http.get(f"/v1/runs/{run_id}", headers=auth(key)).json()
    assert run["status"] == "cancelled" and run["usage"]["calls"] >= 2
    debate = sync_db.debates.find_one({"_id": run_id})
    assert debate["status"] == "cancelled" and [m["content"] for m in debate["messages"]] == [USER_REPLY]
    assert len(llm.requests) == asked_at_cancel  # no model call after the cancel
    again = http.post(f"/v1/runs/{run_id}/cancel", headers=auth(key))
    assert again.status_code == 409 and again.json()["code"] == "run_finished"
    assert http.post(f"/v1/runs/{run_id}/cancel", headers=auth(make_key(["readonly"]))).status_code == 403
    assert http.post("/v1/runs/run_unknown/cancel", headers=auth(key)).status_code == 404


def test_a_cancelled_panel_run_settles_its_reservation(http, make_key, llm, sync_db, parley_env):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(model="gpt-4o", reply=" ".join(["word"] * 50), token_delay=0.2)
    key = make_key(["chat"])
    with http.stream("POST", "/v1/chat/completions", headers=auth(key),
                     json={"model": "openai:gpt-4o", "stream": True, "messages": [{"role": "user", "content": "Hi"}],
                           "max_tokens": 1000}) as resp:
        run_id = resp.headers["x-run-id"]
        lines = (line for line in resp.iter_lines() if line.startswith("data:"))
        next(lines)  # the first token
        assert http.post(f"/v1/runs/{run_id}/cancel", headers=auth(key)).status_code == 202
        assert '"code":"cancelled"' in next(line for line in lines if '"error"' in line)
    deadline = time.monotonic() + 30
    while http.get(f"/v1/runs/{run_id}", headers=auth(key)).json()["status"] != "cancelled":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # The call was sent and had streamed when it was cancelled: it is billed (at an estimate) and the rest of the
    # reservation released, so the credit is what it was less that call's cost.
    usage = http.get(f"/v1/runs/{run_id}", headers=auth(key)).json()["usage"]
    assert usage["calls"] == 1 and usage["costUsd"] > 0
    assert sync_db.workspaces.find_one({"_id": "ws1"})["creditUsd"] == pytest.approx(10.0 - usage["costUsd"], abs=1e-6)


def test_a_failed_chat_completion_names_its_run(http, make_key, llm):
    llm.script(model="broken", status=400, reply="The scripted model refuses.")
    key = make_key(["chat"])
    resp = http.post("/v1/chat/completions", headers=auth(key),
                     json={"model": "openai:broken", "messages": [{"role": "user", "content": "Hi"}]})
    assert resp.status_code == 502, resp.text
    run = http.get(f"/v1/runs/{resp.headers['x-run-id']}", headers=auth(key)).json()
    assert run["kind"] == "panel" and run["status"] == "failed"
    assert run["error"]["code"] == resp.json()["error"]["code"]
