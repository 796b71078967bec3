"""Every model call a run makes is in its usage rows, whatever became of its answer: for each mode (chat, panel and
debate under its rules, Responses, duel, round table, workflow) and each way an answer fails (a reviewer's ranking
off its schema, a verdict or a stance unreadable, a `response_format` answer that fails its schema and its repair, a
stream cut off mid-answer), the scripted server's count of calls equals the calls of the usage rows, and the credit
settled is what those rows cost. And what a chat completion reserves: what its calls can spend."""

from __future__ import annotations

import pytest

# The panel API's fixtures: the debate preset on PANEL with ARBITRATOR, a key with credit, the openai SDK and httpx.
from tests.api.test_panel_api import ARBITRATOR, PANEL, api, balance, client, key, server  # noqa: F401
from tests.support.duel import script_duel
from tests.support.wait import eventually

QUESTION = [{"role": "user", "content": "Should I take an umbrella today?"}]
NAMES = [model.split(":", 1)[1] for model in PANEL]
EVENT = {"type": "json_schema", "json_schema": {"name": "Event", "schema": {
    "type": "object", "properties": {"title": {"type": "string"}, "day": {"type": "string"}},
    "required": ["title", "day"]}}}


def answer_panel(llm, **rule) -> None:
    for name in NAMES:
        llm.script(model=name, reply="Take one: rain is forecast for the afternoon.", **rule)


def chat_failing_its_format(llm, api, stream: bool) -> None:
    llm.script(model="gpt-4o", json={"title": "Fair"})  # no `day`, first and after the repair
    api.post("/v1/chat/completions", json={"model": "openai:gpt-4o", "messages": QUESTION, "stream": stream,
                                           "response_format": EVENT})


def rank_with_unreadable_reviews(llm, api, stream: bool) -> None:
    for name in NAMES:  # every letter twice: no ranking reads, on either attempt; every reviewer abstains
        llm.script(model=name, match="Rank these answers", json={"ranking": ["A", "A"], "reason": "x"})
    answer_panel(llm)
    api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION, "stream": stream,
                                           "rule": "rank", "seed": 3})


def debate_with_a_panelist_cut_off(llm, api, stream: bool) -> None:
    llm.script(model=NAMES[0], reply="Take one: rain is forecast for the whole afternoon.", drop_after=3)
    answer_panel(llm)
    api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION, "stream": stream})


def arbitrated_answer_failing_its_format(llm, api, stream: bool) -> None:
    llm.script(model=ARBITRATOR.split(":", 1)[1], json={"title": "Fair"})
    answer_panel(llm)
    api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION, "stream": stream,
                                           "response_format": EVENT})


def response_failing_its_format(llm, api, stream: bool) -> None:
    llm.script(model="gpt-4o", json={"title": "Fair"})
    fmt = {"type": "json_schema", "name": "Event", "schema": EVENT["json_schema"]["schema"]}
    api.post("/v1/responses", json={"model": "openai:gpt-4o", "input": "Plan a fair.", "stream": stream,
                                    "text": {"format": fmt}})


CASES = {
    "chat: response_format failing its repair": chat_failing_its_format,
    "panel rank: reviewers unreadable": rank_with_unreadable_reviews,
    "panel: a panelist cut off mid-answer": debate_with_a_panelist_cut_off,
    "panel: the arbitrator's answer failing its format": arbitrated_answer_failing_its_format,
    "responses: failing its format": response_failing_its_format,
}


def usage_calls(sync_db) -> int:
    return sum(row["calls"] for row in sync_db.usage.find())


def assert_every_call_billed(llm, sync_db, before: float | None = None) -> None:
    calls = len(llm.requests)
    eventually(lambda: usage_calls(sync_db) >= calls, f"usage rows holding the {calls} calls made")
    assert usage_calls(sync_db) == calls
    if before is not None:  # the credit settled is what the rows cost
        cost = sum(row["costUsd"] for row in sync_db.usage.find())
        eventually(lambda: balance(sync_db) == pytest.approx(before - cost), "the credit settled to the rows' cost")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("case", list(CASES))
def test_every_call_a_run_made_is_in_its_usage_rows(api, llm, sync_db, case, stream):
    before = balance(sync_db)
    CASES[case](llm, api, stream)
    assert len(llm.requests) > 1
    assert_every_call_billed(llm, sync_db, before)


def test_every_call_of_a_duel_is_in_its_usage_rows(parley, make_key, llm, sync_db):
    """A duel's judges answering off their schema (each verdict asked again, then given up) are billed too."""
    script_duel(llm, as_debated={"winner": "nobody"}, swapped={"winner": "nobody"})
    import httpx

    with httpx.Client(base_url=parley.url, timeout=60) as http:
        resp = http.post("/api/debate", headers={"Authorization": f"Bearer {make_key(['debate'])}"},
                         json={"topic": "Remote work beats the office", "userProfile": {"name": "Ada"}, "rounds": 1})
    assert resp.status_code == 200
    assert len(llm.requests) > 1
    assert_every_call_billed(llm, sync_db)


# --- what a run reserves ----------------------------------------------------------------------------


def reserved(sync_db) -> float:
    [run] = list(sync_db.runs.find({"kind": "panel"}))
    return run["input"]["bill"]["credit"]


def test_a_rank_debate_reserves_what_its_calls_can_spend(api, llm, sync_db):
    """The reviewers and the arbitrator read the answers, and a reviewer may be asked twice: the reservation prices
    each call with the prompt it reads, so what the run spends stays within what it reserved."""
    for name in NAMES:  # every reviewer's first ranking is unreadable: each is asked again, and abstains
        llm.script(model=name, match="Rank these answers", json={"ranking": ["A", "A"], "reason": "x"})
    llm.script(model=ARBITRATOR.split(":", 1)[1], reply="word " * 300)
    answer_panel_long = " ".join(["Take one, rain is forecast for the whole afternoon."] * 40)
    for name in NAMES:
        llm.script(model=name, reply=answer_panel_long)
    resp = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION, "rule": "rank",
                                                  "seed": 3, "max_tokens": 300})
    assert resp.status_code == 200, resp.text
    assert_every_call_billed(llm, sync_db)
    spent = sum(row["costUsd"] for row in sync_db.usage.find())
    assert 0 < spent <= reserved(sync_db) and len(llm.requests) == 3 + 3 * 2 + 1


def test_a_rank_debate_reserves_every_call_it_may_make(api, llm, sync_db):
    """Three panelists, three reviewers asked twice at most, an arbitrator: ten calls, where the question's size
    times seven was reserved."""
    sync_db.workspaces.update_one({"_id": "ws1"}, {"$set": {"creditUsd": 0.000001}})
    resp = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION, "rule": "rank"})
    assert resp.status_code == 402 and resp.json()["error"]["code"] == "insufficient_credits"
    assert "what its 10 model calls may cost at most" in resp.json()["error"]["message"]
    assert llm.requests == []


def test_a_reservation_is_at_most_the_budgets_max_cost(api, llm, sync_db):
    answer_panel(llm)
    resp = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION, "rule": "rank",
                                                  "max_tokens": 4000, "parley_budget": {"maxCost": 0.35}})
    assert resp.status_code == 200, resp.text
    assert reserved(sync_db) == 0.35


def test_every_call_of_a_round_table_is_in_its_usage_rows(http, make_key, llm, sync_db):
    """Every structured answer (stances, convergence, memory notes, the synthesis) off its schema: read as unknown,
    retried or given up, and billed."""
    from tests.api.test_roundtable_api import add_agent, ask, new_conversation

    key = make_key(["conversations"])
    add_agent(http, key, "Claire", "Finance"), add_agent(http, key, "Marc", "Sales")
    conversation = new_conversation(http, key)
    llm.script(json={"nothing": "that any schema wants"})
    resp = ask(http, key, conversation["id"])
    assert resp.status_code == 200
    assert len(llm.requests) > 2
    assert_every_call_billed(llm, sync_db)


def test_every_call_of_a_workflow_run_is_in_its_usage_rows(http, make_key, llm, sync_db):
    """A structured node's answer off its schema (the outline), asked again, then failing the run: billed."""
    from parley.designer import load_example

    auth = {"x-api-key": make_key(["workflows"])}
    workflow = http.post("/v1/workflows", headers=auth, json=load_example("outline-brief")).json()
    llm.script(json={"nothing": "that any schema wants"})
    http.post(f"/v1/workflows/{workflow['id']}/runs", headers=auth,
              json={"input": {"topic": "vaccines", "audience": "children"}})
    assert len(llm.requests) >= 1
    assert_every_call_billed(llm, sync_db)
