"""Round-table HTTP contract (the round-table contract, docs/api.md) over real HTTP, scripted model, real database."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from tests.support.sse import iter_sse

SYNTHESIS_FIELDS = {
    "summary", "debateEvolution", "devilsAdvocateMainAttack", "agentInsights", "consensus", "riskPoints",
    "recommendedAction", "conditions", "confidenceLevel", "urgency", "roundCount", "raw",
}


@pytest.fixture
def key(make_key):
    return make_key(["conversations"])


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def add_agent(http, key, name, role="Finance", **extra) -> dict:
    resp = http.post("/v1/agents", json={"name": name, "role": role, "persona": f"{name} persona", **extra},
                     headers=auth(key))
    assert resp.status_code == 201, resp.text
    return resp.json()["agent"]


def new_conversation(http, key, title="Should we open a second office in Lyon?") -> dict:
    resp = http.post("/v1/conversations", json={"title": title}, headers=auth(key))
    assert resp.status_code == 201, resp.text
    return resp.json()["conversation"]


def ask(http, key, conversation_id, content="Open now, wait, or hire remotely?", **kwargs) -> httpx.Response:
    return http.post(f"/v1/conversations/{conversation_id}/message", json={"content": content},
                     headers={**auth(key), **kwargs.pop("headers", {})}, **kwargs)


def sse_events(text: str) -> list[tuple[int, str, dict]]:
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in fields:
            events.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return events


@pytest.fixture
def table(http, key):
    """Two agents and a conversation."""
    agents = [add_agent(http, key, "Claire", "Finance"), add_agent(http, key, "Marc", "Sales")]
    return agents, new_conversation(http, key)


# --- agents ---------------------------------------------------------------------------------


def test_agent_crud_keeps_creation_order(http, key, make_key):
    first = add_agent(http, key, "Claire", "Finance", model="openai:gpt-5")
    second = add_agent(http, key, "Marc", "Sales")
    assert first["model"] == "openai:gpt-5" and first["isDevilsAdvocate"] is False
    assert first["persona"] == "Claire persona" and first["workspaceId"] == "ws1"
    listed = http.get("/v1/agents", headers=auth(key)).json()["agents"]
    assert [a["name"] for a in listed] == ["Claire", "Marc"]

    resp = http.patch(f"/v1/agents/{first['id']}", json={"role": "CFO", "model": None}, headers=auth(key))
    assert resp.status_code == 200 and resp.json()["agent"]["role"] == "CFO" and resp.json()["agent"]["model"] is None
    assert http.get(f"/v1/agents/{first['id']}", headers=auth(key)).json()["agent"]["role"] == "CFO"
    assert [a["name"] for a in http.get("/v1/agents", headers=auth(key)).json()["agents"]] == ["Claire", "Marc"]

    assert http.delete(f"/v1/agents/{second['id']}", headers=auth(key)).status_code == 204
    assert http.get(f"/v1/agents/{second['id']}", headers=auth(key)).status_code == 404
    other = make_key(["conversations"], workspace="ws2")
    assert http.get(f"/v1/agents/{first['id']}", headers=auth(other)).json() == {"error": "Agent not found", "code": "not_found"}
    assert http.delete(f"/v1/agents/{first['id']}", headers=auth(other)).status_code == 404


def test_bad_agent_bodies_are_400_naming_the_field(http, key):
    for body, named in [
        ({"role": "x"}, "name"),
        ({"name": "   "}, "name"),
        ({"name": "X", "isDevilsAdvocate": True}, "isDevilsAdvocate"),
        ({"name": "X", "model": "local:smollm2"}, "model"),
    ]:
        resp = http.post("/v1/agents", json=body, headers=auth(key))
        assert resp.status_code == 400 and named in resp.json()["error"], resp.text
    assert http.get("/v1/agents", headers=auth(key)).json()["agents"] == []
    agent = add_agent(http, key, "Claire")
    resp = http.patch(f"/v1/agents/{agent['id']}", json={}, headers=auth(key))
    assert resp.status_code == 400 and "Nothing to update" in resp.json()["error"]
    resp = http.patch(f"/v1/agents/{agent['id']}", json={"name": None}, headers=auth(key))
    assert resp.status_code == 400 and "name" in resp.json()["error"]
    assert http.get(f"/v1/agents/{agent['id']}", headers=auth(key)).json()["agent"]["name"] == "Claire"


def test_documents_are_linked_listed_limited_and_deleted(http, key, make_key):
    agent = add_agent(http, key, "Claire")
    url = f"/v1/agents/{agent['id']}/documents"
    resp = http.post(url, json={"title": "Lyon lease", "text": "Rent is 42,000 euros a year."}, headers=auth(key))
    assert resp.status_code == 201
    doc = resp.json()["document"]
    assert doc["title"] == "Lyon lease" and doc["chars"] == 28 and doc["text"].startswith("Rent")
    assert [d["id"] for d in http.get(url, headers=auth(key)).json()["documents"]] == [doc["id"]]
    assert http.get(f"{url}/{doc['id']}", headers=auth(key)).json()["document"]["text"].endswith("year.")

    resp = http.post(url, json={"title": "Huge", "text": "x" * 100_001}, headers=auth(key))
    assert resp.status_code == 413 and resp.json()["code"] == "document_too_large"
    assert http.post(url, json={"title": "", "text": "x"}, headers=auth(key)).status_code == 400
    other = make_key(["conversations"], workspace="ws2")
    assert http.get(url, headers=auth(other)).status_code == 404
    assert http.post(url, json={"title": "t", "text": "x"}, headers=auth(other)).status_code == 404

    assert http.delete(f"{url}/{doc['id']}", headers=auth(key)).status_code == 204
    assert http.delete(f"{url}/{doc['id']}", headers=auth(key)).status_code == 404
    assert http.get(url, headers=auth(key)).json()["documents"] == []


# --- keys and scopes ------------------------------------------------------------------------


def test_scopes_readonly_and_admin(http, key, make_key, table):
    agents, conversation = table
    cid = conversation["id"]
    denied = make_key(["debate"])
    for method, url in [("GET", "/v1/conversations"), ("POST", "/v1/conversations"), ("GET", "/v1/agents"),
                        ("POST", f"/v1/conversations/{cid}/message"), ("DELETE", f"/v1/conversations/{cid}")]:
        resp = http.request(method, url, headers=auth(denied), json={"title": "t", "content": "c"})
        assert resp.status_code == 403 and resp.json()["code"] == "scope_denied", (method, url)

    readonly = make_key(["readonly", "conversations"])
    assert http.get("/v1/conversations", headers=auth(readonly)).status_code == 200
    assert http.get(f"/v1/conversations/{cid}", headers=auth(readonly)).status_code == 200
    assert http.get("/v1/agents", headers=auth(readonly)).status_code == 200
    for method, url, body in [
        ("POST", "/v1/conversations", {"title": "t"}),
        ("POST", f"/v1/conversations/{cid}/message", {"content": "c"}),
        ("DELETE", f"/v1/conversations/{cid}", None),
        ("POST", "/v1/agents", {"name": "n"}),
        ("DELETE", f"/v1/agents/{agents[0]['id']}", None),
    ]:
        resp = http.request(method, url, headers=auth(readonly), json=body)
        assert resp.status_code == 403, (method, url)
        assert resp.json() == {"error": "This key is read-only", "code": "read_only_key"}

    admin = make_key(["admin"])
    assert http.post("/v1/agents", json={"name": "Admin-made"}, headers=auth(admin)).status_code == 201
    assert http.get("/v1/conversations", headers=auth(admin)).status_code == 200
    assert http.get("/v1/conversations").status_code == 401


def test_another_workspace_sees_nothing(http, key, make_key, table):
    _, conversation = table
    other = make_key(["conversations"], user="bob", workspace="ws2")
    cid = conversation["id"]
    assert http.get(f"/v1/conversations/{cid}", headers=auth(other)).json() == {"error": "Not found"}
    assert ask(http, other, cid).json() == {"error": "Conversation not found"}
    assert http.delete(f"/v1/conversations/{cid}", headers=auth(other)).status_code == 404
    assert http.get("/v1/conversations", headers=auth(other)).json() == {"conversations": []}
    assert http.get(f"/v1/conversations/{cid}", headers=auth(key)).status_code == 200


# --- conversations --------------------------------------------------------------------------


def test_create_and_list_conversations(http, key):
    created = new_conversation(http, key, "First")
    assert set(created) == {"id", "userId", "workspaceId", "title", "createdAt", "tokensUsed", "shareToken",
                            "isPublic", "goalOverride"}
    assert created["userId"] == "alice" and created["workspaceId"] == "ws1" and created["tokensUsed"] == 0
    assert created["shareToken"] is None and created["isPublic"] is False and created["goalOverride"] is None
    assert created["createdAt"].endswith("Z") and len(created["createdAt"]) == 24
    new_conversation(http, key, "Second")
    new_conversation(http, key, "Third")
    body = http.get("/v1/conversations", headers=auth(key)).json()
    assert list(body) == ["conversations"]
    assert [c["title"] for c in body["conversations"]] == ["Third", "Second", "First"]
    assert body["conversations"][0]["_count"] == {"messages": 0}

    page = http.get("/v1/conversations", params={"limit": 2}, headers=auth(key)).json()
    assert [c["title"] for c in page["conversations"]] == ["Third", "Second"] and page["nextCursor"]
    rest = http.get("/v1/conversations", params={"limit": 2, "cursor": page["nextCursor"]}, headers=auth(key)).json()
    assert [c["title"] for c in rest["conversations"]] == ["First"] and rest["nextCursor"] is None
    bad = http.get("/v1/conversations", params={"cursor": "nonsense"}, headers=auth(key))
    assert bad.status_code == 400 and "cursor" in bad.json()["error"]


def test_create_conversation_needs_a_title(http, key):
    for body in ({}, {"title": ""}, {"title": "   "}):
        resp = http.post("/v1/conversations", json=body, headers=auth(key))
        assert resp.status_code == 400 and "title" in resp.json()["error"]
    assert http.get("/v1/conversations", headers=auth(key)).json() == {"conversations": []}


def test_debate_is_stored_and_billed(http, key, table, sync_db, llm):
    agents, conversation = table
    sync_db.workspaces.update_one({"_id": "ws1"}, {"$set": {"allowanceTokens": 1_000_000}}, upsert=True)
    resp = ask(http, key, conversation["id"])
    assert resp.status_code == 200, resp.text
    result = resp.json()
    assert set(result) == {"synthesis", "totalRounds", "tokenUsage"}
    assert SYNTHESIS_FIELDS <= set(result["synthesis"])
    assert result["totalRounds"] == result["synthesis"]["roundCount"] == 1
    assert [i["name"] for i in result["synthesis"]["agentInsights"]] == ["Claire", "Marc", "Devil's Advocate"]
    used = result["tokenUsage"]["totalTokensUsed"]
    assert used > 0 and result["tokenUsage"]["remainingBalance"] == 1_000_000 - used

    detail = http.get(f"/v1/conversations/{conversation['id']}", headers=auth(key)).json()["conversation"]
    assert detail["tokensUsed"] == used
    messages = detail["messages"]
    stamps = [m["createdAt"] for m in messages]
    assert stamps == sorted(stamps) and len(set(stamps)) > 2  # chronological, each turn stamped when spoken
    assert [m["senderType"] for m in (messages[0], messages[-1])] == ["user", "synthesizer"]
    for round_number, turns in ((0, messages[1:4]), (1, messages[4:7])):
        assert sorted(m["senderType"] for m in turns) == ["agent", "agent", "devils-advocate"]
        assert {m["metadata"]["roundNumber"] for m in turns} == {round_number}
    first_agent = next(m for m in messages[1:4] if m.get("agentName") == "Claire")
    assert first_agent["agentRole"] == "Finance"
    assert first_agent["metadata"]["phase"] == "initial" and first_agent["metadata"]["roundNumber"] == 0
    assert first_agent["metadata"]["isDevilsAdvocate"] is False
    advocate = next(m for m in messages[4:7] if m["senderType"] == "devils-advocate")
    meta = advocate["metadata"]
    assert (meta["phase"], meta["roundNumber"], meta["isDevilsAdvocate"]) == ("debate", 1, True)
    synthesizer = detail["messages"][-1]
    assert synthesizer["metadata"]["recommendedAction"] in synthesizer["content"]
    # The contract's `debates`: debate rounds only, each with a numeric score; round 0 sits apart, unscored.
    assert [d["roundNumber"] for d in detail["debates"]] == [1]
    assert set(detail["debates"][0]) == {"id", "exchange", "roundNumber", "convergenceScore", "usage", "createdAt"}
    assert isinstance(detail["debates"][0]["convergenceScore"], float)
    assert 0 <= detail["debates"][0]["convergenceScore"] <= 1
    assert [d["roundNumber"] for d in detail["initialRounds"]] == [0]
    assert set(detail["initialRounds"][0]) == {"id", "exchange", "roundNumber", "usage", "createdAt"}
    assert set(detail["debates"][0]["usage"]) == {agents[0]["id"], agents[1]["id"], advocate["agentId"]}
    assert set(detail["initialRounds"][0]["usage"]) == set(detail["debates"][0]["usage"])
    rounds = detail["initialRounds"] + detail["debates"]
    round_tokens = sum(u["inputTokens"] + u["outputTokens"] for d in rounds for u in d["usage"].values())
    assert 0 < round_tokens < used  # the rest is the synthesis and the memory notes
    rows = list(sync_db.usage.find({"workspace": "ws1", "mode": "roundtable"}))
    assert sum(r["inputTokens"] + r["outputTokens"] for r in rows) == used
    listed = http.get("/v1/conversations", headers=auth(key)).json()["conversations"]
    assert listed[0]["_count"] == {"messages": 8} and listed[0]["tokensUsed"] == used


def test_devils_advocate_is_created_once_and_not_counted_in_the_seats(http, key, llm):
    for i in range(6):
        add_agent(http, key, f"Agent{i}")
    conversation = new_conversation(http, key)
    assert ask(http, key, conversation["id"]).status_code == 200
    assert ask(http, key, conversation["id"], "And if we wait six months?").status_code == 200
    agents = http.get("/v1/agents", headers=auth(key)).json()["agents"]
    advocates = [a for a in agents if a["isDevilsAdvocate"]]
    assert len(advocates) == 1 and advocates[0]["name"] == "Devil's Advocate"
    detail = http.get(f"/v1/conversations/{conversation['id']}", headers=auth(key)).json()["conversation"]
    speakers = {m["agentName"] for m in detail["messages"] if m["senderType"] in ("agent", "devils-advocate")}
    assert speakers == {"Agent0", "Agent1", "Agent2", "Agent3", "Agent4", "Devil's Advocate"}


def test_message_needs_content(http, key, table, llm):
    _, conversation = table
    for body in ({}, {"content": ""}, {"content": "  \n "}):
        resp = http.post(f"/v1/conversations/{conversation['id']}/message", json=body, headers=auth(key))
        assert resp.status_code == 400 and "content" in resp.json()["error"]
    assert llm.requests == []


def test_message_to_unknown_conversation_is_404(http, key):
    resp = ask(http, key, "conv_missing")
    assert resp.status_code == 404 and resp.json() == {"error": "Conversation not found"}


def test_no_agents_is_the_seeds_500(http, key, llm):
    conversation = new_conversation(http, key)
    resp = ask(http, key, conversation["id"])
    assert resp.status_code == 500
    assert resp.json() == {"error": "No agents found. Please create agents first."}
    assert llm.requests == []


def test_exhausted_allowance_is_500_before_any_model_call(http, key, table, sync_db, llm):
    _, conversation = table
    sync_db.workspaces.update_one({"_id": "ws1"}, {"$set": {"allowanceTokens": 500}}, upsert=True)
    resp = ask(http, key, conversation["id"])
    assert resp.status_code == 500 and "allowance" in resp.json()["error"]
    assert llm.requests == []
    assert sync_db.workspaces.find_one({"_id": "ws1"})["allowanceTokens"] == 500
    detail = http.get(f"/v1/conversations/{conversation['id']}", headers=auth(key)).json()["conversation"]
    assert detail["messages"] == [] and detail["tokensUsed"] == 0


def test_model_failure_is_500_and_bills_what_was_used(http, key, table, llm, sync_db):
    _, conversation = table
    llm.script(match="This is debate round 1", status=400, reply="context length exceeded")
    resp = ask(http, key, conversation["id"])
    assert resp.status_code == 500
    body = resp.json()
    assert body["error"].startswith("Model failure") and "400" in body["error"]
    assert body["tokenUsage"]["totalTokensUsed"] > 0  # round 0 ran and is billed
    detail = http.get(f"/v1/conversations/{conversation['id']}", headers=auth(key)).json()["conversation"]
    assert [m["senderType"] for m in detail["messages"]] == ["user"]
    assert detail["tokensUsed"] == body["tokenUsage"]["totalTokensUsed"]


def test_rate_limit_is_30_per_minute_per_key(http, key, make_key):
    statuses = [ask(http, key, "conv_missing").status_code for _ in range(31)]
    assert statuses == [404] * 30 + [429]
    resp = ask(http, key, "conv_missing")
    assert resp.json()["code"] == "rate_limited" and int(resp.headers["retry-after"]) >= 1
    assert ask(http, make_key(["conversations"]), "conv_missing").status_code == 404  # another key, own budget


def test_follow_up_continues_the_same_table_with_bounded_history(http, key, table, llm):
    _, conversation = table
    llm.script(match="Write the synthesis", times=1,
               json={"summary": "Hire the Lyon sales lead before signing.", "debateEvolution": "e",
                     "devilsAdvocateMainAttack": "a", "consensus": [], "riskPoints": [],
                     "recommendedAction": "Hire first.", "conditions": [], "confidenceLevel": "medium",
                     "urgency": "low"})
    assert ask(http, key, conversation["id"], "Open Lyon now?").status_code == 200
    before = len(llm.requests)
    assert ask(http, key, conversation["id"], "And if we delay the lease by six months?").status_code == 200
    follow_up = [r for r in llm.requests[before:] if r.get("stream")]
    prompt = "\n".join(m["content"] for m in follow_up[0]["messages"])
    assert "Q1: Open Lyon now?" in prompt and "Hire the Lyon sales lead before signing." in prompt
    assert "Question: And if we delay the lease by six months?" in prompt
    assert "Topic: Should we open a second office in Lyon?" in prompt
    detail = http.get(f"/v1/conversations/{conversation['id']}", headers=auth(key)).json()["conversation"]
    assert [m["content"] for m in detail["messages"] if m["senderType"] == "user"] == [
        "Open Lyon now?", "And if we delay the lease by six months?"]
    assert [d["exchange"] for d in detail["debates"]] == [1, 2]
    assert [d["exchange"] for d in detail["initialRounds"]] == [1, 2]


def test_delete_cascades_but_keeps_memories(http, key, table, sync_db, llm):
    agents, conversation = table
    llm.script(match="short notes", json={"notes": ["Lyon demand is real."]})
    assert ask(http, key, conversation["id"]).status_code == 200
    cid = conversation["id"]
    assert sync_db.debate_rounds.count_documents({"conversationId": cid}) == 2
    assert http.delete(f"/v1/conversations/{cid}", headers=auth(key)).status_code == 204
    assert http.get(f"/v1/conversations/{cid}", headers=auth(key)).status_code == 404
    assert sync_db.conversation_messages.count_documents({"conversationId": cid}) == 0
    assert sync_db.debate_rounds.count_documents({"conversationId": cid}) == 0
    assert sync_db.conversations.count_documents({"_id": cid}) == 0
    memories = http.get(f"/v1/agents/{agents[0]['id']}/memories", headers=auth(key)).json()["memories"]
    assert [m["content"] for m in memories] == ["Lyon demand is real."] and memories[0]["conversationId"] == cid
    resp = http.delete(f"/v1/conversations/{cid}", headers=auth(key))
    assert resp.status_code == 404 and resp.json() == {"error": "Conversation not found"}


def test_memories_are_formed_used_next_time_and_deletable(http, key, table, llm):
    agents, conversation = table
    llm.script(match="short notes", json={"notes": ["Marc overestimates pipelines.", "Leases need a break clause."]})
    assert ask(http, key, conversation["id"]).status_code == 200
    url = f"/v1/agents/{agents[0]['id']}/memories"
    memories = http.get(url, headers=auth(key)).json()["memories"]
    assert sorted(m["content"] for m in memories) == ["Leases need a break clause.", "Marc overestimates pipelines."]

    llm.reset()
    other = new_conversation(http, key, "Hire a second salesperson?")
    assert ask(http, key, other["id"], "Hire now?").status_code == 200
    claire = next(r for r in llm.requests if r.get("stream") and "You are Claire," in r["messages"][0]["content"])
    assert "- Marc overestimates pipelines." in claire["messages"][0]["content"]

    one = http.get(url, headers=auth(key)).json()["memories"][0]["id"]
    assert http.delete(f"{url}/{one}", headers=auth(key)).status_code == 204
    assert http.delete(f"{url}/{one}", headers=auth(key)).status_code == 404
    assert http.delete(url, headers=auth(key)).status_code == 204
    assert http.get(url, headers=auth(key)).json()["memories"] == []


def test_documents_reach_the_debate(http, key, table, llm):
    agents, conversation = table
    docs = f"/v1/agents/{agents[0]['id']}/documents"
    http.post(docs, json={"title": "Lyon lease terms", "text": "The Lyon office lease costs 42,000 euros a year."},
              headers=auth(key))
    http.post(docs, json={"title": "Brand guide", "text": "Use teal and orange in social posts."}, headers=auth(key))
    assert ask(http, key, conversation["id"], "Can we afford the Lyon lease?").status_code == 200
    claire = next(r for r in llm.requests if r.get("stream") and "You are Claire," in r["messages"][0]["content"])
    system = claire["messages"][0]["content"]
    assert "[Lyon lease terms]\nThe Lyon office lease costs 42,000 euros a year." in system
    assert "Brand guide" not in system


# --- streaming and idempotency --------------------------------------------------------------


def test_streamed_debate_events_in_order(http, key, table):
    _, conversation = table
    url = f"/v1/conversations/{conversation['id']}/message"
    with http.stream("POST", url, params={"stream": "true"}, json={"content": "Open Lyon?"}, headers=auth(key)) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert [name for _, name, _ in sse_events(r.read().decode())][-1] == "done"
    with http.stream("POST", url, json={"content": "And Paris?"},
                     headers={**auth(key), "Accept": "text/event-stream"}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        events = sse_events(resp.read().decode())
    assert [seq for seq, _, _ in events] == list(range(len(events)))
    names = [name for _, name, _ in events]
    assert names[0] == "round_start" and events[0][2]["roundNumber"] == 0
    assert names[-3:] == ["convergence", "synthesis", "done"]
    second_round = names.index("round_start", 1)
    assert names[1:second_round].count("message") == 3 and "chunk" in names[1:second_round]
    assert events[second_round][2]["roundNumber"] == 1
    chunk = next(data for _, name, data in events if name == "chunk")
    assert set(chunk) >= {"agentId", "agentName", "content"}
    done = events[-1][2]
    assert done["totalRounds"] == 1 and done["tokenUsage"]["totalTokensUsed"] > 0
    assert SYNTHESIS_FIELDS <= set(events[-2][2]["synthesis"])


def test_streamed_errors_before_the_run_keep_their_status(http, key):
    conversation = new_conversation(http, key)
    resp = http.post(f"/v1/conversations/{conversation['id']}/message?stream=true", json={"content": "Q?"},
                     headers=auth(key))
    assert resp.status_code == 500 and resp.json()["error"] == "No agents found. Please create agents first."


def test_idempotent_retry_returns_the_first_result_without_a_second_debate(http, key, table, llm, sync_db):
    _, conversation = table
    headers = {"Idempotency-Key": "lyon-1"}
    first = ask(http, key, conversation["id"], headers=headers)
    calls = len(llm.requests)
    assert first.status_code == 200 and calls > 0
    again = ask(http, key, conversation["id"], headers=headers)
    assert again.status_code == 200 and again.json() == first.json()
    assert len(llm.requests) == calls
    detail = http.get(f"/v1/conversations/{conversation['id']}", headers=auth(key)).json()["conversation"]
    assert [m["senderType"] for m in detail["messages"]].count("user") == 1
    assert detail["tokensUsed"] == first.json()["tokenUsage"]["totalTokensUsed"]

    reused = ask(http, key, conversation["id"], "A different question?", headers=headers)
    assert reused.status_code == 409 and reused.json()["code"] == "idempotency_key_reused"
    with http.stream("POST", f"/v1/conversations/{conversation['id']}/message?stream=true",
                     json={"content": "Open now, wait, or hire remotely?"}, headers={**auth(key), **headers}) as r:
        replay = sse_events(r.read().decode())
    assert [name for _, name, _ in replay] == ["synthesis", "done"]
    assert replay[-1][2]["synthesis"] == first.json()["synthesis"] and len(llm.requests) == calls


def test_an_idempotency_key_is_the_callers_own(http, key, make_key, table, llm):
    # Two users of one workspace who happen to send the same Idempotency-Key ask two questions: neither gets the
    # other's answer, nor a 409 for the other's use of the key.
    _, conversation = table
    bob = make_key(["conversations"], user="bob")
    headers = {"Idempotency-Key": "shared-1"}
    first = ask(http, key, conversation["id"], headers=headers)
    calls = len(llm.requests)
    second = ask(http, bob, conversation["id"], "A different question?", headers=headers)
    assert first.status_code == 200 and second.status_code == 200, second.text
    assert len(llm.requests) > calls  # Bob's question was debated, not answered from Alice's run


def test_retry_while_the_first_run_is_going_waits_for_it(http, key, table, llm, parley):
    _, conversation = table
    llm.script(match="This is round 0", hold="round 0")  # the first run stays under way until released
    results: dict[str, httpx.Response] = {}

    def first() -> None:
        with httpx.Client(base_url=parley.url, timeout=60) as client:
            results["first"] = ask(client, key, conversation["id"], headers={"Idempotency-Key": "k"})

    thread = threading.Thread(target=first)
    thread.start()
    llm.wait_held("round 0")  # the first run is under way
    url = f"/v1/conversations/{conversation['id']}/message?stream=true"
    with http.stream("POST", url, json={"content": "Open now, wait, or hire remotely?"},
                     headers={**auth(key), "Idempotency-Key": "k"}) as retry:
        stream = iter_sse(retry.iter_lines())
        events = [next(stream)]  # the retry is following the live run
        llm.release("round 0")
        events += list(stream)
    thread.join()
    names = [e.event for e in events]
    # The live run's own events (not a replay of its result): every round, then its one result.
    assert names[0] == "round_start" and names.count("round_start") == 2 and names[-1] == "done"
    assert results["first"].status_code == 200
    done = events[-1].json()
    assert {k: v for k, v in done.items() if k != "conversationId"} == results["first"].json()
    turns = [r for r in llm.requests if r.get("stream")]
    assert len(turns) == 6  # one debate: three seats, rounds 0 and 1
