"""A budget in tokens counts what the models reported, reasoning included: seats that write a few visible words but
spend thousands of reasoning tokens stop a duel or a round table on `maxTokens`, where the same debate without the
reasoning runs to its end under the same budget. Real HTTP, the scripted model server, a real database."""

from __future__ import annotations

from tests.api.test_steering_api import ask_table, auth, run_of, script_split_table, seat_table
from tests.support.duel import script_duel

REASONING = 2000  # hidden tokens per turn; the visible turns are a few dozen tokens


def duel(http, key, **fields):
    body = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 3, **fields}
    resp = http.post("/api/debate", json=body, headers=auth(key))
    assert resp.status_code == 200, resp.text
    return run_of(http, key, resp.headers["x-run-id"])


def test_a_duel_whose_turns_spend_reasoning_tokens_stops_on_its_token_budget(http, make_key, llm, sync_db):
    key = make_key(["debate"])
    script_duel(llm)
    plain = duel(http, key, maxTokens=8000)
    assert plain["status"] == "completed" and plain["stoppedBy"] is None
    assert plain["usage"]["reasoningTokens"] == 0 and plain["usage"]["totalTokens"] < 8000

    llm.reset()
    script_duel(llm, user_turn={"reasoning_tokens": REASONING}, opponent_turn={"reasoning_tokens": REASONING})
    reasoning = duel(http, key, maxTokens=8000)
    assert reasoning["status"] == "completed" and reasoning["stoppedBy"] == "budget"
    turns = [r for r in llm.requests if r.get("stream") and "Round " in r["messages"][-1]["content"]]
    assert len(turns) < 6  # three rounds are six turns
    usage = reasoning["usage"]
    assert usage["reasoningTokens"] == REASONING * len(turns)
    assert usage["outputTokens"] > usage["reasoningTokens"]  # the visible words are output too
    assert reasoning["budget"]["spent"]["tokens"] == usage["totalTokens"]  # what was charged is what was reported
    rows = list(sync_db.usage.find({"requestId": reasoning["id"]}))
    assert sum(r["reasoningTokens"] for r in rows) == usage["reasoningTokens"]


def test_a_round_table_whose_seats_spend_reasoning_tokens_stops_on_its_token_budget(http, make_key, llm):
    key = make_key(["conversations", "debate"])
    script_split_table(llm, reply_words=5)
    conversation = seat_table(http, key)
    plain = ask_table(http, key, conversation, maxTokens=30000)
    assert plain.status_code == 200, plain.text
    assert plain.json()["totalRounds"] == 3 and plain.json().get("stoppedBy") != "budget"

    llm.reset()
    for name, stance in (("Claire", "for"), ("Marc", "against"), ("Devil's Advocate", "against")):
        llm.script(match=f"Record {name}'s stance", json={"stance": stance, "confidence": 0.9,
                                                           "keyPoint": f"{name} holds {stance}."})
    for name in ("Claire", "Marc"):
        llm.script(match=f"You are {name},", reply=f"{name} argues briefly.", reasoning_tokens=2 * REASONING)
    stopped = ask_table(http, key, conversation, maxTokens=30000)
    assert stopped.status_code == 200, stopped.text
    body = stopped.json()
    assert body["stoppedBy"] == "budget" and body["totalRounds"] < 3 and body["synthesis"]["recommendedAction"]
    run = run_of(http, key, stopped.headers["x-run-id"])
    assert run["stoppedBy"] == "budget" and run["usage"]["reasoningTokens"] >= 4 * REASONING
    assert run["usage"]["totalTokens"] == run["budget"]["spent"]["tokens"]
    assert body["tokenUsage"]["totalTokensUsed"] == run["usage"]["totalTokens"]
