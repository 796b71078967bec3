"""A run waiting for a person survives its worker: two `parley serve` processes on one database, the worker that ran
a waiting run is killed with SIGKILL, and the answer sent to the other worker resumes the run there.
"""

from __future__ import annotations

import collections

import httpx

from tests.support.duel import script_duel
from tests.support.roundtable import seat_name
from tests.support.wait import eventually
from tests.support.workers import Worker, apply_retracts, follow

GUIDANCE = "Our lease offer in Lyon expires in May: decide before then."


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def run_on(worker: Worker, run_id: str, key: str) -> dict:
    return httpx.get(f"{worker.url}/v1/runs/{run_id}", headers=auth(key), timeout=30).json()


def waits_at(worker: Worker, run_id: str, key: str, position: int) -> None:
    eventually(lambda: (run := run_on(worker, run_id, key))["status"] == "waiting"
               and run["waiting"]["position"] == position, f"the run waits at boundary {position}", timeout=60)


def table_round(request: dict) -> int | None:
    text = request["messages"][-1]["content"]
    if "This is round 0" in text:
        return 0
    marker = "This is debate round "
    return int(text.split(marker, 1)[1].split(".", 1)[0]) if marker in text else None


def test_a_waiting_table_resumes_on_the_other_worker_with_the_guidance_its_worker_never_saw(workers, llm, make_key,
                                                                                            sync_db):
    holder, other = workers
    key = make_key(["conversations"])
    for name, stance in (("Claire", "for"), ("Marc", "against")):
        resp = httpx.post(f"{holder.url}/v1/agents", headers=auth(key),
                          json={"name": name, "role": "Finance", "persona": f"{name} persona"})
        assert resp.status_code == 201, resp.text
        llm.script(match=f"Record {name}'s stance", json={"stance": stance, "confidence": 0.9, "keyPoint": "Mine."})
        llm.script(match=f"You are {name},", reply=f"{name} weighs the Lyon office.")
    conversation = httpx.post(f"{holder.url}/v1/conversations", headers=auth(key),
                              json={"title": "Open in Lyon?"}).json()["conversation"]
    started = httpx.post(f"{holder.url}/v1/conversations/{conversation['id']}/message", headers=auth(key),
                         json={"content": "Open now or wait?", "await": "after_round"}, timeout=30)
    assert started.status_code == 202, started.text
    run_id = started.json()["id"]
    waits_at(holder, run_id, key, 0)
    assert httpx.post(f"{holder.url}/v1/runs/{run_id}/input", headers=auth(key),
                      json={"action": "continue"}).status_code == 202
    waits_at(holder, run_id, key, 1)  # after round 1, executed by the worker that got the `continue`
    ran = sync_db.runs.find_one({"_id": run_id})
    assert ran["worker"] is None and ran["leaseUntil"] is None and ran["claims"] == 2

    holder.kill()
    asked = len(llm.requests)
    resp = httpx.post(f"{other.url}/v1/runs/{run_id}/input", headers=auth(key),
                      json={"action": "guide", "content": GUIDANCE}, timeout=30)
    assert resp.status_code == 202, resp.text
    assert other.named(resp.json()["run"]["worker"]) and resp.json()["run"]["status"] == "running"
    waits_at(other, run_id, key, 2)
    assert httpx.post(f"{other.url}/v1/runs/{run_id}/input", headers=auth(key),
                      json={"action": "continue"}).status_code == 202
    eventually(lambda: run_on(other, run_id, key)["status"] == "completed", "the table ends", timeout=60)

    # Round 2's prompts carry the guidance; no earlier turn's did, and no turn was asked twice.
    turns = [(seat_name(r), table_round(r), r)
             for r in llm.requests if r.get("stream") and table_round(r) is not None]
    assert all(GUIDANCE in r["messages"][-1]["content"] for _, n, r in turns if n >= 2)
    assert not any(GUIDANCE in r["messages"][-1]["content"] for _, n, r in turns if n < 2)
    assert collections.Counter((name, n) for name, n, _ in turns) == {
        (name, n): 1 for name in ("Claire", "Marc", "Devil's Advocate") for n in range(4)}
    assert {table_round(r) for r in llm.requests[asked:] if r.get("stream")} == {2, 3}  # nothing asked again
    run = run_on(other, run_id, key)
    assert other.named(run["worker"]) and run["result"]["totalRounds"] == 3

    # Once in the transcript and once in the run's events, in round 2.
    stored = httpx.get(f"{other.url}/v1/conversations/{conversation['id']}",
                       headers=auth(key)).json()["conversation"]["messages"]
    guidance = [m for m in stored if m["content"] == GUIDANCE]
    assert len(guidance) == 1 and guidance[0]["senderType"] == "user"
    assert guidance[0]["metadata"]["roundNumber"] == 2
    rounds = [m["metadata"]["roundNumber"] for m in stored if m["senderType"] in ("agent", "devils-advocate", "user")
              and m.get("metadata")]
    assert rounds == sorted(rounds)  # the guidance stands before round 2's turns
    events = apply_retracts(list(follow(f"{other.url}/v1/runs/{run_id}/events", key)))
    assert [e.json()["content"] for e in events if e.event == "human"] == [GUIDANCE]
    assert [e.event for e in events].count("waiting") == 3 and events[-1].event == "done"


def test_a_waiting_duel_is_rebuilt_from_its_events_on_the_other_worker(workers, llm, make_key, sync_db):
    holder, other = workers
    script_duel(llm)
    key = make_key(["debate"])
    body = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 2,
            "await": "after_turn"}
    with httpx.stream("POST", f"{holder.url}/api/debate", json=body, headers=auth(key), timeout=30) as started:
        run_id = started.headers["x-run-id"]
    waits_at(holder, run_id, key, 1)
    assert httpx.post(f"{holder.url}/v1/runs/{run_id}/input", headers=auth(key),
                      json={"action": "guide", "content": "Mention the juniors."}).status_code == 202
    waits_at(holder, run_id, key, 2)
    holder.kill()
    assert httpx.post(f"{other.url}/v1/runs/{run_id}/input", headers=auth(key),
                      json={"action": "continue"}).status_code == 202
    waits_at(other, run_id, key, 3)
    assert httpx.post(f"{other.url}/v1/runs/{run_id}/input", headers=auth(key),
                      json={"action": "end"}).status_code == 202
    eventually(lambda: run_on(other, run_id, key)["status"] == "completed", "the duel ends", timeout=60)
    record = sync_db.debates.find_one({"_id": run_id})
    assert [m["role"] for m in record["messages"]] == ["user", "human", "opponent", "user"]
    assert record["stoppedBy"] == "user"
    turns = [r for r in llm.requests if r.get("stream") and "Round " in r["messages"][-1]["content"]]
    assert len(turns) == 3 and all("Mention the juniors." in t["messages"][-1]["content"] for t in turns[1:])
