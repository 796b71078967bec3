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
