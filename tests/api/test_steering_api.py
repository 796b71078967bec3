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


def seat_table(http, key, names=("Claire", "Marc"), *, persona_words: int = 0) -> str:
    for name in names:
        persona = f"{name} persona." + " Weighs cash, hiring and leases." * (persona_words // 5)
        resp = http.post("/v1/agents", json={"name": name, "role": "Finance", "persona": persona},
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


def start_duel(http, key, **fields) -> str:
    body = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 3, **fields}
    with http.stream("POST", "/api/debate", json=body, headers=auth(key)) as resp:
        assert resp.status_code == 200, resp.read()
        return resp.headers["x-run-id"]  # then hang up: the duel goes on without its first client


def test_messages_sent_during_a_streaming_duel_turn_join_the_next_turn_once_each_in_order(http, key, llm, sync_db):
    # Ada's first turn sends two chunks, then holds at the gate "turn" until the test has sent its messages.
    llm.script(match="Round 1 of 3.", reply=USER_REPLY, hold="turn", pause_after=2, times=1)
    script_duel(llm)
    run_id = start_duel(http, key)
    llm.wait_held("turn")
    notes = [f"Note {i}: consider the team in Lyon." for i in range(10)]
    answers: list = [None] * 10

    def post(i: int) -> None:
        answers[i] = send(http, key, run_id, content=notes[i])

    senders = [threading.Thread(target=post, args=(i,)) for i in range(10)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(30)
    assert [a.status_code for a in answers] == [202] * 10
    llm.release("turn")
    eventually(lambda: run_of(http, key, run_id)["status"] == "completed", "the duel ends")

    events = list(iter_sse(http.get(f"/v1/runs/{run_id}/events", headers=auth(key)).iter_lines()))
    human = [e.json() for e in events if e.event == "human"]
    by_id = {a.json()["input"]["id"]: a.json()["input"]["content"] for a in answers}
    stored = [row["_id"] for row in sync_db.run_inputs.find({"runId": run_id}).sort([("at", 1), ("_id", 1)])]
    assert [h["id"] for h in human] == stored and len(set(stored)) == 10  # none lost, none twice, in stored order
    assert [h["content"] for h in human] == [by_id[h["id"]] for h in human]
    assert all(h["position"] == 1 and h["senderType"] == "user" for h in human)  # after the first turn
    assert not any(e.event == "chunk" and e.json()["role"] not in ("user", "opponent") for e in events)
    # Applied from the next turn on, in the order they were stored: not in the turn under way.
    turns = [r for r in llm.requests if r.get("stream") and "Round " in r["messages"][-1]["content"]]
    assert not any("Note 0:" in t["messages"][-1]["content"] for t in turns[:1])
    listed = [t["messages"][-1]["content"] for t in turns[1:]]
    expected = [h["content"] for h in human]
    assert len(listed) == 5 and all([line.split(": ", 1)[1] for line in p.splitlines() if "Note " in line] == expected
                                    for p in listed)
    record = sync_db.debates.find_one({"_id": run_id})
    assert [m["role"] for m in record["messages"]] == ["user"] + ["human"] * 10 + ["opponent", "user"] * 2 + [
        "opponent"]
    assert [m["content"] for m in record["messages"] if m["role"] == "human"] == [h["content"] for h in human]
    done = events[-1].json()
    assert events[-1].event == "done" and done["messages"] == [{k: v for k, v in m.items()} for m in record["messages"]]
    assert {(m["role"], m["content"]) for m in done["messages"] if m["role"] != "human"} == {
        ("user", USER_REPLY), ("opponent", OPPONENT_REPLY)}


def ask_table(http, key, conversation, **fields):
    return http.post(f"/v1/conversations/{conversation}/message", json={"content": QUESTION, **fields},
                     headers=auth(key))


def test_a_table_whose_budget_is_below_its_full_cost_stops_early_with_a_synthesis_within_it(http, key, llm):
    # Long turns and personas, as real ones are: a round costs about what the budget check reserves for it.
    script_split_table(llm, reply_words=150)
    conversation = seat_table(http, key, persona_words=600)
    full = ask_table(http, key, conversation)
    assert full.status_code == 200 and full.json()["totalRounds"] == 3
    full_run = run_of(http, key, full.headers["x-run-id"])
    full_cost = full_run["usage"]["costUsd"]

    limit = round(full_cost * 0.7, 8)
    resp = ask_table(http, key, conversation, maxCost=limit)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    run = run_of(http, key, resp.headers["x-run-id"])
    assert run["status"] == "completed" and run["stoppedBy"] == "budget" and body["stoppedBy"] == "budget"
    assert body["totalRounds"] < 3 and body["synthesis"]["recommendedAction"]
    assert run["usage"]["costUsd"] <= limit and run["budget"]["limits"] == {"maxCost": limit}
    assert run["budget"]["spent"]["costUsd"] == pytest.approx(run["usage"]["costUsd"])


def test_a_budget_too_small_for_one_round_is_refused_with_its_minimum_and_bad_budgets_name_their_field(
        http, key, llm):
    script_split_table(llm)
    conversation = seat_table(http, key)
    resp = ask_table(http, key, conversation, maxTokens=50)
    assert resp.status_code == 402, resp.text
    body = resp.json()
    assert body["code"] == "budget_too_small" and body["short"] == ["maxTokens"] and body["minimum"]["maxTokens"] > 50
    resp = ask_table(http, key, conversation, maxTokens=body["minimum"]["maxTokens"])  # the minimum: it ends early
    assert resp.status_code == 200 and resp.json()["stoppedBy"] == "budget" and resp.json()["totalRounds"] < 3
    assert resp.json()["tokenUsage"]["totalTokensUsed"] <= body["minimum"]["maxTokens"]
    for field, value in (("maxCost", -1), ("maxTokens", 1.5), ("maxSeconds", "soon"), ("maxCost", True)):
        resp = ask_table(http, key, conversation, **{field: value})
        assert resp.status_code == 400 and field in resp.text, (field, resp.text)
    resp = ask_table(http, key, conversation, maxSeconds=1)  # below the documented minimum
    assert resp.status_code == 400 and "maxSeconds" in resp.json()["error"]
    resp = ask_table(http, key, conversation, **{"await": "after_turn"})
    assert resp.status_code == 400 and "await" in resp.text
    script_duel(llm)
    resp = http.post("/api/debate", json={"topic": "Remote?", "userProfile": {"name": "Ada"}, "maxCost": 1e-7},
                     headers=auth(key))
    assert resp.status_code == 402 and resp.json()["code"] == "budget_too_small" and resp.json()["minimum"]["maxCost"]
    resp = http.post("/api/debate", json={"topic": "Remote?", "userProfile": {"name": "Ada"}, "await": "after_round"},
                     headers=auth(key))
    assert resp.status_code == 400 and resp.json()["code"] == "invalid_await"


def test_inputs_are_checked_and_refused_where_no_one_can_take_them(http, key, llm, make_key):
    llm.script(match="Round 1 of 3.", reply=USER_REPLY, hold="turn", times=1)
    script_duel(llm)
    run_id = start_duel(http, key)
    llm.wait_held("turn")
    for body, field in (({}, "content"), ({"content": "  "}, "content"), ({"action": "stop"}, "action"),
                        ({"action": "continue", "content": "x"}, "content"), ({"action": "guide"}, "content"),
                        ({"content": "x", "extra": 1}, "extra")):
        resp = send(http, key, run_id, **body)
        assert resp.status_code == 400 and field in resp.text, (body, resp.text)
    other = make_key(["debate"], user="bob")
    assert send(http, other, run_id, content="hi").status_code == 404  # another user's duel: not found
    admin_reader = make_key(["readonly"], user="alice")
    assert send(http, admin_reader, run_id, content="hi").status_code == 403
    assert send(http, key, "run_missing", content="hi").status_code == 404
    llm.release("turn")
    eventually(lambda: run_of(http, key, run_id)["status"] == "completed", "the duel ends")
    resp = send(http, key, run_id, content="late")
    assert resp.status_code == 409 and resp.json()["code"] == "run_finished"


def paused_duel(http, key, llm) -> str:
    """A duel asked to pause during its first turn, once it waits after it; its id."""
    llm.script(match="Round 1 of 3.", reply=USER_REPLY, hold="turn", times=1)
    script_duel(llm)
    run_id = start_duel(http, key)
    llm.wait_held("turn")
    assert send(http, key, run_id, action="pause").status_code == 202
    llm.release("turn")
    eventually(lambda: run_of(http, key, run_id)["status"] == "waiting", "the duel waits after its first turn")
    return run_id


def test_a_duel_paused_on_request_waits_and_ends_with_its_verdict_on_end(http, key, llm, sync_db):
    run_id = paused_duel(http, key, llm)
    assert run_of(http, key, run_id)["waiting"]["position"] == 1
    assert send(http, key, run_id, action="pause").json()["code"] == "run_waiting"
    asked = len(llm.requests)
    assert send(http, key, run_id, content="Think of the juniors.").status_code == 202
    assert run_of(http, key, run_id)["status"] == "waiting" and len(llm.requests) == asked  # a message alone: waits
    resp = send(http, key, run_id, action="end")
    assert resp.status_code == 202
    eventually(lambda: run_of(http, key, run_id)["status"] == "completed", "the duel ends")
    run = run_of(http, key, run_id)
    assert run["stoppedBy"] == "user" and run["result"]["messages"] == 1 and run["result"]["stoppedBy"] == "user"
    record = sync_db.debates.find_one({"_id": run_id})
    assert record["status"] == "completed" and record["stoppedBy"] == "user" and len(record["verdicts"]) == 2
    assert [m["role"] for m in record["messages"]] == ["user", "human"]
    judged = [r for r in llm.requests[asked:] if "impartial debate judge" in r["messages"][0]["content"]]
    assert len(judged) == 2  # straight to the verdicts: no further turn
    events = list(iter_sse(http.get(f"/v1/runs/{run_id}/events", headers=auth(key)).iter_lines()))
    names = [e.event for e in events]
    assert names.index("waiting") < names.index("human") < names.index("resumed") < names.index("stopping")
    assert events[names.index("resumed")].json()["action"] == "end"
    assert events[-1].event == "done" and events[-1].json()["stoppedBy"] == "user"


def test_a_waiting_run_can_be_cancelled(http, key, llm):
    script_split_table(llm)
    conversation = seat_table(http, key)
    run_id = ask_table(http, key, conversation, **{"await": "after_round"}).json()["id"]
    eventually(lambda: run_of(http, key, run_id)["status"] == "waiting", "the table waits")
    resp = http.post(f"/v1/runs/{run_id}/cancel", headers=auth(key))
    assert resp.status_code == 202, resp.text
    eventually(lambda: run_of(http, key, run_id)["status"] == "cancelled", "the waiting table is cancelled")
    stored = http.get(f"/v1/conversations/{conversation}", headers=auth(key)).json()["conversation"]["messages"]
    assert [m["senderType"] for m in stored].count("agent") == 2  # round 0 kept
    assert send(http, key, run_id, action="continue").status_code == 409


def test_a_unanimous_confident_round_zero_skips_the_debate_rounds(http, key, llm):
    for name in ("Claire", "Marc"):
        llm.script(match=f"Record {name}'s stance", json={"stance": "for", "confidence": 0.95, "keyPoint": "Go."})
    conversation = seat_table(http, key)
    resp = ask_table(http, key, conversation)
    assert resp.status_code == 200, resp.text
    assert resp.json()["totalRounds"] == 0 and resp.json()["stoppedBy"] == "unanimous"
    assert run_of(http, key, resp.headers["x-run-id"])["stoppedBy"] == "unanimous"
    assert not turn_prompts(llm, 1)


def test_the_workspace_default_budget_applies_when_a_request_sets_none(http, key, llm, parley_env):
    from parley.store import workspaces
    from tests.support.servers import run_sync
    from pymongo import AsyncMongoClient

    async def set_default() -> None:
        client = AsyncMongoClient(parley_env.mongodb_uri)
        await workspaces.set_budget(client[parley_env.mongodb_db], "ws1", {"maxTokens": 40})
        await client.close()

    run_sync(set_default)
    script_duel(llm)
    resp = http.post("/api/debate", json={"topic": "Remote?", "userProfile": {"name": "Ada"}}, headers=auth(key))
    assert resp.status_code == 402 and resp.json()["short"] == ["maxTokens"]


REVIEWED = {
    "version": 1, "name": "Draft, review, revise",
    "state": {"topic": {"type": "string", "required": True}, "draft": {"type": "string"},
              "notes": {"type": "array"}, "revised": {"type": "string"}, "final": {"type": "string"}},
    "nodes": [
        {"id": "write", "type": "llm", "inputs": {"prompt": "Draft a memo on {topic}."}, "output_key": "draft"},
        {"id": "review", "type": "await", "config": {"on_end": "publish"}, "output_key": "notes"},
        {"id": "revise", "type": "llm", "inputs": {"prompt": "Revise {draft} with these notes: {notes}"},
         "output_key": "revised"},
        {"id": "publish", "type": "llm", "inputs": {"prompt": "Publish {draft}."}, "output_key": "final"},
    ],
    "edges": [{"from": "write", "to": "review"}, {"from": "review", "to": "revise"}, {"from": "revise", "to": "publish"}],
    "entry": "write", "finish": ["publish"],
}


def test_a_workflow_waits_at_its_await_node_takes_the_guidance_or_ends_to_on_end(http, make_key, llm):
    key = make_key(["workflows"])
    started = http.post("/v1/workflows/runs", json={"workflow": REVIEWED, "input": {"topic": "Lyon"}},
                        headers=auth(key))
    assert started.status_code == 202, started.text  # it waits at `review`: the run, to steer
    run_id = started.json()["id"]
    assert started.json()["status"] == "waiting" and started.json()["waiting"]["at"] == "review"
    assert send(http, key, run_id, action="guide", content="Cite the lease terms.").status_code == 202
    eventually(lambda: run_of(http, key, run_id)["status"] == "completed", "the workflow ends")
    output = run_of(http, key, run_id)["result"]["output"]
    assert output["notes"] == ["Cite the lease terms."] and set(output) == {"topic", "draft", "notes", "revised",
                                                                           "final"}
    assert any("Cite the lease terms." in r["messages"][-1]["content"] for r in llm.requests)

    ended = http.post("/v1/workflows/runs", json={"workflow": REVIEWED, "input": {"topic": "Nice"}},
                      headers=auth(key)).json()["id"]
    asked = len(llm.requests)
    assert send(http, key, ended, action="end").status_code == 202
    eventually(lambda: run_of(http, key, ended)["status"] == "completed", "the ended workflow finishes")
    run = run_of(http, key, ended)
    assert run["stoppedBy"] == "user" and "revised" not in run["result"]["output"]  # straight to `publish`
    assert [r["messages"][-1]["content"].split(" ")[0] for r in llm.requests[asked:]] == ["Publish"]
    events = list(iter_sse(http.get(f"/v1/runs/{ended}/events", headers=auth(key)).iter_lines()))
    assert events[-1].event == "done" and events[-1].json()["stoppedBy"] == "user"
    kinds = [e.json()["kind"] for e in events if e.event == "progress" and e.json()["node"] == "review"]
    assert kinds == ["resumed", "stopping"]

    llm.script(match="Draft a memo on Paris", reply="A draft.", hold="draft")
    plain = {**REVIEWED, "nodes": REVIEWED["nodes"][:1], "edges": [], "finish": ["write"]}
    with http.stream("POST", "/v1/workflows/runs/stream", json={"workflow": plain, "input": {"topic": "Paris"}},
                     headers=auth(key)) as running:
        llm.wait_held("draft")
        resp = send(http, key, running.headers["x-run-id"], content="hello")
        assert resp.status_code == 409 and resp.json()["code"] == "run_not_steerable" and "await" in resp.text
        llm.release("draft")
    bad = {**REVIEWED, "state": {**REVIEWED["state"], "consumed": {"type": "array"}}}
    resp = http.post("/v1/workflows/runs", json={"workflow": bad, "input": {"topic": "x"}}, headers=auth(key))
    assert resp.status_code == 422 and "await nodes" in resp.text


def test_a_chat_completion_takes_its_budget_in_the_extra_body(parley, make_key, llm, sync_db):
    import openai

    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    sdk = openai.OpenAI(base_url=parley.url + "/v1", api_key=make_key(["chat"]), max_retries=0, timeout=30)
    question = [{"role": "user", "content": "Open in Lyon?"}]
    with pytest.raises(openai.APIStatusError) as refused:
        sdk.chat.completions.create(model="openai:gpt-5", messages=question,
                                    extra_body={"parley_budget": {"maxTokens": 10}})
    assert refused.value.status_code == 402
    assert refused.value.body["code"] == "budget_too_small" and refused.value.body["minimum"]["maxTokens"] > 10
    with pytest.raises(openai.BadRequestError) as bad:
        sdk.chat.completions.create(model="openai:gpt-5", messages=question,
                                    extra_body={"parley_budget": {"maxCost": "lots"}})
    assert "parley_budget.maxCost" in str(bad.value)
    assert not llm.requests  # nothing was asked of a model
    answered = sdk.chat.completions.with_raw_response.create(model="openai:gpt-5", messages=question,
                                                             extra_body={"parley_budget": {"maxCost": 0.5}})
    assert answered.parse().choices[0].message.content
    run = sync_db.runs.find_one({"_id": answered.headers["x-run-id"]})
    assert run["budget"]["limits"] == {"maxCost": 0.5} and run["budget"]["spent"]["costUsd"] <= 0.5


def test_inputs_are_capped_per_run_and_taken_in_a_few_at_a_boundary(http, key, llm, sync_db, monkeypatch):
    """4,500 inputs once made one page of events MongoDB refused: a run takes at most MAX_RUN_INPUTS messages (409
    `too_many_inputs` past it, nothing stored), and a boundary takes in at most MAX_INPUTS_PER_BOUNDARY messages, the
    others at the next (lowered here to 3 and 2). Controls (the pause, the continue) are not counted."""
    monkeypatch.setattr("parley.store.runs.MAX_RUN_INPUTS", 3)
    monkeypatch.setattr("parley.nodes.steer.MAX_INPUTS_PER_BOUNDARY", 2)
    run_id = paused_duel(http, key, llm)
    for i in range(3):
        assert send(http, key, run_id, content=f"Message {i}.").status_code == 202
    refused = send(http, key, run_id, content="One too many.")
    assert refused.status_code == 409 and refused.json()["code"] == "too_many_inputs", refused.text
    assert send(http, key, run_id, action="continue").status_code == 202  # at the cap: it goes on
    assert sync_db.run_inputs.count_documents({"runId": run_id}) == 5  # the refused one was not kept
    eventually(lambda: run_of(http, key, run_id)["status"] == "completed", "the duel ends")
    events = list(iter_sse(http.get(f"/v1/runs/{run_id}/events", headers=auth(key)).iter_lines()))
    heard = [(e.json()["content"], e.json()["position"]) for e in events if e.event == "human"]
    # Two messages (and the answer that lets the duel go on) at the wait after turn 1, the third at the next boundary.
    assert heard == [("Message 0.", 1), ("Message 1.", 1), ("Message 2.", 2)], heard


def test_a_waiting_run_at_its_input_cap_can_still_be_continued_and_ended(http, key, llm, sync_db, monkeypatch):
    """A waiting run sent MAX_RUN_INPUTS messages once answered 409 to `continue`, `guide` and `end` alike, and
    waited until cancelled: the cap counts messages; the first control of each kind in a lap of the run (at a wait,
    or between two waits) always gets through, a repeated one counts (and is refused at the cap)."""
    monkeypatch.setattr("parley.store.runs.MAX_RUN_INPUTS", 2)
    llm.script(match="Round 1 of 3.", reply=USER_REPLY, hold="turn", times=1)
    script_duel(llm, opponent_turn={"hold": "opponent"})
    run_id = start_duel(http, key)
    llm.wait_held("turn")
    assert send(http, key, run_id, action="pause").status_code == 202
    llm.release("turn")
    eventually(lambda: run_of(http, key, run_id)["status"] == "waiting", "the duel waits after its first turn")
    for i in range(2):
        assert send(http, key, run_id, content=f"Message {i}.").status_code == 202
    assert send(http, key, run_id, content="One too many.").json()["code"] == "too_many_inputs"
    went_on = send(http, key, run_id, action="continue")
    assert went_on.status_code == 202, went_on.text
    assert went_on.json()["run"]["status"] != "waiting"
    llm.wait_held("opponent")  # the opponent's first turn: the duel goes on
    ended = send(http, key, run_id, action="end")
    assert ended.status_code == 202, ended.text
    again = send(http, key, run_id, action="end")  # the same control again in the same lap: counted, so refused
    assert again.status_code == 409 and again.json()["code"] == "too_many_inputs", again.text
    llm.release("opponent")
    eventually(lambda: run_of(http, key, run_id)["status"] == "completed", "the duel ends")
    run = run_of(http, key, run_id)
    assert run["stoppedBy"] == "user" and run["result"]["messages"] == 2
    inputs = [(i.get("action"), i.get("content")) for i in sync_db.run_inputs.find({"runId": run_id}).sort("at")]
    assert inputs == [("pause", None), (None, "Message 0."), (None, "Message 1."), ("continue", None), ("end", None)]
