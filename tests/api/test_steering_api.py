"""Steering a running debate over HTTP (docs/steering.md): `POST /v1/runs/{id}/input`, `await`, budgets, early stop.

Real HTTP, the scripted model server, a real database; the tests that kill workers are in tests/runs/test_steering.py.
"""

from __future__ import annotations

import threading

import pytest

from tests.support.duel import OPPONENT_REPLY, USER_REPLY, script_duel
from tests.support.sse import iter_sse
from tests.support.wait import eventually

QUESTION = "Open in Lyon now or wait?"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def key(make_key):
    return make_key(["conversations", "debate"])


def seat_table(http, key, names=("Claire", "Marc")) -> str:
    for name in names:
        resp = http.post("/v1/agents", json={"name": name, "role": "Finance", "persona": f"{name} persona"},
                         headers=auth(key))
        assert resp.status_code == 201, resp.text
    resp = http.post("/v1/conversations", json={"title": "Lyon office"}, headers=auth(key))
    return resp.json()["conversation"]["id"]


def script_split_table(llm, *, reply_words: int = 20) -> None:
    """Claire for, Marc against at 0.9: the table never converges and never agrees in round 0."""
    for name, stance in (("Claire", "for"), ("Marc", "against"), ("Devil's Advocate", "against")):
        llm.script(match=f"Record {name}'s stance", json={"stance": stance, "confidence": 0.9,
                                                           "keyPoint": f"{name} holds {stance}."})
    for name in ("Claire", "Marc"):
        llm.script(match=f"You are {name},", reply=" ".join([f"{name} argues."] * reply_words))


def run_of(http, key, run_id) -> dict:
    return http.get(f"/v1/runs/{run_id}", headers=auth(key)).json()


def send(http, key, run_id, **body):
    return http.post(f"/v1/runs/{run_id}/input", json=body, headers=auth(key))


def turn_prompts(llm, round_number: int) -> list[str]:
    marker = "This is round 0" if round_number == 0 else f"This is debate round {round_number}."
    return [r["messages"][-1]["content"] for r in llm.requests
            if r.get("stream") and marker in r["messages"][-1]["content"]]


def test_a_table_started_with_await_waits_after_each_round_and_a_guide_reaches_the_next_round(http, key, llm, sync_db):
    script_split_table(llm)
    conversation = seat_table(http, key)
    started = http.post(f"/v1/conversations/{conversation}/message", json={"content": QUESTION,
                                                                          "await": "after_round"},
                        headers=auth(key))
    assert started.status_code == 202, started.text
    run_id = started.json()["id"]
    assert started.headers["x-run-id"] == run_id
    eventually(lambda: run_of(http, key, run_id)["status"] == "waiting", "the table waits after round 0")
    run = run_of(http, key, run_id)
    assert run["waiting"] == {"at": "after_round", "position": 0, "round": 1} and run["worker"] is None
    assert not turn_prompts(llm, 1)  # no model call while it waits

    resp = send(http, key, run_id, action="continue")
    assert resp.status_code == 202, resp.text
    eventually(lambda: run_of(http, key, run_id)["waiting"] == {"at": "after_round", "position": 1, "round": 2},
               "the table waits after round 1")
    resp = send(http, key, run_id, action="guide", content="Our lease offer in Lyon expires in May.")
    assert resp.status_code == 202 and resp.json()["input"]["action"] == "guide"
    eventually(lambda: run_of(http, key, run_id)["status"] == "waiting"
               and run_of(http, key, run_id)["waiting"]["position"] == 2, "the table waits after round 2")
    round_two = turn_prompts(llm, 2)
    assert round_two and all("Our lease offer in Lyon expires in May." in p for p in round_two)
    assert not any("Our lease offer" in p for p in turn_prompts(llm, 1))
    assert send(http, key, run_id, action="end").status_code == 202
    eventually(lambda: run_of(http, key, run_id)["status"] == "completed", "the table ends")
    run = run_of(http, key, run_id)
    assert run["stoppedBy"] == "user" and run["result"]["stoppedBy"] == "user" and run["result"]["totalRounds"] == 2
    events = list(iter_sse(http.get(f"/v1/runs/{run_id}/events", headers=auth(key)).iter_lines()))
    names = [e.event for e in events]
    assert names.count("waiting") == 3 and names.count("resumed") == 3 and names.count("human") == 1
    assert events[-1].event == "done" and events[-1].json()["stoppedBy"] == "user"
    stored = http.get(f"/v1/conversations/{conversation}", headers=auth(key)).json()["conversation"]["messages"]
    guidance = [m for m in stored if m["senderType"] == "user" and m.get("metadata", {}).get("inputId")]
    assert [m["content"] for m in guidance] == ["Our lease offer in Lyon expires in May."]
    assert guidance[0]["metadata"]["roundNumber"] == 2
    assert send(http, key, run_id, content="Too late").status_code == 409
