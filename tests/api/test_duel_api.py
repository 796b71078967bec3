"""The duel over HTTP: the duel contract's SSE events (docs/api.md), errors, storage, replay and start-up recovery."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from parley.api.main import create_app
from parley.store.runs import page_events
from tests.support.duel import (
    CHINESE_OPPONENT,
    CHINESE_OPPONENT_REPLY,
    CHINESE_USER_REPLY,
    OPPONENT,
    OPPONENT_REPLY,
    USER_REPLY,
    judgement,
    script_duel,
)
from tests.support.servers import ServerThread
from tests.support.sse import SseEvent, SseParser, iter_sse, parse_sse

TOPIC = "Should remote work be the default?"
PROFILE = {"name": "Ada", "avatar": "https://example.com/ada.png", "bio": "Engineer",
           "softMemory": {"traits": ["rational"], "interests": ["tools"]}}
BODY = {"topic": TOPIC, "userProfile": PROFILE, "rounds": 2}
SYNTHESIS_KEYS = {"consensus", "disagreements", "winner", "winnerReason", "conclusion", "recommendations"}


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def post_debate(http: httpx.Client, key: str, body: dict | None = None) -> tuple[httpx.Response, list[SseEvent]]:
    resp = http.post("/api/debate", json=body or BODY, headers=auth(key))
    return resp, parse_sse(resp.text) if resp.status_code == 200 else []


def turns_from_chunks(events: list[SseEvent]) -> list[str]:
    turns, current = [], []
    for event in events:
        if event.event == "start":
            current = []
        elif event.event == "chunk":
            current.append(event.json()["content"])
        elif event.event == "message":
            turns.append("".join(current))
    return turns


def app_of(parley: ServerThread):
    return parley.server.config.app


# --- the stream ------------------------------------------------------------------------------


def test_a_debate_streams_the_seed_events_with_every_field(http, make_key, llm, sync_db):
    script_duel(llm)
    before = int(time.time() * 1000)
    resp, events = post_debate(http, make_key(["debate"]))
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["cache-control"] == "no-cache" and resp.headers["connection"] == "keep-alive"

    kinds = [e.event for e in events if e.event != "chunk"]
    turn = ["start", "message"]
    assert kinds == ["init", *turn * 4, "synthesizing", "synthesis", "done"]
    assert [int(e.id) for e in events] == list(range(len(events)))  # SSE ids are the sequence numbers

    init = events[0].json()
    assert set(init) == {"id", "topic", "userProfile", "opponentProfile"}
    assert re.fullmatch(r"debate_\d{13}_[0-9a-z]+", init["id"]) and resp.headers["x-debate-id"] == init["id"]
    assert init["topic"] == TOPIC and init["userProfile"] == PROFILE and init["opponentProfile"] == OPPONENT

    starts = [e.json() for e in events if e.event == "start"]
    assert starts == [{"role": "user", "name": "Ada"}, {"role": "opponent", "name": "Margaret Hale"}] * 2
    chunks = [e.json() for e in events if e.event == "chunk"]
    assert all(set(c) == {"role", "content"} and c["content"] for c in chunks)
    messages = [e.json() for e in events if e.event == "message"]
    for message, role, name, content in zip(messages, ["user", "opponent"] * 2, ["Ada", "Margaret Hale"] * 2,
                                             [USER_REPLY, OPPONENT_REPLY] * 2):
        assert set(message) == {"role", "name", "content", "timestamp"}
        assert (message["role"], message["name"], message["content"]) == (role, name, content)
        assert isinstance(message["timestamp"], int) and before <= message["timestamp"] <= int(time.time() * 1000)
    assert turns_from_chunks(events) == [m["content"] for m in messages]  # chunks concatenate to each message
    roles_in_turns = [[c["role"] for c in chunks_of] for chunks_of in _chunks_per_turn(events)]
    assert [set(r) for r in roles_in_turns] == [{"user"}, {"opponent"}] * 2

    assert next(e for e in events if e.event == "synthesizing").json() == {}
    synthesis = next(e for e in events if e.event == "synthesis").json()
    assert set(synthesis) == SYNTHESIS_KEYS
    assert synthesis["winner"] in {"user", "opponent", "tie"} and synthesis["winner"] == "user"
    assert len(synthesis["conclusion"]) <= 100
    assert all(isinstance(synthesis[k], list) for k in ("consensus", "disagreements", "recommendations"))
    done = events[-1].json()
    assert done == {"id": init["id"], "topic": TOPIC, "messages": messages, "synthesis": synthesis}

    record = sync_db.debates.find_one({"_id": init["id"]})
    assert record["status"] == "completed" and record["messages"] == messages and record["synthesis"] == synthesis
    assert [v["order"] for v in record["verdicts"]] == ["as_debated", "swapped"]
    stored = page_events(sync_db.run_events.find({"runId": init["id"]}).sort("seq", 1))  # a debate's events are its run's
    assert [(s["seq"], s["event"], s["data"]) for s in stored] == [(int(e.id), e.event, e.json()) for e in events]
    usage = list(sync_db.usage.find({"requestId": init["id"]}))
    assert usage and usage[0]["mode"] == "duel" and usage[0]["user"] == "alice"


def _chunks_per_turn(events: list[SseEvent]) -> list[list[dict]]:
    turns, current = [], []
    for event in events:
        if event.event == "chunk":
            current.append(event.json())
        elif event.event == "message":
            turns.append(current)
            current = []
    return turns


def test_a_chinese_topic_streams_chinese_turns(http, make_key, llm):
    script_duel(llm, user_name="张三", opponent=CHINESE_OPPONENT, user_reply=CHINESE_USER_REPLY,
                opponent_reply=CHINESE_OPPONENT_REPLY,
                as_debated=judgement("A", conclusion="远程工作的成功取决于组织文化、工具支持和管理方式的配合"))
    profile = {"name": "张三", "bio": "科技从业者，关注未来工作方式",
               "softMemory": {"traits": ["理性", "开放"], "interests": ["远程协作"]}}
    resp, events = post_debate(http, make_key(["debate"]), {"topic": "远程工作是否应该成为主流？", "userProfile": profile,
                                                           "rounds": 1})
    assert '"name":"张三"' in resp.text  # UTF-8 on the wire, not \\u escapes
    init = events[0].json()
    assert init["userProfile"] == profile and init["opponentProfile"]["name"] == "李明"
    messages = [e.json() for e in events if e.event == "message"]
    assert [m["content"] for m in messages] == [CHINESE_USER_REPLY, CHINESE_OPPONENT_REPLY]
    assert all(100 <= len(m["content"]) <= 200 for m in messages)
    assert turns_from_chunks(events) == [m["content"] for m in messages]
    assert events[-2].json()["conclusion"] == "远程工作的成功取决于组织文化、工具支持和管理方式的配合"


def test_storage_moves_from_in_progress_to_completed(http, make_key, llm, sync_db, parley):
    # Each side's answer is held until the test has read the record, so every read sees exactly one
    # step of the debate, however fast or slow the machine is.
    script_duel(llm, user_turn={"hold": "user"}, opponent_turn={"hold": "opponent"})
    app_of(parley).state.sse_keepalive = 0.2
    seen: dict[str, dict] = {}
    parser = SseParser()
    pings_at_message = None
    key = make_key(["debate"])

    def read(debate_id: str) -> dict:  # what a client reads back the moment it is shown an event
        found = http.get(f"/api/debate/{debate_id}", headers=auth(key))
        assert found.status_code == 200, found.text
        return found.json()

    with http.stream("POST", "/api/debate", json={**BODY, "rounds": 1}, headers=auth(key)) as resp:
        for line in resp.iter_lines():
            event = parser.feed_line(line)
            if event is not None and event.event == "init":
                seen["init"] = read(event.json()["id"])
                llm.release("user")
            elif event is not None and event.event == "message" and "message" not in seen:
                seen["message"] = read(seen["init"]["id"])
                pings_at_message = len(parser.comments)
            elif pings_at_message is not None and len(parser.comments) > pings_at_message:
                # A keep-alive came while the opponent was thinking (held): now let it answer.
                pings_at_message = None
                llm.release("opponent")
    record = sync_db.debates.find_one({"_id": seen["init"]["id"]})
    assert seen["init"]["status"] == "in_progress" and seen["init"]["messages"] == []
    assert seen["init"]["opponentProfile"] == OPPONENT and seen["init"]["synthesis"] is None
    assert seen["message"]["status"] == "in_progress" and len(seen["message"]["messages"]) == 1
    assert record["status"] == "completed" and len(record["messages"]) == 2 and len(record["verdicts"]) == 2
    assert record["opponentProfile"] == OPPONENT  # the record holds it all once the debate has ended
    assert record["user"] == "alice" and record["workspace"] == "ws1" and record["rounds"] == 1
    assert any(c.startswith("ping") for c in parser.comments)  # keep-alive while the opponent thinks


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("method,path", [("POST", "/api/debate"), ("GET", "/api/debates"),
                                         ("GET", "/api/debate/debate_1_x"), ("GET", "/api/debate/debate_1_x/events")])
def test_without_a_debate_key_the_answer_is_exactly_unauthorized(http, make_key, method, path):
    chat_only = make_key(["chat"])
    for headers in ({}, auth("pk_not_a_key"), auth(chat_only), {"x-api-key": chat_only}):
        resp = http.request(method, path, json=BODY if method == "POST" else None, headers=headers)
        assert resp.status_code == 401, (headers, resp.text)
        assert resp.json() == {"error": "Unauthorized"}


@pytest.mark.parametrize("body,error", [
    ({"userProfile": PROFILE}, "Missing topic or userProfile"),
    ({"topic": TOPIC}, "Missing topic or userProfile"),
    ({"topic": "", "userProfile": PROFILE}, "Missing topic or userProfile"),
    ({"topic": "   ", "userProfile": PROFILE}, "Missing topic or userProfile"),
    ({"topic": 42, "userProfile": PROFILE}, "topic must be a string"),
    ({"topic": TOPIC, "userProfile": "Ada"}, "userProfile must be an object"),
    ({"topic": TOPIC, "userProfile": {"bio": "x"}}, "userProfile.name: Field required"),
    ({"topic": TOPIC, "userProfile": {"name": 7}}, "userProfile.name: Input should be a valid string"),
    ({"topic": TOPIC, "userProfile": {"name": "Ada", "softMemory": {"traits": "calm"}}},
     "userProfile.softMemory.traits: Input should be a valid list"),
    ({"topic": TOPIC, "userProfile": {"name": "Ada", "softMemory": {"traits": [1]}}},
     "userProfile.softMemory.traits.0: Input should be a valid string"),
    ({"topic": TOPIC, "userProfile": PROFILE, "rounds": 11}, "rounds must be an integer from 1 to 10"),
    ({"topic": TOPIC, "userProfile": PROFILE, "rounds": "3"}, "rounds must be an integer from 1 to 10"),
    (["not", "an", "object"], "Request body must be a JSON object"),
])
def test_bad_bodies_get_400_naming_the_problem(http, make_key, sync_db, body, error):
    resp = http.post("/api/debate", json=body, headers=auth(make_key(["debate"])))
    assert resp.status_code == 400
    # The contract's own refusals keep its exact body; Parley's other messages add a machine code.
    seed_exact = error == "Missing topic or userProfile"
    assert resp.json() == ({"error": error} if seed_exact else {"error": error, "code": "invalid_request"})
    assert sync_db.debates.count_documents({}) == 0


def test_a_body_that_is_not_json_gets_400(http, make_key):
    resp = http.post("/api/debate", content=b"{topic: nope", headers=auth(make_key(["debate"])))
    assert resp.status_code == 400 and resp.json()["code"] == "invalid_json"


def test_a_body_over_24_kb_gets_413_before_it_is_parsed(http, make_key, sync_db):
    key = make_key(["debate"])
    big = {"topic": TOPIC, "userProfile": {**PROFILE, "bio": "x" * 25_000}}
    resp = http.post("/api/debate", json=big, headers=auth(key))
    assert resp.status_code == 413 and resp.json() == {"error": "Request body exceeds 24 KB", "code": "body_too_large"}
    # Not JSON at all, yet 413 rather than 400: the size is checked first.
    resp = http.post("/api/debate", content=b"x" * (24 * 1024 + 1), headers=auth(key))
    assert resp.status_code == 413
    # Without a Content-Length (chunked upload) the limit still holds.
    resp = http.post("/api/debate", content=iter([b"x" * 20_000, b"x" * 20_000]), headers=auth(key))
    assert resp.status_code == 413
    assert sync_db.debates.count_documents({}) == 0


def test_the_ninth_request_in_a_minute_gets_429(http, make_key):
    key = make_key(["debate"])
    for _ in range(8):
        assert http.post("/api/debate", json={"topic": TOPIC}, headers=auth(key)).status_code == 400
    resp = http.post("/api/debate", json=BODY, headers=auth(key))
    assert resp.status_code == 429
    body = resp.json()
    assert set(body) == {"error", "retryAfter"} and body["error"] == "Rate limit exceeded"
    assert isinstance(body["retryAfter"], int) and 1 <= body["retryAfter"] <= 60
    assert resp.headers["retry-after"] == str(body["retryAfter"])
    # The limit is per user: another user from the same address is still served.
    assert http.post("/api/debate", json={"topic": TOPIC}, headers=auth(make_key(["debate"], user="bob"))
                     ).status_code == 400


def test_an_unexpected_failure_before_the_stream_gets_500(parley_env, make_key, sync_db):
    parley_env.openai_model = "local:smollm2"  # needs the embedded model, which is not running
    key = make_key(["debate"])
    with ServerThread(create_app(parley_env)) as server:
        resp = httpx.post(server.url + "/api/debate", json=BODY, headers=auth(key), timeout=30)
    assert resp.status_code == 500 and resp.json() == {"error": "Failed to start debate"}
    assert sync_db.debates.count_documents({}) == 0


def test_a_model_failure_mid_debate_sends_error_and_marks_it_failed(http, make_key, llm, sync_db):
    script_duel(llm, opponent_turn={"status": 500})
    resp, events = post_debate(http, make_key(["debate"]))
    kinds = [e.event for e in events if e.event != "chunk"]
    assert kinds[:3] == ["init", "start", "message"] and kinds[-1] == "error"
    assert "done" not in kinds and "synthesis" not in kinds
    # The endpoint's error text is the scripted opponent reply.
    assert events[-1].json() == {"message": f"Debate generation failed: the model failed (HTTP 500: {OPPONENT_REPLY})"}
    assert [int(e.id) for e in events] == list(range(len(events)))
    record = sync_db.debates.find_one({"_id": events[0].json()["id"]})
    assert record["status"] == "failed" and record["error"] == events[-1].json()["message"]
    assert len(record["messages"]) == 1 and record["synthesis"] is None
    assert len(page_events(sync_db.run_events.find({"runId": record["_id"]}).sort("seq", 1))) == len(events)


def test_a_stream_cut_mid_turn_ends_with_error(http, make_key, llm, sync_db):
    script_duel(llm, opponent_turn={"drop_after": 4})
    _, events = post_debate(http, make_key(["debate"]))
    kinds = [e.event for e in events]
    assert kinds[-1] == "error" and kinds[-2] == "chunk"  # part of the turn went out, never a message
    assert sync_db.debates.find_one({"_id": events[0].json()["id"]})["status"] == "failed"


# --- reading, replaying, following ------------------------------------------------------------


def test_a_disconnected_client_reattaches_with_last_event_id(http, make_key, llm, sync_db, parley):
    script_duel(llm, opponent_turn={"hold": "opponent"})  # the debate cannot end while the client is away
    key = make_key(["debate"])
    received: list[SseEvent] = []
    with http.stream("POST", "/api/debate", json=BODY, headers=auth(key)) as resp:
        for event in iter_sse(resp.iter_lines()):
            received.append(event)
            if event.event == "message":
                break  # the browser tab closes mid-debate
    debate_id = received[0].json()["id"]
    assert sync_db.debates.find_one({"_id": debate_id})["status"] == "in_progress"
    llm.release("opponent")

    last = received[-1].id
    rest = parse_sse(http.get(f"/api/debate/{debate_id}/events", headers={**auth(key), "Last-Event-ID": last}).text)
    assert int(rest[0].id) == int(last) + 1 and rest[-1].event == "done"
    everything = received + rest
    assert [int(e.id) for e in everything] == list(range(len(everything)))
    messages = [e.json() for e in everything if e.event == "message"]
    assert len(messages) == 4 and turns_from_chunks(everything) == [m["content"] for m in messages]
    assert rest[-1].json()["messages"] == messages

    record = http.get(f"/api/debate/{debate_id}", headers=auth(key)).json()
    assert record["status"] == "completed" and record["messages"] == messages

    # Replay from storage once it is over: by query parameter (EventSource cannot set headers) ...
    again = parse_sse(http.get(f"/api/debate/{debate_id}/events?lastEventId={last}", headers=auth(key)).text)
    assert [(e.id, e.event, e.data) for e in again] == [(e.id, e.event, e.data) for e in rest]
    # ... and with the stream token instead of a key, as a browser's EventSource would.
    token_url = record["eventsUrl"]
    assert token_url.startswith(f"/api/debate/{debate_id}/events?token=")
    full = parse_sse(http.get(token_url).text)
    assert [(e.id, e.event) for e in full] == [(e.id, e.event) for e in everything]
    assert http.get(f"/api/debate/{debate_id}/events?token=wrong").json() == {"error": "Unauthorized"}
    assert http.get(f"/api/debate/{debate_id}/events", headers={**auth(key), "Last-Event-ID": "x"}
                    ).status_code == 400


def test_a_listener_follows_a_debate_another_process_runs(http, make_key, llm, parley_env, parley):
    script_duel(llm, opponent_turn={"hold": "opponent"})  # still running when the other process attaches
    key = make_key(["debate"])
    with ServerThread(create_app(parley_env)) as sibling:  # a second Parley on the same database
        with httpx.Client(base_url=sibling.url, timeout=60) as other:
            with http.stream("POST", "/api/debate", json=BODY, headers=auth(key)) as resp:
                stream = iter_sse(resp.iter_lines())
                first = next(stream)
                debate_id = first.json()["id"]
                with other.stream("GET", f"/api/debate/{debate_id}/events", headers=auth(key)) as followed_resp:
                    following = iter_sse(followed_resp.iter_lines())
                    followed = [next(following)]  # attached: the replay has begun
                    llm.release("opponent")
                    followed += list(following)
                direct = [first, *stream]
    assert [(e.id, e.event, e.data) for e in followed] == [(e.id, e.event, e.data) for e in direct]
    assert followed[-1].event == "done"


def test_debates_are_visible_to_their_owner_only(http, make_key, llm):
    script_duel(llm)
    alice, bob = make_key(["debate"]), make_key(["debate"], user="bob")
    _, events = post_debate(http, alice, {**BODY, "rounds": 1})
    debate_id = events[0].json()["id"]
    record = http.get(f"/api/debate/{debate_id}", headers=auth(alice)).json()
    assert record["id"] == debate_id and record["status"] == "completed" and record["topic"] == TOPIC
    assert set(record["synthesis"]) == SYNTHESIS_KEYS and len(record["verdicts"]) == 2
    for path in (f"/api/debate/{debate_id}", f"/api/debate/{debate_id}/events", "/api/debate/debate_0_none"):
        resp = http.get(path, headers=auth(bob))
        assert resp.status_code == 404 and resp.json() == {"error": "Debate not found", "code": "not_found"}
    assert http.get("/api/debates", headers=auth(bob)).json()["debates"] == []
    readonly = make_key(["readonly"])
    assert http.post("/api/debate", json=BODY, headers=auth(readonly)).status_code == 403  # may not start one


def test_the_list_is_newest_first_and_paginated(http, make_key, sync_db):
    key = make_key(["debate"])
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(5):
        sync_db.debates.insert_one(_record(f"debate_{i}", "alice", start + timedelta(minutes=i)))
    sync_db.debates.insert_one(_record("debate_bob", "bob", start + timedelta(hours=1)))
    first = http.get("/api/debates?limit=2", headers=auth(key)).json()
    assert [d["id"] for d in first["debates"]] == ["debate_4", "debate_3"] and first["total"] == 5
    second = http.get(f"/api/debates?limit=2&cursor={first['nextCursor']}", headers=auth(key)).json()
    assert [d["id"] for d in second["debates"]] == ["debate_2", "debate_1"]
    third = http.get(f"/api/debates?limit=2&cursor={second['nextCursor']}", headers=auth(key)).json()
    assert [d["id"] for d in third["debates"]] == ["debate_0"] and third["nextCursor"] is None
    page = http.get("/api/debates?limit=2&page=2", headers=auth(key)).json()
    assert [d["id"] for d in page["debates"]] == ["debate_2", "debate_1"] and page["page"] == 2
    summary = first["debates"][0]
    assert set(summary) >= {"id", "topic", "status", "createdAt", "opponentProfile", "winner", "messageCount"}
    assert "streamToken" not in summary and "messages" not in summary
    assert http.get("/api/debates?cursor=garbage", headers=auth(key)).status_code == 400
    assert http.get("/api/debates?limit=0", headers=auth(key)).status_code == 400


def _record(debate_id: str, user: str, created: datetime, **fields) -> dict:
    return {"_id": debate_id, "user": user, "workspace": "ws1", "topic": TOPIC, "userProfile": PROFILE,
            "opponentProfile": OPPONENT, "rounds": 5, "model": "openai:gpt-4o-mini", "messages": [],
            "synthesis": {"winner": "user"}, "verdicts": [], "status": "completed", "error": None,
            "streamToken": "t", "createdAt": created, "updatedAt": created, **fields}


def test_start_up_fails_debates_an_earlier_version_left_running(parley_env, sync_db, make_key):
    now = datetime.now(UTC)
    sync_db.debates.insert_many([_record("debate_legacy", "alice", now, status="in_progress"),
                                 _record("debate_done", "alice", now)])
    sync_db.runs.insert_one({"_id": "debate_live", "kind": "duel", "status": "running", "workspace": "ws1",
                             "user": "alice", "leaseUntil": now + timedelta(hours=1)})
    sync_db.debates.insert_one(_record("debate_live", "alice", now, status="in_progress"))
    with ServerThread(create_app(parley_env)):
        statuses = {d["_id"]: d["status"] for d in sync_db.debates.find()}
    assert statuses == {"debate_legacy": "failed", "debate_done": "completed", "debate_live": "in_progress"}
    assert sync_db.debates.find_one({"_id": "debate_legacy"})["error"].startswith("Debate interrupted")


def test_rounds_written_as_a_whole_float_is_that_integer(http, make_key, llm):
    script_duel(llm)
    resp, events = post_debate(http, make_key(["debate"]), {**BODY, "rounds": 1.0})
    assert resp.status_code == 200 and sum(e.event == "message" for e in events) == 2
    resp, _ = post_debate(http, make_key(["debate"]), {**BODY, "rounds": 1.5})
    assert resp.status_code == 400 and resp.json() == {"error": "rounds must be an integer from 1 to 10", "code": "invalid_request"}


def test_a_profile_mongodb_cannot_store_is_a_400(http, make_key, llm):
    body = {**BODY, "userProfile": {**PROFILE, "x\u0000y": 1}}
    resp, _ = post_debate(http, make_key(["debate"]), body)
    assert resp.status_code == 400 and "NUL" in resp.json()["error"]
    assert not llm.requests


@pytest.mark.parametrize("last", ["1_0", "x", "\u0661"])  # Python's int() takes the first and last; an event id does not
def test_a_last_event_id_that_is_not_a_plain_integer_is_a_400(http, make_key, llm, last):
    script_duel(llm)
    key = make_key(["debate"])
    _, events = post_debate(http, key)
    resp = http.get(f"/api/debate/{events[0].json()['id']}/events", params={"lastEventId": last}, headers=auth(key))
    assert resp.status_code == 400 and resp.json() == {"error": "Last-Event-ID must be an integer event id", "code": "invalid_request"}
