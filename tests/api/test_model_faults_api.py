"""Model endpoints that misbehave, seen from the API: chat completions and duels end with a clear error
(runs stored failed, never left running), upstream error text reaches nobody verbatim, and `/metrics`
does not grow with the model ids requests make up."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import httpx
import pytest

from parley.api.main import create_app
from tests.support.duel import script_duel
from tests.support.servers import ServerThread
from tests.support.sse import parse_sse

MODEL = "openai:gpt-4o-mini"  # the default model with the scripted endpoint configured
QUESTION = [{"role": "user", "content": "Explain the CAP theorem"}]
DUEL = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 1}
KEY = "sk-proj-Zq8TESTKEYabcdef0123456789"


@pytest.fixture
def server(parley_env, sync_db) -> Iterator[ServerThread]:
    """Parley with a 1 s deadline on each model call."""
    parley_env.parley_model_call_deadline = 1.0
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    with ServerThread(create_app(parley_env)) as running:
        yield running


@pytest.fixture
def api(server, make_key) -> Iterator[httpx.Client]:
    key = make_key(["chat", "debate"])
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        yield http


def chat(api: httpx.Client, model: str = MODEL) -> httpx.Response:
    return api.post("/v1/chat/completions", json={"model": model, "messages": QUESTION})


def only_run(sync_db, kind: str) -> dict:
    runs = list(sync_db.runs.find({"kind": kind}))
    assert len(runs) == 1
    return runs[0]


# --- endpoints that never finish ------------------------------------------------------------


@pytest.mark.parametrize("endless", ["empty", "drip"])
def test_a_chat_completion_against_an_endless_stream_fails_at_the_call_deadline(api, llm, sync_db, endless):
    llm.script(model="gpt-4o-mini", endless=endless, token_delay=0.05)
    resp = chat(api)
    assert resp.status_code == 502
    error = resp.json()["error"]
    assert error["code"] == "all_models_failed"
    assert "did not finish its answer within the 1 s deadline" in error["message"]
    assert "PARLEY_MODEL_CALL_DEADLINE" in error["message"]
    run = only_run(sync_db, "panel")
    assert run["status"] == "failed" and "PARLEY_MODEL_CALL_DEADLINE" in run["error"]["message"]


def test_a_duel_against_an_endless_stream_fails_at_the_call_deadline(api, llm, sync_db):
    script_duel(llm, opponent_turn={"endless": "empty"})
    resp = api.post("/api/debate", json=DUEL)
    events = parse_sse(resp.text)
    assert events[-1].event == "error"
    message = events[-1].json()["message"]
    assert message.startswith("Debate generation failed: the model failed (")
    assert "within the 1 s deadline of one model call (PARLEY_MODEL_CALL_DEADLINE)" in message
    debate_id = events[0].json()["id"]
    assert sync_db.debates.find_one({"_id": debate_id})["status"] == "failed"
    run = sync_db.runs.find_one({"_id": debate_id})
    assert run["status"] == "failed" and run["error"]["message"] == message


def test_a_streamed_chat_completion_against_an_endless_stream_ends_with_an_error_chunk(api, llm, sync_db):
    llm.script(model="gpt-4o-mini", endless="empty")
    body = {"model": MODEL, "messages": QUESTION, "stream": True}
    resp = api.post("/v1/chat/completions", json=body)
    data = [line.removeprefix("data: ") for line in resp.text.splitlines() if line.startswith("data: ")]
    error = json.loads(data[-1])["error"]
    assert error["code"] == "all_models_failed" and "PARLEY_MODEL_CALL_DEADLINE" in error["message"]
    assert only_run(sync_db, "panel")["status"] == "failed"


def test_a_duel_against_a_stream_of_comments_says_so_after_the_request_timeout(parley_env, make_key, llm, sync_db):
    parley_env.parley_request_timeout = 0.5  # the scripted answers that do come take milliseconds
    script_duel(llm, opponent_turn={"endless": "comments"})
    with ServerThread(create_app(parley_env)) as running:
        resp = httpx.post(running.url + "/api/debate", json=DUEL, timeout=60,
                          headers={"Authorization": f"Bearer {make_key(['debate'])}"})
    events = parse_sse(resp.text)
    message = events[-1].json()["message"]
    assert events[-1].event == "error" and "internal error" not in message  # it used to be, after 120 s
    assert "sent no data for 0.5 s" in message and "PARLEY_REQUEST_TIMEOUT" in message
    assert sync_db.runs.find_one({"_id": events[0].json()["id"]})["status"] == "failed"


# --- streams cut off mid-answer -------------------------------------------------------------


def test_a_chat_stream_cut_off_without_finish_reason_is_a_failure_not_half_an_answer(api, llm, sync_db):
    llm.script(model="gpt-4o-mini", reply="Half of an answer that goes on", end_after=1)
    resp = api.post("/v1/chat/completions", json={"model": MODEL, "messages": QUESTION, "stream": True})
    data = [line.removeprefix("data: ") for line in resp.text.splitlines() if line.startswith("data: ")]
    error = json.loads(data[-1])["error"]  # it used to be a 200 answering "Half "
    assert error["code"] == "answer_interrupted" and "without a finish_reason or [DONE]" in error["message"]
    assert only_run(sync_db, "panel")["status"] == "failed"


def test_a_chat_answer_whose_json_body_breaks_off_is_a_failure_asked_once_more(api, llm, sync_db):
    # Not streamed, the answer is asked for whole: its body ends (or the connection breaks) halfway.
    llm.script(model="gpt-4o-mini", reply="Half of an answer that goes on", end_after=1)
    resp = chat(api)
    assert resp.status_code == 502, resp.text
    error = resp.json()["error"]
    assert error["code"] == "all_models_failed" and "server" in error["message"]
    assert "was not a complete JSON body" in error["message"]
    assert only_run(sync_db, "panel")["status"] == "failed"
    assert len([r for r in llm.requests if r["model"] == "gpt-4o-mini"]) == 2  # a cut-off answer is worth a retry
    assert not any(r.get("stream") for r in llm.requests)


def test_a_duel_turn_cut_off_mid_answer_fails_the_duel(api, llm, sync_db):
    script_duel(llm, opponent_turn={"end_after": 2})
    events = parse_sse(api.post("/api/debate", json=DUEL).text)
    kinds = [e.event for e in events]
    assert kinds[-1] == "error" and "done" not in kinds  # it used to complete with 10-character turns
    assert "without a finish_reason or [DONE]" in events[-1].json()["message"]
    assert sync_db.runs.find_one({"_id": events[0].json()["id"]})["status"] == "failed"


def test_a_duel_turn_cut_off_before_any_of_it_was_sent_is_tried_again(api, llm, sync_db):
    llm.script(match="You are Ada,", end_after=0, times=1)  # the first attempt of the first turn only
    script_duel(llm)
    events = parse_sse(api.post("/api/debate", json=DUEL).text)
    assert events[-1].event == "done"
    turns = [r for r in llm.requests if "You are Ada," in json.dumps(r["messages"])]
    assert len(turns) == 2  # one turn (rounds: 1), two attempts
    assert sync_db.runs.find_one({"_id": events[0].json()["id"]})["status"] == "completed"


# --- upstream error text ----------------------------------------------------------------------


def test_upstream_error_text_is_capped_and_redacted_for_the_client_the_run_and_the_log(
        parley_env, monkeypatch, make_key, llm, sync_db, caplog):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    parley_env.openai_api_key = KEY
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(model="gpt-4o-mini", status=500, reply=f"invalid key {KEY} ({'x' * 2_000_000})")
    caplog.set_level(logging.INFO)
    with ServerThread(create_app(parley_env)) as running, httpx.Client(
            base_url=running.url, headers={"Authorization": f"Bearer {make_key(['chat'])}"}, timeout=60) as api:
        resp = chat(api)
    assert resp.status_code == 502
    assert len(resp.content) < 4_000 and KEY not in resp.text  # it was 6 MB, key included
    assert "HTTP 500: invalid key [redacted] (xxx" in resp.json()["error"]["message"]
    stored = json.dumps(only_run(sync_db, "panel")["error"])
    assert len(stored) < 4_000 and KEY not in stored and "invalid key [redacted]" in stored
    assert KEY not in caplog.text and "x" * 1_000 not in caplog.text


# --- /metrics ---------------------------------------------------------------------------------


def test_a_made_up_model_id_is_labelled_other_and_metrics_do_not_grow(http, make_key, llm):
    headers = {"Authorization": f"Bearer {make_key(['chat'])}"}

    def ask(model: str) -> None:
        resp = http.post("/v1/chat/completions", json={"model": model, "messages": QUESTION}, headers=headers)
        assert resp.status_code == 200, resp.text  # an unknown model id is the endpoint's to refuse, not Parley's

    ask("openai:some-model-nobody-configured")  # the `other` series exists from here on
    before = http.get("/metrics").text
    ask("openai:" + "m" * 190)  # as long as an id may be (core.limits.MAX_MODEL_ID_CHARS)
    after = http.get("/metrics").text
    assert "m" * 100 not in after
    assert 'parley_model_calls_total{model="other",outcome="ok"}' in after
    assert len(after) - len(before) < 200  # the same series, only their values moved
