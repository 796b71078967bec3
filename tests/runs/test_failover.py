"""A run survives its worker: two `parley serve` processes on one database, the one executing a run is killed
with SIGKILL mid-run, and the other resumes it from its last checkpoint.

Each test follows the run through `/v1/runs/{id}/events` on the worker that does not hold it, kills the
holder once some of the run's steps are announced, and checks that the follower ends up with every step
exactly once (applying `retract`), that the run completes on the other worker, and (from the scripted
model server's log) that the steps announced before the kill were not asked of a model again.
"""

from __future__ import annotations

import collections
import json
import threading
import time

import httpx
import pytest

from tests.support.duel import OPPONENT, OPPONENT_REPLY, USER_REPLY, script_duel
from tests.support.roundtable import seat_name
from tests.support.workers import (Worker, apply_retracts, duel_messages_once, follow, round_of, running_workers,
                                   wait_until_saved)

PANEL = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def follow_and_kill(holder: Worker, follower: Worker, run_id: str, key: str, db, *, kill_after: int,
                    announcing: str, then: str | None = None, saved: bool = True) -> tuple[list, set[str]]:
    """Follow the run on `follower`; SIGKILL `holder` once `kill_after` events named `announcing` arrived (and,
    with `then`, one event of that name after them) and (with `saved`) the steps that sent them have their
    results saved.
    Return every event received, and the ids of the announcing events seen before the kill."""
    events, seen_before = [], set()
    for event in follow(f"{follower.url}/v1/runs/{run_id}/events", key):
        events.append(event)
        if holder.proc.poll() is not None:
            continue
        if event.event == announcing and len(seen_before) < kill_after:
            seen_before.add(event.id)
        if len(seen_before) == kill_after and (then is None or (event.event == then and event.id not in seen_before)):
            if saved:
                wait_until_saved(db, run_id, seen_before)
            holder.kill()
    assert holder.proc.poll() is not None, f"the run ended before its worker could be killed: {[e.event for e in events]}"
    return events, seen_before


def ran_on(follower: Worker, run_id: str, key: str) -> dict:
    run = httpx.get(f"{follower.url}/v1/runs/{run_id}", headers=auth(key)).json()
    assert run["status"] == "completed" and follower.named(run["worker"]) and run["claims"] == 2, run
    return run


def test_a_duel_resumes_on_another_worker_when_its_worker_is_killed(workers, llm, make_key, sync_db):
    holder, follower = workers
    # The third turn (Ada's in round 2) streams slowly the first time it is asked: the kill lands in it.
    llm.script(match="Round 2 of 5.", reply=USER_REPLY, token_delay=0.5, times=1)
    llm.script(match="You are Ada,", reply=USER_REPLY, token_delay=0.03)
    script_duel(llm, opponent_turn={"token_delay": 0.03})
    key = make_key(["debate"])
    body = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 5}
    with httpx.stream("POST", f"{holder.url}/api/debate", json=body, headers=auth(key), timeout=30) as started:
        run_id = started.headers["x-run-id"]  # then hang up: the debate goes on without its first client

    events, seen_before = follow_and_kill(holder, follower, run_id, key, sync_db, kill_after=2, announcing="message",
                                          then="chunk", saved=False)  # a duel's stored messages are its checkpoint
    assert events[-1].event == "done"
    # The third turn was cut off: its start and the chunks the follower saw are retracted, then it is sent again.
    retracted = [seq for e in events if e.event == "retract" for seq in e.json()["seqs"]]
    cut_off = [e for e in events if e.id and int(e.id) in retracted]
    assert cut_off and {e.event for e in cut_off} <= {"start", "chunk"} and cut_off[-1].event == "chunk"
    messages = duel_messages_once(events, USER_REPLY, OPPONENT_REPLY)
    assert events[-1].json()["messages"] == messages

    ran_on(follower, run_id, key)
    record = sync_db.debates.find_one({"_id": run_id})
    assert record["status"] == "completed" and record["messages"] == messages and len(record["verdicts"]) == 2
    # The turns announced before the kill were never asked of the model again.
    asked = collections.Counter(
        ("user" if "You are Ada," in r["messages"][0]["content"] else "opponent", round_of(r))
        for r in llm.requests if round_of(r) is not None)
    announced = [(m["role"], i // 2 + 1) for i, m in enumerate(messages[:len(seen_before)])]
    assert all(asked[turn] == 1 for turn in announced), asked
    assert sum(asked.values()) <= 11  # ten turns, one of them perhaps cut off by the kill and asked again
    assert OPPONENT["name"] in json.dumps(events[0].json())


def test_a_round_table_resumes_on_another_worker_when_its_worker_is_killed(workers, llm, make_key, sync_db):
    holder, follower = workers
    key = make_key(["conversations"])
    for name in ("Claire", "Marc"):
        resp = httpx.post(f"{holder.url}/v1/agents", headers=auth(key),
                          json={"name": name, "role": "Finance", "persona": f"{name} persona"})
        assert resp.status_code == 201, resp.text
        llm.script(match=f"You are {name},", reply=f"{name} would open in Lyon after the sales hire is made.",
                   token_delay=0.05)
    conversation = httpx.post(f"{holder.url}/v1/conversations", headers=auth(key),
                              json={"title": "Open in Lyon?"}).json()["conversation"]
    result: dict = {}

    def ask() -> None:  # the client of the first request: its worker dies under it
        try:
            result["response"] = httpx.post(f"{holder.url}/v1/conversations/{conversation['id']}/message",
                                            json={"content": "Open now or wait?"}, headers=auth(key), timeout=120)
        except httpx.HTTPError as exc:
            result["error"] = exc

    asking = threading.Thread(target=ask)
    asking.start()
    run_id = _wait_for_run(sync_db, "roundtable")
    events, seen_before = follow_and_kill(holder, follower, run_id, key, sync_db, kill_after=2, announcing="message")
    asking.join(30)
    assert "error" in result  # the first client lost its connection with its worker
    assert events[-1].event == "done" and events[-1].json()["conversationId"] == conversation["id"]

    kept_events = [e for e in apply_retracts(events) if e.event == "message"]
    turns = [(e.json()["agentName"], e.json()["roundNumber"]) for e in kept_events]
    assert len(turns) == len(set(turns)) and {r for _, r in turns} >= {0, 1}  # each turn exactly once
    ran_on(follower, run_id, key)
    stored = httpx.get(f"{follower.url}/v1/conversations/{conversation['id']}", headers=auth(key)).json()
    agent_turns = [(m["agentName"], m["metadata"]["roundNumber"]) for m in stored["conversation"]["messages"]
                   if m["senderType"] in ("agent", "devils-advocate")]
    assert sorted(agent_turns) == sorted(turns)
    assert [m["senderType"] for m in stored["conversation"]["messages"]].count("synthesizer") == 1
    # The turns announced before the kill were never asked again.
    asked = collections.Counter(
        (seat_name(r), _table_round(r))
        for r in llm.requests if _table_round(r) is not None)
    announced = {(e.json()["agentName"], e.json()["roundNumber"]) for e in kept_events if e.id in seen_before}
    assert len(announced) == 2 and all(asked[turn] == 1 for turn in announced), (asked, announced)


def test_a_workflow_with_a_debate_node_resumes_on_another_worker(workers, llm, make_key, sync_db):
    holder, follower = workers
    for model in PANEL:
        llm.script(model=model.split(":")[1], reply=f"{model} says: wait six months.")
    llm.script(model="claude-opus-4-5", reply=" ".join(["Wait", "six", "months", "then", "decide."] * 8),
               token_delay=0.05)
    workflow = {
        "version": 1, "name": "Debate, then done",
        "state": {"question": {"type": "string", "required": True}, "verdict": {"type": "string"}},
        "nodes": [{"id": "debate", "type": "debate",
                   "config": {"models": PANEL, "arbitrators": ["anthropic:claude-opus-4-5"]},
                   "inputs": {"input": "{question}"}, "output_key": "verdict"}],
        "edges": [], "entry": "debate", "finish": ["debate"],
    }
    key = make_key(["workflows"])
    with httpx.stream("POST", f"{holder.url}/v1/workflows/runs/stream", headers=auth(key), timeout=30,
                      json={"workflow": workflow, "input": {"question": "Open in Lyon?"}}) as started:
        run_id = started.headers["x-run-id"]

    events, seen_before = follow_and_kill(holder, follower, run_id, key, sync_db, kill_after=3, announcing="progress")
    kept = apply_retracts(events)
    assert events[-1].event == "done" and events[-1].json()["state"]["verdict"].startswith("Wait six months")
    assert [e.event for e in kept].count("node_end") == 1 and [e.event for e in kept].count("run_start") == 1
    panelists = [e.json()["data"]["model"] for e in kept if e.event == "progress" and e.json()["kind"] == "panelist"]
    assert sorted(panelists) == sorted(PANEL)  # each panelist's answer exactly once
    ran_on(follower, run_id, key)
    stored = sync_db.workflow_runs.find_one({"_id": run_id})
    assert stored["status"] == "completed"
    # The panelists that answered before the kill were not asked again.
    asked = collections.Counter(r["model"] for r in llm.requests)
    announced = [e.json()["data"]["model"] for e in kept
                 if e.id in seen_before and e.event == "progress" and e.json()["kind"] == "panelist"]
    assert announced and all(asked[model.split(":")[1]] == 1 for model in announced), (asked, announced)


def _table_round(request: dict) -> int | None:
    text = request["messages"][-1]["content"]
    if "This is round 0" in text:
        return 0
    marker = "This is debate round "
    return int(text.split(marker, 1)[1].split(".", 1)[0]) if marker in text else None


def _wait_for_run(sync_db, kind: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = sync_db.runs.find_one({"kind": kind})
        if run:
            return run["_id"]
        time.sleep(0.05)
    raise AssertionError(f"no {kind} run started")


@pytest.fixture
def panel_workers(parley_env, tmp_path):
    """Two workers whose `router/debate` preset is PANEL, arbitrated by Claude Opus."""
    env = {"PARLEY_DEBATE_MODELS": ",".join(PANEL), "PARLEY_ARBITRATOR_MODEL": "anthropic:claude-opus-4-5"}
    with running_workers(tmp_path, env) as pair:
        yield pair


def test_a_panel_request_starts_over_on_another_worker_when_its_worker_is_killed(panel_workers, llm, make_key,
                                                                                 sync_db):
    """A panel request saves no checkpoints (it takes about a second): resumed elsewhere, it starts over, and
    what its first worker sent is retracted."""
    holder, follower = panel_workers
    for model in PANEL:
        llm.script(model=model.split(":")[1], reply=f"{model} says: wait six months.")
    answer = " ".join(["Wait", "six", "months", "then", "decide."] * 4)
    llm.script(model="claude-opus-4-5", reply=answer, token_delay=0.3, times=1)  # the kill lands in this stream
    llm.script(model="claude-opus-4-5", reply=answer)
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    key = make_key(["chat"])
    body = {"model": "router/debate", "stream": True, "messages": [{"role": "user", "content": "Open in Lyon?"}]}
    started: dict = {}

    def ask() -> None:  # the client of the request (a client that hangs up cancels it): its worker dies under it
        try:
            with httpx.stream("POST", f"{holder.url}/v1/chat/completions", json=body, headers=auth(key),
                              timeout=30) as response:
                started["status"], started["run_id"] = response.status_code, response.headers.get("x-run-id")
                started["lines"] = list(response.iter_lines())
        except httpx.HTTPError as exc:
            started["error"] = exc

    asking = threading.Thread(target=ask)
    asking.start()
    run_id = _wait_for_run(sync_db, "panel")
    events, seen_before = follow_and_kill(holder, follower, run_id, key, sync_db, kill_after=1, announcing="chunk",
                                          saved=False)
    asking.join(30)
    assert started["status"] == 200 and started["run_id"] == run_id
    assert "data: [DONE]" not in started.get("lines", [])  # its worker died before it could answer in full
    assert events[-1].event == "done"
    retracted = {seq for e in events if e.event == "retract" for seq in e.json()["seqs"]}
    assert {int(e.id) for e in events if e.id and e.event == "chunk" and e.id in seen_before} <= retracted
    kept = apply_retracts(events)
    assert [e.event for e in kept].count("panelists") == 1
    assert sorted(e.json()["model"] for e in kept if e.event == "panelist") == sorted(PANEL)
    assert "".join(e.json()["content"] for e in kept if e.event == "chunk") == answer
    assert events[-1].json()["completion"]["choices"][0]["message"]["content"] == answer
    ran_on(follower, run_id, key)
    # Nothing was checkpointed: the panelists were asked again by the worker that resumed the request.
    assert sync_db.checkpoints.count_documents({}) == sync_db.checkpoint_writes.count_documents({}) == 0
    asked = collections.Counter(r["model"] for r in llm.requests)
    assert all(asked[model.split(":")[1]] == 2 for model in PANEL) and asked["claude-opus-4-5"] == 2, asked
    # Every call is billed once, those of the first worker too: the reservation is settled to all of them.
    meta = events[-1].json()["completion"]["_meta"]
    assert meta["cost"] > 0 and sync_db.workspaces.find_one({"_id": "ws1"})["creditUsd"] == pytest.approx(
        10.0 - meta["cost"])
