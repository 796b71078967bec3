"""Tools for Parley's debaters (issue 20): `/v1/tools` (an admin registers MCP servers and grants tools), and a
round-table agent calling a granted tool during its turn, against a small real MCP server (tests/support/tool_server.py,
over stdio as Parley starts it, and over streamable HTTP on 127.0.0.1 started by the test), the scripted model server
emitting the calls."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from parley.api.main import create_app
from parley.core.settings import Settings, get_settings
from tests.api.test_roundtable_api import sse_events
from tests.support.mcp import http_client as mcp_client
from tests.support.servers import ServerThread

ROOT = Path(__file__).resolve().parents[2]
TOOL_SERVER = str(ROOT / "tests" / "support" / "tool_server.py")
# `-I`: the script's folder (tests/support, whose mcp.py is not the SDK) stays off sys.path.
STDIO = {"name": "weather", "command": sys.executable, "args": ["-I", TOOL_SERVER],
         "allowedTools": ["get_weather", "add", "fail", "slow", "show_env"]}
FORECAST = "Forecast for Lyon: sunny, 21 degrees, light wind."


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@contextmanager
def serving_tools() -> Iterator[tuple[str, subprocess.Popen]]:
    """The test's MCP server over streamable HTTP on 127.0.0.1: its URL and process (stopped on leaving)."""
    proc = subprocess.Popen([sys.executable, "-I", TOOL_SERVER, "--http", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY "), line
        yield line.split()[1], proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def http_tools() -> Iterator[str]:
    with serving_tools() as (url, _):
        yield url


@pytest.fixture
def tool_settings(parley_env, monkeypatch, http_tools) -> Settings:
    """The deployment allows the test's stdio command and its HTTP server's URL, and carries a secret of its own."""
    monkeypatch.setenv("PARLEY_TOOL_COMMANDS", sys.executable)
    monkeypatch.setenv("PARLEY_TOOL_URLS", http_tools.rsplit("/", 1)[0] + "/")
    monkeypatch.setenv("PARLEY_SECRET_FOR_TEST", "do-not-leak")
    get_settings.cache_clear()
    return get_settings()


@pytest.fixture
def server(tool_settings) -> Iterator[ServerThread]:
    with ServerThread(create_app(tool_settings)) as running:
        yield running


@pytest.fixture
def client(server):
    import httpx

    with httpx.Client(base_url=server.url, timeout=60) as http:
        yield http


@pytest.fixture
def admin(make_key):
    return make_key(["admin"])


def add_agent(client, key, name, role="Finance") -> dict:
    resp = client.post("/v1/agents", json={"name": name, "role": role, "persona": f"{name} persona"}, headers=auth(key))
    assert resp.status_code == 201, resp.text
    return resp.json()["agent"]


def register(client, key, body=STDIO):
    return client.post("/v1/tools", json=body, headers=auth(key))


# --- the admin API ---------------------------------------------------------------------------


def test_an_admin_registers_a_stdio_server_whose_secrets_are_never_shown(client, admin, make_key):
    resp = register(client, admin, {**STDIO, "env": {"WEATHER_TOKEN": "s3cret"}})
    assert resp.status_code == 201, resp.text
    server = resp.json()["server"]
    assert server["name"] == "weather" and server["transport"] == "stdio" and server["envNames"] == ["WEATHER_TOKEN"]
    assert [t["name"] for t in server["tools"]] == ["get_weather", "add", "fail", "slow", "show_env"]
    weather = server["tools"][0]
    assert weather["description"] == "Today's forecast for a city."
    assert weather["parameters"]["required"] == ["city"]
    listed = client.get("/v1/tools", headers=auth(admin)).json()
    assert [s["name"] for s in listed["servers"]] == ["weather"]
    assert {b["grant"] for b in listed["builtins"]} == {"parley/search_documents", "parley/earlier_syntheses"}
    for body in (listed, client.get("/v1/tools/weather", headers=auth(admin)).json()):
        assert "s3cret" not in json.dumps(body)

    assert register(client, admin).json()["code"] == "tool_server_exists"
    conversations = make_key(["conversations"])
    assert client.get("/v1/tools", headers=auth(conversations)).status_code == 403
    assert register(client, conversations).status_code == 403
    other = make_key(["admin"], workspace="ws2")
    assert client.get("/v1/tools/weather", headers=auth(other)).status_code == 404


def test_registration_refuses_what_the_deployment_does_not_allow(client, admin, http_tools):
    cases = [
        ({**STDIO, "command": "/bin/sh", "args": ["-c", "id"]}, 400, "tool_server_not_allowed"),
        ({"name": "far", "url": "https://tools.example.com/mcp", "allowedTools": ["x"]}, 400, "tool_server_not_allowed"),
        ({"name": "far", "url": http_tools.replace("127.0.0.1", "user:pw@127.0.0.1"), "allowedTools": ["add"]}, 400,
         "tool_server_not_allowed"),
        ({**STDIO, "allowedTools": ["get_weather", "launch_missiles"]}, 400, "unknown_tool"),
        ({**STDIO, "url": http_tools}, 400, None),
        ({**STDIO, "name": "parley"}, 400, "invalid_request"),
        ({**STDIO, "name": "Bad Name"}, 400, None),
        ({**STDIO, "env": {"LD_PRELOAD": "/tmp/x.so"}}, 400, None),
        ({**STDIO, "env": {"PYTHONPATH": "/tmp"}}, 400, None),
        # Issue 33: every variable that changes which code a program loads, not only the ones once listed.
        *[({**STDIO, "env": {name: "/tmp/x"}}, 400, "invalid_request") for name in (
            "PERLLIB", "GCONV_PATH", "OPENSSL_CONF", "npm_config_registry", "PIP_INDEX_URL")],
    ]
    for body, status, code in cases:
        resp = register(client, admin, body)
        assert resp.status_code == status, (body, resp.text)
        if code:
            assert resp.json()["code"] == code, resp.text
    assert client.get("/v1/tools", headers=auth(admin)).json()["servers"] == []


def test_a_url_server_is_listed_and_changed(client, admin, http_tools):
    resp = register(client, admin, {"name": "calc", "url": http_tools, "headers": {"Authorization": "Bearer k"},
                                    "allowedTools": ["add"]})
    assert resp.status_code == 201, resp.text
    server = resp.json()["server"]
    assert server["transport"] == "http" and server["headerNames"] == ["Authorization"] and "Bearer k" not in resp.text
    assert [t["name"] for t in server["tools"]] == ["add"]
    changed = client.patch("/v1/tools/calc", json={"allowedTools": ["add", "get_weather"]}, headers=auth(admin))
    assert changed.status_code == 200, changed.text
    assert [t["name"] for t in changed.json()["server"]["tools"]] == ["get_weather", "add"]  # as the server lists them
    assert changed.json()["server"]["headerNames"] == ["Authorization"]  # kept: not sent again
    assert client.post("/v1/tools/calc/refresh", headers=auth(admin)).status_code == 200
    assert client.patch("/v1/tools/nope", json={"allowedTools": ["add"]}, headers=auth(admin)).status_code == 404


CONNECTION_HEADERS = ["Host", "connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection", "TE",
                      "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length"]


def test_a_url_is_stored_normalised_and_never_carries_credentials_or_connection_headers(client, admin, http_tools):
    base = http_tools.rsplit("/", 1)[0]
    spelled = base.replace("http://", "HTTP://") + "/tools/%2e%2e/./mcp"
    resp = register(client, admin, {"name": "calc", "url": spelled, "allowedTools": ["add"]})
    assert resp.status_code == 201, resp.text
    assert resp.json()["server"]["url"] == http_tools  # what is checked is what is stored and called

    for query in ("api_key=s3cret", "token=s3cret", "access_token=s3cret", "password=s3cret", "sig=s3cret"):
        resp = register(client, admin, {"name": "q", "url": f"{http_tools}?{query}", "allowedTools": ["add"]})
        assert resp.status_code == 400 and resp.json()["code"] == "tool_server_not_allowed", resp.text
        assert "headers" in resp.json()["error"] and "s3cret" not in resp.text
    for name in CONNECTION_HEADERS:
        body = {"name": "h", "url": http_tools, "headers": {name: "x"}, "allowedTools": ["add"]}
        resp = register(client, admin, body)
        assert resp.status_code == 400 and name in resp.json()["error"], (name, resp.text)
    changed = client.patch("/v1/tools/calc", json={"headers": {"Host": "elsewhere"}}, headers=auth(admin))
    assert changed.status_code == 400 and "Host" in changed.json()["error"], changed.text
    changed = client.patch("/v1/tools/calc", json={"url": http_tools + "?key=s3cret"}, headers=auth(admin))
    assert changed.status_code == 400 and "s3cret" not in changed.text, changed.text


def test_a_server_that_redirects_is_not_followed(client, admin, http_tools):
    moved = http_tools.rsplit("/", 1)[0] + "/moved"  # a 307 to /mcp on the same origin
    resp = register(client, admin, {"name": "moved", "url": moved, "headers": {"Authorization": "Bearer k"},
                                    "allowedTools": ["add"]})
    assert resp.status_code == 502 and resp.json()["code"] == "tool_server_unreachable", resp.text
    assert "redirect" in resp.json()["error"] and "Bearer k" not in resp.text


def test_a_readonly_key_sees_a_servers_name_and_tools_not_how_it_is_reached(client, admin, make_key, http_tools):
    assert register(client, admin, {**STDIO, "env": {"WEATHER_TOKEN": "s3cret"}}).status_code == 201
    assert register(client, admin, {"name": "calc", "url": http_tools, "headers": {"Authorization": "Bearer k"},
                                    "allowedTools": ["add"]}).status_code == 201
    hidden = {"command", "args", "envNames", "url", "headerNames"}
    readonly = make_key(["readonly"])
    listed = client.get("/v1/tools", headers=auth(readonly))
    assert listed.status_code == 200, listed.text
    shown = [*listed.json()["servers"], client.get("/v1/tools/calc", headers=auth(readonly)).json()["server"],
             client.get("/v1/tools/weather", headers=auth(readonly)).json()["server"]]
    for server in shown:
        assert not hidden & set(server), server
        assert server["name"] in ("calc", "weather") and server["tools"] and server["allowedTools"]
    for text in (listed.text, json.dumps(shown)):
        assert TOOL_SERVER not in text and "127.0.0.1" not in text and "WEATHER_TOKEN" not in text
    full = client.get("/v1/tools", headers=auth(admin)).json()["servers"]
    assert {s["name"]: hidden & set(s) for s in full} == {"calc": {"url", "headerNames"},
                                                          "weather": {"command", "args", "envNames"}}


def test_an_unreachable_server_is_a_502(client, admin, http_tools):
    resp = register(client, admin, {"name": "dead", "url": http_tools + "/nowhere", "allowedTools": ["add"]})
    assert resp.status_code == 502 and resp.json()["code"] == "tool_server_unreachable", resp.text


def test_grants_name_registered_tools_and_known_subjects(client, admin):
    assert register(client, admin).status_code == 201
    claire = add_agent(client, admin, "Claire")

    def grant(subject, tools):
        return client.put(f"/v1/tools/grants/{subject}", json={"tools": tools}, headers=auth(admin))

    ok = grant(f"agent:{claire['id']}", ["weather/get_weather", "parley/search_documents", "weather/get_weather"])
    assert ok.status_code == 200, ok.text
    assert ok.json()["grant"]["tools"] == ["weather/get_weather", "parley/search_documents"]
    assert grant("duel:opponent", ["weather/*"]).status_code == 200
    refused = [
        (f"agent:{claire['id']}", ["weather/secret_tool"], 400, "unknown_tool"),
        (f"agent:{claire['id']}", ["elsewhere/get_weather"], 400, "unknown_tool"),
        ("duel:opponent", ["parley/search_documents"], 400, "unknown_tool"),
        ("duel:referee", ["weather/add"], 400, "invalid_subject"),
        ("agent:agt_nobody", ["weather/add"], 404, "subject_not_found"),
    ]
    for subject, tools, status, code in refused:
        resp = grant(subject, tools)
        assert (resp.status_code, resp.json()["code"]) == (status, code), resp.text
    grants = client.get("/v1/tools/grants", headers=auth(admin)).json()["grants"]
    assert {g["subject"]: g["tools"] for g in grants} == {
        f"agent:{claire['id']}": ["weather/get_weather", "parley/search_documents"], "duel:opponent": ["weather/*"]}

    assert client.delete("/v1/tools/weather", headers=auth(admin)).status_code == 204
    grants = client.get("/v1/tools/grants", headers=auth(admin)).json()["grants"]
    assert {g["subject"]: g["tools"] for g in grants} == {
        f"agent:{claire['id']}": ["parley/search_documents"], "duel:opponent": []}
    assert client.delete(f"/v1/agents/{claire['id']}", headers=auth(admin)).status_code == 204
    assert [g["subject"] for g in client.get("/v1/tools/grants", headers=auth(admin)).json()["grants"]] == [
        "duel:opponent"]
    assert grant("duel:opponent", []).json()["grant"]["tools"] == []
    assert client.get("/v1/tools/grants", headers=auth(admin)).json()["grants"] == []


# --- a round-table agent calls its tool --------------------------------------------------------


def test_a_round_table_agent_calls_a_granted_tool_during_its_turn(client, server, admin, llm):
    assert register(client, admin).status_code == 201
    claire, marc = add_agent(client, admin, "Claire"), add_agent(client, admin, "Marc", "Sales")
    resp = client.put(f"/v1/tools/grants/agent:{claire['id']}", json={"tools": ["weather/get_weather"]},
                      headers=auth(admin))
    assert resp.status_code == 200, resp.text
    # Only Claire is offered tools: her first answer calls one; with its result she answers.
    llm.script(with_tools=True, match=FORECAST, reply="The forecast says sunny in Lyon, so open the office now.")
    llm.script(with_tools=True, tool_calls=[{"name": "get_weather", "arguments": {"city": "Lyon"}, "id": "call_w1"}],
               times=1)
    conversation = client.post("/v1/conversations", json={"title": "Open in Lyon?"}, headers=auth(admin)).json()
    conversation_id = conversation["conversation"]["id"]
    with client.stream("POST", f"/v1/conversations/{conversation_id}/message", json={"content": "Open in Lyon?"},
                       headers={**auth(admin), "Accept": "text/event-stream"}) as resp:
        assert resp.status_code == 200
        run_id = resp.headers["x-run-id"]
        events = sse_events(resp.read().decode())
    names = [name for _, name, _ in events]
    assert names[-1] == "done", names
    call = next(data for _, name, data in events if name == "tool_call")
    result = next(data for _, name, data in events if name == "tool_result")
    assert call == {"agentId": claire["id"], "agentName": "Claire", "roundNumber": 0, "index": 0, "id": "call_w1",
                    "name": "get_weather", "arguments": json.dumps({"city": "Lyon"})}
    assert result == {"agentId": claire["id"], "agentName": "Claire", "roundNumber": 0, "index": 0, "id": "call_w1",
                      "name": "get_weather", "content": FORECAST, "isError": False}
    claire_at = next(i for i, (_, n, d) in enumerate(events) if n == "message" and d["agentId"] == claire["id"])
    assert names.index("tool_call") < names.index("tool_result") < claire_at
    claire_message = events[claire_at][2]
    assert claire_message["content"] == "The forecast says sunny in Lyon, so open the office now."

    # The result reached the model's next request, as a tool message answering the call.
    followed = [r for r in llm.requests if any(m.get("role") == "tool" for m in r["messages"])]
    assert len(followed) == 1
    tool_message = next(m for m in followed[0]["messages"] if m["role"] == "tool")
    assert (tool_message["content"], tool_message["tool_call_id"]) == (FORECAST, "call_w1")
    asked = next(m for m in followed[0]["messages"] if m.get("tool_calls"))
    assert asked["tool_calls"][0]["function"]["name"] == "get_weather"
    assert [t["function"]["name"] for t in followed[0]["tools"]] == ["get_weather"]
    assert not any("tools" in r for r in llm.requests if marc["name"] in json.dumps(r["messages"][:1]))

    # The stored transcript keeps both, and the message's usage counts the call.
    detail = client.get(f"/v1/conversations/{conversation_id}", headers=auth(admin)).json()["conversation"]
    stored = next(m for m in detail["messages"] if m.get("agentId") == claire["id"])
    assert stored["metadata"]["toolCalls"] == [{"id": "call_w1", "name": "get_weather",
                                                "arguments": json.dumps({"city": "Lyon"}), "result": FORECAST,
                                                "isError": False}]
    assert stored["metadata"]["usage"]["toolCalls"] == 1
    assert all("toolCalls" not in (m.get("metadata") or {}) for m in detail["messages"]
               if m.get("agentId") == marc["id"])

    # The run's Markdown transcript (MCP resource parley://runs/{id}) names the call under Claire's turn.
    async def transcript() -> str:
        async with mcp_client(server.url, admin) as mcp:
            return (await mcp.read_resource(f"parley://runs/{run_id}")).contents[0].text

    text = asyncio.run(transcript())
    assert f'- Called `get_weather({json.dumps({"city": "Lyon"})})`: {FORECAST}' in text


def test_a_failing_tool_is_a_result_the_agent_reads_and_the_run_goes_on(client, admin, llm):
    assert register(client, admin).status_code == 201
    claire = add_agent(client, admin, "Claire")
    client.put(f"/v1/tools/grants/agent:{claire['id']}", json={"tools": ["weather/*"]}, headers=auth(admin))
    llm.script(with_tools=True, tool_calls=[
        {"name": "fail", "arguments": {"reason": "no data"}, "id": "call_f"},
        {"name": "nonexistent", "arguments": {}, "id": "call_n"},
        {"name": "show_env", "arguments": {"name": "PARLEY_SECRET_FOR_TEST"}, "id": "call_e"},
        {"name": "add", "arguments": {"a": 1, "b": 2}, "id": "call_a"},
        {"name": "add", "arguments": {"a": 2, "b": 2}, "id": "call_over"},
    ], times=1)
    conversation_id = client.post("/v1/conversations", json={"title": "T"}, headers=auth(admin)).json()[
        "conversation"]["id"]
    resp = client.post(f"/v1/conversations/{conversation_id}/message", json={"content": "Go?"}, headers=auth(admin))
    assert resp.status_code == 200, resp.text
    detail = client.get(f"/v1/conversations/{conversation_id}", headers=auth(admin)).json()["conversation"]
    calls = next(m for m in detail["messages"] if m.get("agentId") == claire["id"])["metadata"]["toolCalls"]
    by_id = {c["id"]: c for c in calls}
    assert by_id["call_f"]["isError"] and "no data" in by_id["call_f"]["result"]
    assert by_id["call_n"]["isError"] and "no tool named 'nonexistent'" in by_id["call_n"]["result"]
    # A stdio server starts with a clean environment: none of Parley's variables.
    assert by_id["call_e"]["result"] == "(unset)" and not by_id["call_e"]["isError"]
    assert by_id["call_a"]["result"] == "3"
    # Past the turn's limit (4 calls) a call is answered without running, and the model is asked without tools.
    assert by_id["call_over"]["isError"] and "at most 4" in by_id["call_over"]["result"]
    last = [r for r in llm.requests if r.get("tool_choice") == "none"]
    assert len(last) == 1 and sum(m["role"] == "tool" for m in last[0]["messages"]) == 5


def test_a_failed_call_names_the_server_not_its_address_to_those_who_read_the_run(parley_env, monkeypatch, admin,
                                                                                make_key, llm):
    """What a call answers reaches the run's readers (any key of the workspace, over HTTP and MCP): a failure names
    the server as registered, never its URL or command (issue 33)."""
    import httpx

    with serving_tools() as (url, gone):
        monkeypatch.setenv("PARLEY_TOOL_URLS", url)
        get_settings.cache_clear()
        with (ServerThread(create_app(get_settings())) as server,
              httpx.Client(base_url=server.url, timeout=60) as client):
            resp = register(client, admin, {"name": "flaky", "url": url, "allowedTools": ["add"]})
            assert resp.status_code == 201, resp.text
            gone.terminate()  # registered, then unreachable
            gone.wait(timeout=10)
            failed_call_read_by_others(server, client, admin, make_key(["readonly"]), llm, url)


def failed_call_read_by_others(server, client, admin, readonly, llm, url):
    claire = add_agent(client, admin, "Claire")
    client.put(f"/v1/tools/grants/agent:{claire['id']}", json={"tools": ["flaky/add"]}, headers=auth(admin))
    llm.script(with_tools=True, tool_calls=[{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "call_g"}], times=1)
    conversation_id = client.post("/v1/conversations", json={"title": "T"}, headers=auth(admin)).json()[
        "conversation"]["id"]
    resp = client.post(f"/v1/conversations/{conversation_id}/message", json={"content": "Go?"}, headers=auth(admin))
    assert resp.status_code == 200, resp.text
    run_id = resp.headers["x-run-id"]

    detail = client.get(f"/v1/conversations/{conversation_id}", headers=auth(readonly))
    assert detail.status_code == 200, detail.text
    call = next(m for m in detail.json()["conversation"]["messages"] if m.get("agentId") == claire["id"])[
        "metadata"]["toolCalls"][0]
    assert call["isError"] and "'flaky'" in call["result"], call

    async def read() -> tuple[str, str]:
        async with mcp_client(server.url, readonly) as mcp:
            transcript = (await mcp.read_resource(f"parley://runs/{run_id}")).contents[0].text
            run = await mcp.call_tool("get_run", {"runId": run_id})
            return transcript, json.dumps(run.structured_content)

    transcript, run = asyncio.run(read())
    assert "'flaky'" in transcript
    port = url.rsplit(":", 1)[1].split("/")[0]
    for text in (detail.text, transcript, run):
        assert url not in text and f"127.0.0.1:{port}" not in text and "PARLEY_TOOL_URLS" not in text


# --- a duel's side calls its tool ---------------------------------------------------------------


def test_a_duel_side_granted_a_tool_calls_it_and_the_record_keeps_it(client, admin, make_key, llm, sync_db):
    from tests.support.duel import OPPONENT_REPLY, script_duel
    from tests.support.sse import parse_sse

    assert register(client, admin).status_code == 201
    assert client.put("/v1/tools/grants/duel:opponent", json={"tools": ["weather/get_weather"]},
                      headers=auth(admin)).status_code == 200
    llm.script(with_tools=True, tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}, "id": "call_o"}],
               times=1)
    script_duel(llm)
    resp = client.post("/api/debate", json={"topic": "Should remote work be the default?", "rounds": 1,
                                            "userProfile": {"name": "Ada"}}, headers=auth(make_key(["debate"])))
    assert resp.status_code == 200, resp.text
    events = parse_sse(resp.text)
    kinds = [e.event for e in events if e.event != "chunk"]
    assert kinds == ["init", "start", "message", "start", "tool_call", "tool_result", "message", "synthesizing",
                     "synthesis", "done"]
    call, result = (next(e.json() for e in events if e.event == kind) for kind in ("tool_call", "tool_result"))
    assert call == {"role": "opponent", "index": 0, "id": "call_o", "name": "get_weather",
                    "arguments": json.dumps({"city": "Oslo"})}
    assert result["content"] == "Forecast for Oslo: sunny, 21 degrees, light wind." and result["role"] == "opponent"
    messages = [e.json() for e in events if e.event == "message"]
    assert "toolCalls" not in messages[0] and messages[1]["content"] == OPPONENT_REPLY
    assert messages[1]["toolCalls"][0]["result"] == result["content"]
    record = sync_db.debates.find_one({"_id": events[0].json()["id"]})
    assert record["messages"][1]["toolCalls"] == messages[1]["toolCalls"]
    # The user's side was granted nothing: its turns were offered no tools.
    assert all("tools" not in r for r in llm.requests if "You are Ada," in json.dumps(r["messages"]))


# --- a workflow's llm node calls its tool -------------------------------------------------------


WORKFLOW = {"version": 1, "name": "Forecast brief",
            "state": {"city": {"type": "string", "required": True}, "brief": {"type": "string"},
                      "shape": {"type": "object"}},
            "nodes": [{"id": "brief", "type": "llm", "inputs": {"prompt": "Write a brief on the weather in {city}."},
                       "output_key": "brief"},
                      {"id": "shape", "type": "llm", "config": {"output_schema": {
                          "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}},
                       "inputs": {"prompt": "Is this fine? {brief}"}, "output_key": "shape"}],
            "edges": [{"from": "brief", "to": "shape"}], "entry": "brief", "finish": ["shape"]}


def test_a_stored_workflows_llm_node_calls_the_tool_granted_to_it(client, admin, llm):
    assert register(client, admin).status_code == 201
    created = client.post("/v1/workflows", json=WORKFLOW, headers=auth(admin))
    assert created.status_code == 201, created.text
    workflow_id = created.json()["id"]

    def grant(node):
        return client.put(f"/v1/tools/grants/workflow:{workflow_id}:{node}", json={"tools": ["weather/get_weather"]},
                          headers=auth(admin))

    assert grant("brief").status_code == 200
    refused = grant("shape")  # a structured node does not stream, and calls no tool
    assert (refused.status_code, refused.json()["code"]) == (400, "invalid_subject")
    assert grant("nowhere").status_code == 404
    llm.script(with_tools=True, match="Forecast for Bergen", reply="Bergen will be sunny.")
    llm.script(with_tools=True, tool_calls=[{"name": "get_weather", "arguments": {"city": "Bergen"}}], times=1)
    with client.stream("POST", f"/v1/workflows/{workflow_id}/runs/stream", json={"input": {"city": "Bergen"}},
                       headers=auth(admin)) as resp:
        assert resp.status_code == 200, resp.read()
        events = sse_events(resp.read().decode())
    by_name = {name: data for _, name, data in events}
    assert by_name["tool_call"]["node"] == "brief" and by_name["tool_call"]["name"] == "get_weather"
    assert by_name["tool_result"]["content"] == "Forecast for Bergen: sunny, 21 degrees, light wind."
    assert by_name["done"]["state"]["brief"] == "Bergen will be sunny."
    usage = by_name["done"]["usage"]  # the call counted in the run's usage, and in its node's
    assert usage["toolCalls"] == 1 and usage["nodes"]["brief"]["toolCalls"] == 1 and "toolCalls" not in usage[
        "nodes"]["shape"]


# --- a router's panelists call their tools --------------------------------------------------------


PANEL = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]
OSLO = "Forecast for Oslo: sunny, 21 degrees, light wind."


def test_a_routers_panelists_call_the_tools_granted_to_it(client, server, admin, make_key, llm, sync_db):
    import openai

    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    assert register(client, admin).status_code == 201
    router = {"id": "forecasters", "models": PANEL, "debate": True, "arbitrator": "meta:llama-4-maverick"}
    assert client.post("/v1/routers", json=router, headers=auth(admin)).status_code == 201

    def grant(subject):
        return client.put(f"/v1/tools/grants/{subject}", json={"tools": ["weather/get_weather"]}, headers=auth(admin))

    assert grant("router:nowhere").status_code == 404
    assert grant("router:debate").status_code == 404  # the preset is no stored router: nothing holds its grant
    assert grant("router:forecasters").status_code == 200

    def script() -> None:  # gpt-5 calls the tool once, then answers with its result; the others answer at once
        llm.reset()
        llm.script(model="gpt-5", with_tools=True, match=OSLO, reply="Sunny in Oslo: cycle.")
        llm.script(model="gpt-5", with_tools=True, times=1,
                   tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}, "id": "call_p1"}])
        llm.script(model="claude-sonnet-4-5", reply="Take a rain jacket anyway.")
        llm.script(model="gemini-2.5-pro", reply="It depends on the weather.")
        llm.script(model="llama-4-maverick", reply="Cycle: the forecast is sunny.")

    question = [{"role": "user", "content": "Should I cycle to work in Oslo today?"}]
    called = {"id": "call_p1", "name": "get_weather", "arguments": json.dumps({"city": "Oslo"}), "result": OSLO,
              "isError": False}
    script()
    chat_key = make_key(["chat"])
    with openai.OpenAI(base_url=server.url + "/v1", api_key=chat_key, max_retries=0, timeout=60) as sdk:
        answer = sdk.chat.completions.create(model="router/forecasters", messages=question)
    assert answer.choices[0].message.content == "Cycle: the forecast is sunny."
    assert answer.choices[0].finish_reason == "stop" and not answer.choices[0].message.tool_calls
    panelists = answer.model_extra["_meta"]["debate"]["panelists"]
    assert panelists[0]["model"] == "openai:gpt-5" and panelists[0]["toolCalls"] == [called]
    assert all("toolCalls" not in p for p in panelists[1:])
    # The result reached gpt-5's next call as a tool message; every panelist was offered the tool, the arbitrator
    # none; gpt-5's tokens count both of its calls.
    followed = [r for r in llm.requests if any(m.get("role") == "tool" for m in r["messages"])]
    assert len(followed) == 1 and followed[0]["model"] == "gpt-5"
    assert next(m for m in followed[0]["messages"] if m["role"] == "tool")["content"] == OSLO
    assert [t["function"]["name"] for t in followed[0]["tools"]] == ["get_weather"]
    offered = {r["model"]: [t["function"]["name"] for t in r.get("tools") or []] for r in llm.requests}
    assert offered == {"gpt-5": ["get_weather"], "claude-sonnet-4-5": ["get_weather"],
                       "gemini-2.5-pro": ["get_weather"], "llama-4-maverick": []}
    assert panelists[0]["tokens"] > panelists[1]["tokens"]
    # The arbitrator read the answer gpt-5 gave with the forecast.
    assert any("Sunny in Oslo: cycle." in json.dumps(r["messages"]) for r in llm.requests
               if r["model"] == "llama-4-maverick")

    # Streamed: the calls are progress lines, never the answer's tool calls; the run's events and its transcript
    # keep them under the panelist.
    script()
    with client.stream("POST", "/v1/chat/completions", headers=auth(chat_key),
                       json={"model": "router/forecasters", "messages": question, "stream": True}) as resp:
        assert resp.status_code == 200
        run_id = resp.headers["x-run-id"]
        body = resp.read().decode()
    comments = [line[2:] for line in body.splitlines() if line.startswith(": ")]
    assert "panelist openai:gpt-5 calls get_weather" in comments
    assert "panelist openai:gpt-5 got get_weather's result" in comments
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in body.splitlines()
              if line.startswith("data: {")]
    assert "".join(d.get("content") or "" for d in deltas) == "Cycle: the forecast is sunny."
    assert not any(d.get("tool_calls") for d in deltas)
    replay = client.get(f"/v1/runs/{run_id}/events", headers=auth(chat_key))
    assert replay.status_code == 200, replay.text
    stored = {name: data for _, name, data in sse_events(replay.text) if name in ("tool_call", "tool_result")}
    gpt5 = {"id": "panelist:0", "name": "openai:gpt-5"}
    assert stored["tool_call"] == {"speaker": gpt5, "round": None, "index": 0, "id": "call_p1", "name": "get_weather",
                                   "arguments": json.dumps({"city": "Oslo"})}
    assert stored["tool_result"] == {"speaker": gpt5, "round": None, "index": 0, "id": "call_p1",
                                     "name": "get_weather", "content": OSLO, "isError": False}

    async def transcript() -> str:
        async with mcp_client(server.url, chat_key) as mcp:
            return (await mcp.read_resource(f"parley://runs/{run_id}")).contents[0].text

    assert f'- Called `get_weather({json.dumps({"city": "Oslo"})})`: {OSLO}' in asyncio.run(transcript())

    # A deleted router takes its grant with it: one created again under its id starts with none.
    assert client.delete("/v1/routers/forecasters", headers=auth(admin)).status_code == 200
    grants = client.get("/v1/tools/grants", headers=auth(admin)).json()["grants"]
    assert all(g["subject"] != "router:forecasters" for g in grants)
