"""When the database fails under a live stream, the stream ends with an `error` event (`storage_unavailable`)
instead of going quiet. The test runs its own database process, which it kills mid-stream (and starts again
on the same data, so the run can be resumed and the test's database dropped)."""

from __future__ import annotations

import threading

import httpx

from tests.support.duel import script_duel
from tests.support.own_database import database, mongo_uri  # noqa: F401 (fixtures)
from tests.support.sse import SseEvent, iter_sse
from tests.support.wait import eventually


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def follow(url: str, key: str, *, method: str = "GET", json: dict | None = None, into: list[SseEvent],
           attached: threading.Event) -> None:
    with httpx.stream(method, url, json=json, headers=auth(key), timeout=httpx.Timeout(60, read=45)) as resp:
        assert resp.status_code == 200
        for event in iter_sse(resp.iter_lines()):
            into.append(event)
            attached.set()


def test_streams_end_with_an_error_event_when_the_database_fails(parley, make_key, llm, database):
    script_duel(llm, opponent_turn={"hold": "opponent"})
    key = make_key(["debate"])
    started, followed = [], []
    first, second = threading.Event(), threading.Event()
    body = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 1}
    duel = threading.Thread(target=follow, args=(parley.url + "/api/debate", key),
                            kwargs={"method": "POST", "json": body, "into": started, "attached": first})
    duel.start()
    llm.wait_held("opponent")  # the user's turn is over; the opponent's answer waits
    assert first.wait(30)  # the stream's first event (it may come after the model call began)
    run_id = started[0].json()["id"]
    runs = threading.Thread(target=follow, args=(f"{parley.url}/v1/runs/{run_id}/events", key),
                            kwargs={"into": followed, "attached": second})
    runs.start()
    assert second.wait(30)
    eventually(lambda: any(e.event == "message" for e in followed), "the follower has caught up")

    database.process.kill()
    database.process.wait(10)
    duel.join(60)
    runs.join(60)
    assert not duel.is_alive() and not runs.is_alive()
    for stream in (started, followed):
        last = stream[-1]
        assert last.event == "error" and last.json()["code"] == "storage_unavailable", [e.event for e in stream]

    database.start(timeout=60)  # storage is back (same port, same data): the run goes on, and ends as usual
    llm.release("opponent")
    with httpx.Client(base_url=parley.url, timeout=60) as http:
        eventually(lambda: http.get(f"/v1/runs/{run_id}", headers=auth(key)).json()["status"] == "completed",
                   "the run completes once storage is back", timeout=60)


def test_a_chat_stream_ended_by_a_storage_failure_leaves_its_run_to_finish(parley, make_key, llm, sync_db, database):
    """A chat completion's stream cancels its run when the client hangs up, but not when the stream ended because
    storage failed: the run goes on once the database is back, and a follower sees it complete (it was cancelled
    whenever the database came back before the cancel gave up)."""
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(match="You are the arbitrator of a panel", reply="Choose per feature.")
    llm.script(model="gpt-4o-mini", reply="Pick two of the three.")
    llm.script(model="claude-sonnet-4-5", reply="Trade-offs, always.")
    llm.script(model="gemini-2.5-flash", reply="Partitions happen.", hold="gemini")
    key = make_key(["chat"])
    events, attached = [], threading.Event()
    body = {"model": "router/debate", "stream": True, "messages": [{"role": "user", "content": "Explain CAP"}]}
    chat = threading.Thread(target=follow, args=(parley.url + "/v1/chat/completions", key),
                            kwargs={"method": "POST", "json": body, "into": events, "attached": attached})
    chat.start()
    llm.wait_held("gemini")
    run_id = sync_db.runs.find_one({"kind": "panel"})["_id"]

    database.process.kill()
    database.process.wait(10)
    chat.join(60)
    assert not chat.is_alive()
    assert events and "storage_unavailable" in events[-1].data, [e.data for e in events]
    database.start(timeout=60)  # back before the stream's end could give up on anything it does after

    llm.release("gemini")
    with httpx.Client(base_url=parley.url, timeout=60) as http:
        eventually(lambda: http.get(f"/v1/runs/{run_id}", headers=auth(key)).json()["status"] == "completed",
                   "the run completes once storage is back", timeout=90)
