"""The second hardening pass (issue 33): what a tenant sends is checked off the event loop and within bounds, before
any model call, and no request stalls a worker.

Each case was found on an earlier main: a pattern with catastrophic backtracking froze every worker in turn, a 0.9 MB
`tools` body stalled every request 15-17 s, a 24,000-node workflow 8 s, a 10,000-property format 5 s, a schema
referring to itself failed after a billed model call, and `/mcp` answered a page of any origin.
"""

from __future__ import annotations

import json
import os
import time

import httpx
import pytest

from tests.cli.test_serve import Serve
from tests.support.wait import Watch

CATASTROPHIC = "^(a+)+$"
NEAR_MATCH = "a" * 40 + "b"  # 28 characters held Python's `re` 21 s; each more doubles it


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def funded(sync_db) -> None:
    """The test workspace can pay for its requests."""
    sync_db.workspaces.update_one({"_id": "ws1"}, {"$set": {"creditUsd": 100.0}}, upsert=True)


def pattern_format(pattern: str) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "word", "strict": True, "schema": {
        "type": "object", "properties": {"word": {"type": "string", "pattern": pattern}}, "required": ["word"],
        "additionalProperties": False}}}


def chat(http: httpx.Client, key: str, **body) -> httpx.Response:
    payload = {"model": "openai:gpt-4o-mini", "messages": [{"role": "user", "content": "A word?"}], **body}
    return http.post("/v1/chat/completions", json=payload, headers=auth(key), timeout=60)


# --- patterns -------------------------------------------------------------------------------


def test_a_catastrophic_pattern_is_checked_in_linear_time(parley, http, make_key, llm, funded):
    """The answer that nearly matches `^(a+)+$` is checked at once (no backtracking): the request ends with the
    format's own verdict (one repair, then 502 `invalid_structured_answer`) while `/healthz` keeps answering."""
    key = make_key(["chat"])
    llm.script(json={"word": NEAR_MATCH})
    with Watch(parley.url + "/healthz") as watch:
        started = time.monotonic()
        resp = chat(http, key, response_format=pattern_format(CATASTROPHIC))
        took = time.monotonic() - started
    assert resp.status_code == 502 and resp.json()["error"]["code"] == "invalid_structured_answer", resp.text
    assert f"does not match \"{CATASTROPHIC}\"" in resp.json()["error"]["message"]
    # In this process the test, the server and the scripted model share one interpreter: a second is not a bound
    # on the server alone. The stall this guards against was 21 s, doubling with each character of the answer.
    assert took < 20 and watch.longest < 5.0 and not watch.failures, (took, watch.longest, watch.failures)


def test_a_pattern_that_needs_backtracking_is_refused_naming_it(http, make_key, llm):
    key = make_key(["chat"])
    resp = chat(http, key, response_format=pattern_format(r"(\w)\1"))
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_response_format"
    message = resp.json()["error"]["message"]
    assert "['word']['pattern']" in message and 'is not a "regex"' in message and llm.requests == []


def test_an_answer_rules_regex_runs_without_backtracking(http, make_key, llm, parley_env, funded):
    """A router's `vote` rule reads answers with a user's `regex:`; RE2 reads a near-match at once."""
    key, admin = make_key(["chat"]), make_key(["admin"])
    router = {"id": "voters", "models": ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"],
              "debate": True, "rule": "vote", "answerRule": "regex:(a+)+b"}
    assert http.post("/v1/routers", json=router, headers=auth(admin)).status_code == 201
    llm.script(reply="Answer: " + "a" * 5000 + "c")
    started = time.monotonic()
    resp = chat(http, key, model="router/voters")
    assert resp.status_code in (200, 502) and time.monotonic() - started < 20, resp.text
    bad = {**router, "id": "backref", "answerRule": r"regex:(a)\1"}
    refused = http.post("/v1/routers", json=bad, headers=auth(admin))
    assert refused.status_code == 400 and "not a valid regular expression" in refused.text, refused.text


# --- schemas --------------------------------------------------------------------------------


@pytest.mark.parametrize(("response_format", "words"), [
    (pattern_format("x") | {"json_schema": {"name": "loop", "schema": {"allOf": [{"$ref": "#"}]}}},
     "refers to itself without reaching into the answer"),
    ({"type": "json_schema", "json_schema": {"name": "wide", "schema": {
        "type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10_000)}}}},
     "more than 5000 properties"),
    ({"type": "json_schema", "json_schema": {"name": "remote", "schema": {"$ref": "http://127.0.0.1:9/s.json"}}},
     "points outside the schema"),
    ({"type": "json_schema", "json_schema": {"name": "fetched", "schema": {"$schema": "http://127.0.0.1:9/meta"}}},
     "must name a JSON Schema draft"),
])
def test_a_schema_that_could_check_no_answer_is_refused_before_any_model_call(http, make_key, llm, response_format,
                                                                             words):
    key = make_key(["chat"])
    started = time.monotonic()
    resp = chat(http, key, response_format=response_format)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_response_format", resp.text
    assert words in resp.json()["error"]["message"] and llm.requests == []
    assert time.monotonic() - started < 10


def test_a_large_tools_body_leaves_other_requests_served(parley, http, make_key, llm, funded):
    """0.9 MB of tools once stalled every request 15-17 s: they are checked on a worker thread, and quickly."""
    key = make_key(["chat"])
    llm.script(reply="Fine.")
    schema = {"type": "object", "properties": {f"field_{i}": {"type": "string", "description": "x" * 40}
                                               for i in range(110)}}
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": schema}} for i in range(128)]
    assert len(json.dumps(tools)) > 900_000
    with Watch(parley.url + "/healthz") as watch:
        resp = chat(http, key, tools=tools)
    assert resp.status_code == 200, resp.text[:300]
    assert watch.longest < 5.0 and not watch.failures, (watch.longest, watch.failures)  # as above: one interpreter


# --- workflows ------------------------------------------------------------------------------


def test_a_workflow_of_24000_nodes_is_refused_at_once_naming_the_limit(http, make_key):
    key = make_key(["workflows"])
    document = {"version": 1, "name": "huge", "state": {"input": {"type": "string"}}, "entry": "n0",
                "nodes": [{"id": f"n{i}", "type": "llm", "output_key": "input"} for i in range(24_000)]}
    started = time.monotonic()
    resp = http.post("/v1/workflows", json=document, headers=auth(key))
    assert resp.status_code == 422 and resp.json()["code"] == "invalid_workflow", resp.text[:300]
    assert "at most 1000 nodes (24000 sent)" in resp.text and time.monotonic() - started < 5


# --- /mcp against DNS rebinding -------------------------------------------------------------


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize(("headers", "status", "code"), [
    ({"Origin": "http://evil.example"}, 403, "origin_not_allowed"),
    ({"Host": "evil.example"}, 421, "host_not_allowed"),
    ({"Host": "evil.example:80", "Origin": "http://evil.example:80"}, 421, "host_not_allowed"),
])
def test_mcp_refuses_a_foreign_host_or_origin(parley, make_key, headers, status, code):
    """A page on another origin (or a hostname rebound to this server) is refused before its key is read; the
    loopback names and origins are answered."""
    key = make_key(["chat"])
    resp = httpx.post(parley.url + "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **auth(key), **headers})
    assert resp.status_code == status and resp.json()["code"] == code, resp.text
    port = parley.url.rsplit(":", 1)[1]
    for allowed in ({"Origin": f"http://localhost:{port}"}, {"Host": f"localhost:{port}"}, {}):
        ok = httpx.post(parley.url + "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **auth(key), **allowed})
        assert ok.status_code == 200, (allowed, ok.text)


def test_mcp_hosts_and_origins_are_the_operators_to_widen(parley_env, make_key, monkeypatch, llm):
    from parley.api.main import create_app
    from tests.support.servers import ServerThread

    monkeypatch.setenv("PARLEY_MCP_ALLOWED_HOSTS", "parley.example.com")
    monkeypatch.setenv("PARLEY_MCP_ALLOWED_ORIGINS", "https://studio.example.com")
    from parley.core.settings import get_settings

    get_settings.cache_clear()
    key = make_key(["chat"])
    with ServerThread(create_app()) as server:
        widened = {**MCP_HEADERS, **auth(key), "Host": "parley.example.com", "Origin": "https://studio.example.com"}
        assert httpx.post(server.url + "/mcp", json=INITIALIZE, headers=widened).status_code == 200
        loopback = httpx.post(server.url + "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **auth(key)})
        assert loopback.status_code == 421  # the operator's list replaces the default


@pytest.mark.parametrize("server", [("10.0.0.5", 8000), ("0.0.0.0", 8000), ("2001:db8::5", 8000)])
def test_mcp_refuses_a_foreign_host_on_a_public_interface_too(server):
    """Wherever Parley listens (a container's 0.0.0.0, a pod's address), /mcp answers the loopback names alone
    until the operator names the hosts clients use: a name rebound to the server's address is refused. It once
    answered any host on an address other than loopback."""
    from parley.api.mcp_server import rebinding_refusal
    from parley.core.settings import Settings

    def scope(host: str) -> dict:
        return {"type": "http", "server": server, "scheme": "http", "headers": [(b"host", host.encode())]}

    default, named = Settings(), Settings(parley_mcp_allowed_hosts=["parley.example.com", "10.0.0.5:*"])
    for host in ("evil.example", "evil.example:8000", "parley.example.com", ""):
        refused = rebinding_refusal(scope(host), default)
        assert refused is not None and (refused.status, refused.code) == (421, "host_not_allowed"), host
        assert "PARLEY_MCP_ALLOWED_HOSTS" in refused.message
    assert rebinding_refusal(scope("localhost:8000"), default) is None
    assert rebinding_refusal(scope("parley.example.com"), named) is None
    assert rebinding_refusal(scope("10.0.0.5:8000"), named) is None
    assert rebinding_refusal(scope("evil.example"), named).code == "host_not_allowed"


# --- two workers ----------------------------------------------------------------------------


def test_two_workers_stay_up_while_one_checks_a_catastrophic_pattern(tmp_path, llm, parley_env, make_key, funded):
    """Under `parley serve --workers 2` the pathological pattern once had each worker miss uvicorn's health ping,
    killed, and the run walk to the next worker: now `/healthz` answers within a second every time and no worker
    dies."""
    serve = Serve(tmp_path, env={**os.environ}, args=("--workers", "2"))
    try:
        serve.wait_healthy(120)
        key = make_key(["chat"])
        llm.script(json={"word": NEAR_MATCH})
        with Watch(serve.url + "/healthz") as watch:
            answers = [httpx.post(serve.url + "/v1/chat/completions", headers=auth(key), timeout=60, json={
                "model": "openai:gpt-4o-mini", "messages": [{"role": "user", "content": "A word?"}],
                "response_format": pattern_format(CATASTROPHIC)}) for _ in range(3)]
            time.sleep(6)  # past uvicorn's ping interval, and the lease of any run that might have been lost
        served = serve.output
    finally:
        serve.close()
    assert all(a.status_code == 502 for a in answers), [a.text for a in answers]
    assert watch.longest < 1.0 and not watch.failures, (watch.longest, watch.failures)
    assert "died" not in served and "taken over" not in served, served
