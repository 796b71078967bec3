"""Model ids are bounded wherever a request or a stored router names one (issue 45): a 1 MB `model` once streamed back
33 MB (it is echoed in every chunk), a 3.9 MB one ended its run `completed` with its `done` event stored without its
data, and a router of 32 long ids made `/v1/models` 9.9 MB for every key. Every entry point refuses an id longer
than `MAX_MODEL_ID_CHARS` (400 or 422, a JSON body with a `code`, the message naming the field) before anything is
stored or any model called; a run whose events cannot all be stored ends `failed`, never `completed`; and
`/v1/models` is bounded by the routers' own limits."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner

from parley.cli.main import app
from parley.core.limits import MAX_MODEL_ID_CHARS, MAX_ROUTER_MODELS, MAX_ROUTERS
from tests.api.test_panel_api import QUESTION, api, key, server  # noqa: F401 (fixtures over this module's server)
from tests.api.test_runs_api import WORKFLOW
from tests.support.mcp import http_client

LONG = "openai:" + "x" * (MAX_MODEL_ID_CHARS - len("openai:") + 1)  # one character over the bound
FITS = "openai:" + "x" * (MAX_MODEL_ID_CHARS - len("openai:"))


def refused(resp: httpx.Response, field: str) -> None:
    """A refusal as every bad input gets one: 400 (a workflow's 422), JSON with a `code`, the field named."""
    assert resp.status_code in (400, 422), resp.text[:500]
    body = resp.json()
    error = body.get("error")
    code, message = (error["code"], error["message"]) if isinstance(error, dict) else (body["code"], json.dumps(body))
    assert code and field in message, body
    assert len(body.get("errors") or [None]) == 1, body  # a workflow's: that one issue
    assert len(resp.content) < 4096  # the id is not echoed back


def workflow(**config) -> dict:
    """A one-node workflow whose node's config is `config` (`type` picks the node)."""
    node_type = config.pop("type", "llm")
    inputs = {"llm": {"prompt": "{question}"}, "panel": {"input": "{question}"},
              "duel": {"topic": "{question}"}}[node_type]
    node = {"id": "answer", "type": node_type, "inputs": inputs, "output_key": "answer", "config": config}
    state = {**WORKFLOW["state"], "answer": {"type": "any"}}
    return {**WORKFLOW, "state": state, "nodes": [node]}


CHAT = {"messages": QUESTION}
ENTRY_POINTS = {
    # name: (method, path, body, the field the refusal names)
    "chat model": ("POST", "/v1/chat/completions", {**CHAT, "model": LONG}, "model"),
    "chat stream model": ("POST", "/v1/chat/completions", {**CHAT, "model": LONG, "stream": True}, "model"),
    "chat council arbitrator": ("POST", "/v1/chat/completions", {**CHAT, "model": "router/debate", "arbitrator": LONG},
                                "arbitrator"),
    "responses model": ("POST", "/v1/responses", {"model": LONG, "input": "Hello"}, "model"),
    "router models": ("POST", "/v1/routers", {"id": "long", "models": ["openai:gpt-5", LONG]}, "models"),
    "router arbitrator": ("POST", "/v1/routers", {"id": "long", "models": ["openai:gpt-5"], "arbitrator": LONG},
                          "arbitrator"),
    "router reasoning": ("POST", "/v1/routers", {"id": "long", "models": ["openai:gpt-5"],
                                                 "reasoningEffort": {LONG: "high"}}, "reasoningEffort"),
    "router update": ("PATCH", "/v1/routers/kept", {"models": [LONG]}, "models"),
    "router update arbitrator": ("PATCH", "/v1/routers/kept", {"arbitrator": LONG}, "arbitrator"),
    "agent model": ("POST", "/v1/agents", {"name": "Long", "model": LONG}, "model"),
    "workflow llm node": ("POST", "/v1/workflows", workflow(model=LONG), "model"),
    "workflow panel node": ("POST", "/v1/workflows", workflow(type="panel", models=["openai:gpt-5", LONG]),
                            "models"),
    "workflow duel option": ("POST", "/v1/workflows", workflow(type="duel", options={"judge_model": LONG}),
                             "judge_model"),
    "workflow run inline": ("POST", "/v1/workflows/runs", {"workflow": workflow(model=LONG),
                                                           "input": {"question": "Hi?"}}, "model"),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_an_over_long_model_id_is_refused_naming_its_field(api, llm, sync_db, entry):
    api.post("/v1/routers", json={"id": "kept", "models": ["openai:gpt-5"]}).raise_for_status()
    method, path, body, field = ENTRY_POINTS[entry]
    resp = api.request(method, path, json=body)
    refused(resp, field)
    assert llm.requests == []  # no model was called
    assert sync_db.runs.count_documents({}) == 0 and sync_db.workflows.count_documents({}) == 0
    assert sync_db.routers.find_one({"id": "kept"})["models"] == ["openai:gpt-5"]
    assert sync_db.routers.count_documents({}) == 1 and sync_db.agents.count_documents({"name": "Long"}) == 0


def test_an_id_at_the_bound_is_taken(api):
    resp = api.post("/v1/routers", json={"id": "fits", "models": ["anthropic:claude-sonnet-4-5", FITS],
                                         "arbitrator": FITS})
    assert resp.status_code in (200, 201), resp.text


@pytest.mark.parametrize("arguments", [{"models": ["openai:gpt-5", LONG]}, {"arbitrator": LONG},
                                       {"router": "x" * MAX_MODEL_ID_CHARS}])
async def test_the_mcp_panel_tool_refuses_an_over_long_model_id(server, key, llm, sync_db, arguments):
    async with http_client(server.url, key) as client:
        result = await client.call_tool("ask_panel", {"question": "Why?", **arguments})
    assert result.is_error, result.content
    assert next(iter(arguments)) in result.content[0].text and len(result.content[0].text) < 2048
    assert llm.requests == [] and sync_db.runs.count_documents({}) == 0


@pytest.mark.parametrize("command", [["debate", "Remote work?", "--model", LONG],
                                     ["eval", "run", "--task", "arithmetic", "--methods", "single", "--out", "out",
                                      "--model", LONG],
                                     ["eval", "run", "--task", "arithmetic", "--methods", "debate", "--out", "out",
                                      "--models", f"openai:gpt-5,{LONG}"],
                                     ["eval", "judge", "--pairs", "pairs.jsonl", "--out", "out", "--model", LONG],
                                     ["ask", "Why?", "--model", "anthropic:claude-sonnet-4-5", "--model", LONG],
                                     ["ask", "Why?", "--arbitrator", LONG],
                                     ["model", "chat", "Hi", "--model", LONG]])
def test_the_cli_refuses_an_over_long_model_id(parley_env, llm, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pairs.jsonl").write_text(json.dumps({"question": "Q", "answer_a": "A", "answer_b": "B"}) + "\n")
    result = CliRunner().invoke(app, command, terminal_width=200)
    assert result.exit_code == 2, result.output
    option = next(o for o in ("--models", "--arbitrator", "--model") if o in command)
    assert f"{option}: a model id has at most {MAX_MODEL_ID_CHARS} characters" in result.output
    assert llm.requests == []


# --- a run's status and its stored events agree -----------------------------------------------


def stored_events(sync_db, run_id: str) -> list[dict]:
    return [e for page in sync_db.run_events.find({"runId": run_id}).sort("seq", 1) for e in page.get("events", [])]


@pytest.mark.parametrize("stream", [False, True])
def test_a_run_whose_done_event_cannot_be_stored_fails_and_its_events_say_so(api, llm, sync_db, monkeypatch, stream):
    """The `done` event of a chat completion holds its answer: with a page of events lowered to 8 KB, a 12 KB answer
    makes it too large to store. The run is stored `failed` (`event_too_large`) and its last stored event is that
    `error`; no event says `done`, and none is stored without its data while the run says `completed`."""
    monkeypatch.setattr("parley.store.runs.MAX_EVENT_PAGE_BYTES", 8192)
    llm.script(reply="word " * 2400)
    resp = api.post("/v1/chat/completions", json={**CHAT, "model": "openai:gpt-5", "stream": stream})
    run = sync_db.runs.find_one({})
    assert run is not None
    events = stored_events(sync_db, run["_id"])
    assert run["status"] == "failed" and run["error"]["code"] == "event_too_large", (run["status"], run.get("error"))
    assert [e["event"] for e in events if e["event"] in ("done", "error", "cancelled")] == ["error"]
    assert events[-1]["event"] == "error" and "omitted" not in events[-1]["data"]
    if stream:  # the stream ends with the error, as any failed run's does
        assert resp.status_code == 200 and resp.text.rstrip().endswith('"code":"event_too_large"}}')
    else:
        assert resp.status_code == 500 and resp.json()["error"]["code"] == "event_too_large", resp.text


# --- /v1/models -----------------------------------------------------------------------------


def test_models_is_bounded_by_the_routers_limits(api, sync_db):
    """The most a workspace can store (`MAX_ROUTERS` routers of `MAX_ROUTER_MODELS` distinct ids at the bound, each
    with an arbitrator) lists in well under 2 MB; one router more is refused, and a router stored before ids were
    bounded is left out of the list."""
    families = ["openai", "anthropic", "google", "mistral"]
    docs = []
    for r in range(MAX_ROUTERS):
        models = [f"{families[i % 4]}:{r:03d}-{i:02d}-".ljust(MAX_MODEL_ID_CHARS, "x")
                  for i in range(MAX_ROUTER_MODELS)]
        docs.append({"id": f"r{r:03d}", "models": models, "arbitrator": models[0], "debate": True, "workspace": "ws1",
                     "panel_size": 8})
    sync_db.routers.insert_many(docs[:-1])
    made = api.post("/v1/routers", json={"id": docs[-1]["id"], "models": docs[-1]["models"],
                                         "arbitrator": docs[-1]["arbitrator"], "panelSize": 8})
    assert made.status_code in (200, 201), made.text[:300]
    one_more = api.post("/v1/routers", json={"id": "one-more", "models": ["openai:gpt-5"]})
    assert one_more.status_code == 400 and one_more.json()["error"]["code"] == "too_many_routers", one_more.text
    sync_db.routers.insert_one({"id": "a-old", "models": ["openai:" + "y" * 1_000_000], "workspace": "ws1"})
    listed = api.get("/v1/models")
    assert listed.status_code == 200
    ids = [m["id"] for m in listed.json()["data"]]
    assert "router/a-old" not in ids and "router/r000" in ids and "router/one-more" not in ids
    assert all(len(i) <= MAX_MODEL_ID_CHARS + len("router/") for i in ids)
    assert len(listed.content) < 2_000_000, len(listed.content)
    unknown = api.get("/v1/models/openai:" + "z" * 8000)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert len(unknown.content) < 1024  # the id asked for is not echoed whole
