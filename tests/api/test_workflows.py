"""`/v1/workflows` over real HTTP: storing, checking, running whole and streamed, and the run records."""

from __future__ import annotations

import json

import httpx
import pytest

from parley.designer import load_example, workflow_json_schema


def sse_events(text: str) -> list[tuple[str, dict, int | None]]:
    """Parse a text/event-stream body into (event, data, id), skipping keep-alive comments."""
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
        if "event" in fields:
            out.append((fields["event"], json.loads(fields.get("data") or "{}"),
                        int(fields["id"]) if "id" in fields else None))
    return out


@pytest.fixture
def key(make_key) -> str:
    return make_key(["workflows"])


@pytest.fixture
def auth(key) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def create(http, auth, document=None) -> dict:
    resp = http.post("/v1/workflows", headers=auth, json=document or load_example("outline-brief"))
    assert resp.status_code == 201, resp.text
    return resp.json()


def test_schema_is_served_without_a_key(http):
    resp = http.get("/v1/workflows/schema")
    assert resp.status_code == 200
    assert resp.json() == workflow_json_schema()


def test_store_list_get_and_delete(http, auth, make_key):
    created = create(http, auth)
    assert created["id"].startswith("wf_") and created["name"] == "Outline, then brief"
    assert created["workflow"]["nodes"][1]["config"]["op"] == "join"
    assert created["workflow"]["sampleInput"] == load_example("outline-brief")["sampleInput"]

    listed = http.get("/v1/workflows", headers=auth).json()
    assert listed["count"] == 1 and listed["data"][0]["id"] == created["id"]
    assert http.get(f"/v1/workflows/{created['id']}", headers=auth).json() == created

    other = {"x-api-key": make_key(["workflows"], workspace="elsewhere")}
    assert http.get(f"/v1/workflows/{created['id']}", headers=other).status_code == 404
    assert http.get("/v1/workflows", headers=other).json()["count"] == 0

    assert http.delete(f"/v1/workflows/{created['id']}", headers=auth).status_code == 204
    missing = http.get(f"/v1/workflows/{created['id']}", headers=auth)
    assert missing.status_code == 404 and missing.json()["code"] == "workflow_not_found"
    assert http.delete(f"/v1/workflows/{created['id']}", headers=auth).status_code == 404


def test_an_invalid_workflow_is_422_listing_each_problem(http, auth):
    document = load_example("outline-brief")
    document["nodes"][2]["inputs"]["prompt"] = "Write about {topik}"
    document["edges"][1]["to"] = "breif"
    resp = http.post("/v1/workflows", headers=auth, json=document)

    assert resp.status_code == 422
    body = resp.json()
    assert body["code"] == "invalid_workflow"
    assert body["errors"] == [
        {"node": "brief", "path": "nodes[2].inputs.prompt",
         "message": "unknown state key 'topik' (did you mean 'topic'?); declare it under state",
         "detail": "At node 'brief' (nodes[2].inputs.prompt): unknown state key 'topik' (did you mean 'topic'?); "
                   "declare it under state"},
        {"node": "bullets", "path": "edges[1].to", "message": "unknown node 'breif' (did you mean 'brief'?)",
         "detail": "At node 'bullets' (edges[1].to): unknown node 'breif' (did you mean 'brief'?)"},
    ]
    assert body["error"].startswith("Invalid workflow: At node 'brief' (nodes[2].inputs.prompt)")
    assert http.get("/v1/workflows", headers=auth).json()["count"] == 0


@pytest.mark.parametrize("payload", ["[1, 2]", "not json"])
def test_a_body_that_is_not_an_object_is_422(http, auth, payload):
    resp = http.post("/v1/workflows", headers={**auth, "Content-Type": "application/json"}, content=payload)
    assert resp.status_code == 422 and "error" in resp.json()


def test_keys_need_the_workflows_scope_and_readonly_keys_only_read(http, make_key, auth):
    created = create(http, auth)
    no_scope = {"x-api-key": make_key(["debate"])}
    resp = http.post("/v1/workflows", headers=no_scope, json=load_example("outline-brief"))
    assert resp.status_code == 403 and resp.json()["code"] == "scope_denied"
    assert http.get("/v1/workflows", headers={"x-api-key": ""}).status_code == 401

    readonly = {"x-api-key": make_key(["readonly"])}
    assert http.get(f"/v1/workflows/{created['id']}", headers=readonly).status_code == 200
    for method, path in [("POST", "/v1/workflows"), ("DELETE", f"/v1/workflows/{created['id']}"),
                         ("POST", f"/v1/workflows/{created['id']}/runs")]:
        resp = http.request(method, path, headers=readonly, json=load_example("outline-brief"))
        assert resp.status_code == 403 and resp.json()["code"] == "read_only_key", (method, path)


def test_a_run_returns_final_state_and_per_node_usage_and_is_stored(http, auth, llm, sync_db):
    llm.script(match="Write a brief", reply="Vaccines teach the body to spot germs early.")
    workflow = create(http, auth)
    resp = http.post(f"/v1/workflows/{workflow['id']}/runs", headers=auth,
                     json={"input": {"topic": "vaccines", "audience": "children"}})
    assert resp.status_code == 200, resp.text
    run = resp.json()

    assert run["status"] == "completed" and run["workflowId"] == workflow["id"]
    assert run["input"] == {"topic": "vaccines", "audience": "children"}
    assert run["output"]["brief"] == "Vaccines teach the body to spot germs early."
    assert run["output"]["bullets"] and run["output"]["outline"]["title"]
    usage = run["usage"]
    assert set(usage["nodes"]) == {"outline", "bullets", "brief"}
    assert usage["nodes"]["bullets"]["calls"] == 0 and usage["nodes"]["brief"]["calls"] == 1
    assert usage["totalTokens"] == sum(n["totalTokens"] for n in usage["nodes"].values()) > 0

    assert http.get(f"/v1/workflows/runs/{run['id']}", headers=auth).json() == run
    runs = http.get(f"/v1/workflows/{workflow['id']}/runs", headers=auth).json()
    assert runs["count"] == 1 and runs["data"][0]["id"] == run["id"]
    rows = list(sync_db.usage.find({"requestId": run["id"]}))
    assert [(r["mode"], r["model"], r["calls"]) for r in rows] == [("workflow", "openai:gpt-4o-mini", 2)]


def test_an_omitted_input_runs_the_sample_input(http, auth):
    workflow = create(http, auth)
    run = http.post(f"/v1/workflows/{workflow['id']}/runs", headers=auth).json()
    assert run["status"] == "completed"
    assert run["input"]["topic"] == load_example("outline-brief")["sampleInput"]["topic"]


@pytest.mark.parametrize(("input_", "path", "message"), [
    ({"topic": "x", "tone": "dry"}, "input.tone", "unknown state key 'tone'"),
    ({"topic": 42}, "input.topic", "expected string, got integer"),
    ({"audience": "kids"}, "input.topic", "missing required input 'topic'"),
])
def test_input_that_does_not_fit_the_state_is_422_naming_the_key(http, auth, sync_db, input_, path, message):
    workflow = create(http, auth)
    for url in (f"/v1/workflows/{workflow['id']}/runs", f"/v1/workflows/{workflow['id']}/runs/stream"):
        resp = http.post(url, headers=auth, json={"input": input_})
        assert resp.status_code == 422, resp.text
        body = resp.json()
        assert body["code"] == "invalid_input"
        assert [(e["path"], e["message"].split(";")[0]) for e in body["errors"]] == [(path, message)]
    assert sync_db.workflow_runs.count_documents({}) == 0


def test_a_run_request_with_unknown_fields_is_422(http, auth):
    workflow = create(http, auth)
    resp = http.post(f"/v1/workflows/{workflow['id']}/runs", headers=auth, json={"inputs": {"topic": "x"}})
    assert resp.status_code == 422 and "inputs" in resp.json()["error"]


def stream(http, auth, url, body) -> tuple[httpx.Response, list]:
    with http.stream("POST", url, headers=auth, json=body) as resp:
        text = resp.read().decode()
    return resp, sse_events(text)


def test_streamed_run_events_come_in_order(http, auth, llm):
    workflow = create(http, auth)
    resp, events = stream(http, auth, f"/v1/workflows/{workflow['id']}/runs/stream", {"input": {"topic": "tides"}})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")

    ids = [i for _, _, i in events]
    assert ids == list(range(1, len(events) + 1))
    names = [(name, data.get("node")) for name, data, _ in events if name != "chunk"]
    assert names == [("run_start", None),
                     ("node_start", "outline"), ("node_end", "outline"),
                     ("node_start", "bullets"), ("node_end", "bullets"),
                     ("node_start", "brief"), ("node_end", "brief"),
                     ("done", None)]
    chunks = [(i, data) for i, (name, data, _) in enumerate(events) if name == "chunk"]
    assert chunks and {d["node"] for _, d in chunks} == {"brief"}
    start = next(i for i, (n, d, _) in enumerate(events) if n == "node_start" and d["node"] == "brief")
    end = next(i for i, (n, d, _) in enumerate(events) if n == "node_end" and d["node"] == "brief")
    assert all(start < i < end for i, _ in chunks)

    run_id = events[0][1]["runId"]
    node_end = next(d for n, d, _ in events if n == "node_end" and d["node"] == "brief")
    assert node_end["keys"] == ["brief"] and node_end["output"]["brief"] == "".join(d["content"] for _, d in chunks)
    assert node_end["usage"]["calls"] == 1
    done = events[-1][1]
    assert done["runId"] == run_id and done["state"]["brief"] == node_end["output"]["brief"]
    assert set(done["usage"]["nodes"]) == {"outline", "bullets", "brief"}
    stored = http.get(f"/v1/workflows/runs/{run_id}", headers=auth).json()
    assert stored["status"] == "completed" and stored["output"] == done["state"]


def test_an_inline_workflow_streams_and_an_invalid_one_is_refused_before_streaming(http, auth):
    document = load_example("tagline-loop")
    resp, events = stream(http, auth, "/v1/workflows/runs/stream", {"workflow": document, "input": {"product": "tea"}})
    assert resp.status_code == 200
    assert events[0][0] == "run_start" and events[0][1]["workflowId"] is None
    assert events[-1][0] == "done" and events[-1][1]["state"]["product"] == "tea"

    document["nodes"][0]["type"] = "magic"
    bad = http.post("/v1/workflows/runs/stream", headers=auth, json={"workflow": document})
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "nodes[0].type"
    assert http.post("/v1/workflows/runs/stream", headers=auth, json={"input": {}}).status_code == 422

    run = http.post("/v1/workflows/runs", headers=auth, json={"workflow": load_example("tagline-loop")}).json()
    assert run["status"] == "completed" and run["workflowName"] == "Draft and review until approved"


def test_a_failing_node_is_a_502_or_an_error_event_and_the_run_is_stored_failed(http, auth, llm):
    llm.script(match="Write a brief", status=500)
    workflow = create(http, auth)
    resp = http.post(f"/v1/workflows/{workflow['id']}/runs", headers=auth, json={"input": {"topic": "x"}})
    assert resp.status_code == 502
    body = resp.json()
    assert body["code"] == "workflow_failed" and body["node"] == "brief"
    assert body["error"] == "At node 'brief': the model failed (HTTP 500: Scripted error 500.)"
    stored = http.get(f"/v1/workflows/runs/{body['runId']}", headers=auth).json()
    assert stored["status"] == "failed" and stored["failedNode"] == "brief" and stored["output"] is None
    assert stored["usage"]["nodes"]["outline"]["calls"] == 1  # what was spent before the failure is kept

    _, events = stream(http, auth, f"/v1/workflows/{workflow['id']}/runs/stream", {"input": {"topic": "x"}})
    assert [name for name, _, _ in events if name != "chunk"] == [
        "run_start", "node_start", "node_end", "node_start", "node_end", "node_start", "error"]
    error = events[-1][1]
    assert error["node"] == "brief" and error["code"] == "workflow_failed" and error["runId"]


def test_a_value_missing_at_run_time_is_422(http, auth):
    document = load_example("outline-brief")
    document["state"]["topic"]["required"] = False
    resp = http.post("/v1/workflows/runs", headers=auth, json={"workflow": document, "input": {}})
    assert resp.status_code == 422
    assert resp.json()["code"] == "invalid_input" and resp.json()["node"] == "outline"
    assert "state key 'topic' has no value" in resp.json()["error"]


def test_workspace_agents_need_agents_in_the_workspace(http, auth):
    document = load_example("roundtable-decision")
    document["nodes"][0]["config"]["agents"] = "workspace"
    resp = http.post("/v1/workflows/runs", headers=auth, json={"workflow": document})
    assert resp.status_code == 422, resp.text
    assert resp.json() == {"error": "No agents found. Please create agents first.", "code": "no_agents"}


def test_an_exhausted_allowance_refuses_the_run(http, auth, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 0.0, "allowanceTokens": 0})
    workflow = create(http, auth)
    resp = http.post(f"/v1/workflows/{workflow['id']}/runs", headers=auth, json={"input": {"topic": "x"}})
    assert resp.status_code == 402 and resp.json()["code"] == "allowance_exhausted"


def test_a_run_takes_its_tokens_from_the_allowance(http, auth, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 0.0, "allowanceTokens": 100000})
    workflow = create(http, auth)
    run = http.post(f"/v1/workflows/{workflow['id']}/runs", headers=auth, json={"input": {"topic": "x"}}).json()
    left = sync_db.workspaces.find_one({"_id": "ws1"})["allowanceTokens"]
    assert left == 100000 - run["usage"]["totalTokens"]


def test_a_thousand_node_workflow_is_validated_and_stored(http, auth):
    nodes = [{"id": f"n{i}", "type": "llm", "inputs": {"prompt": "Go on from {text}"}, "output_key": "text"}
             for i in range(1000)]
    document = {"name": "long", "state": {"text": {"type": "string"}}, "nodes": nodes, "entry": "n0",
                "edges": [{"from": f"n{i}", "to": f"n{i + 1}"} for i in range(999)], "finish": ["n999"]}
    checked = http.post("/v1/workflows/validate", headers=auth, json=document)
    assert checked.status_code == 200 and checked.json()["valid"] is True, checked.text
    assert create(http, auth, document)["name"] == "long"


def test_an_event_too_large_to_store_fails_its_run_loudly(http, auth, llm, sync_db, monkeypatch):
    """An event page over MongoDB's 16 MB was once dropped silently: an event larger than a page of events may be is
    stored without its data and its run fails with `event_too_large` (the page size lowered here to 4 KB, so that
    the node's 6 KB answer in its `node_end` event is too large)."""
    monkeypatch.setattr("parley.store.runs.MAX_EVENT_PAGE_BYTES", 4096)
    llm.script(reply="word " * 1200)
    document = {"version": 1, "name": "Long answer", "state": {"q": {"type": "string"}, "a": {"type": "string"}},
                "nodes": [{"id": "a", "type": "llm", "inputs": {"prompt": "{q}"}, "output_key": "a"}],
                "edges": [], "entry": "a", "finish": ["a"]}
    resp = http.post("/v1/workflows/runs", headers=auth, json={"workflow": document, "input": {"q": "Talk."}})
    assert resp.status_code == 500, resp.text
    body = resp.json()
    assert body["code"] == "event_too_large" and "more than a page of events holds (4,096)" in body["error"], body
    run = http.get(f"/v1/runs/{body['runId']}", headers=auth).json()
    assert run["status"] == "failed" and run["error"]["code"] == "event_too_large"
    stored = [e for page in sync_db.run_events.find({"runId": body["runId"]}) for e in page.get("events", [])]
    ended = [e for e in stored if e["event"] == "node_end"]
    assert len(ended) == 1 and "omitted" in ended[0]["data"]  # kept in order, without its data
    assert stored[-1]["event"] == "error"


def test_a_run_asking_for_the_response_cache_answers_its_temperature_0_calls_from_it(http, auth, llm, sync_db):
    document = load_example("outline-brief")
    for node in document["nodes"]:
        if node["type"] == "llm":
            node["config"]["temperature"] = 0
    workflow = create(http, auth, document)
    body = {"input": {"topic": "vaccines", "audience": "children"}, "responseCache": True}
    first = http.post(f"/v1/workflows/{workflow['id']}/runs", headers=auth, json=body)
    assert first.status_code == 200, first.text
    asked = len(llm.requests)
    assert asked == 2
    second = http.post(f"/v1/workflows/{workflow['id']}/runs", headers=auth, json=body).json()
    assert len(llm.requests) == asked  # both calls came from the cache
    assert second["output"] == first.json()["output"]
    assert second["usage"]["costUsd"] == 0 and second["usage"]["totalTokens"] == first.json()["usage"]["totalTokens"]
    plain = http.post(f"/v1/workflows/{workflow['id']}/runs", headers=auth, json={**body, "responseCache": False})
    assert plain.status_code == 200 and len(llm.requests) == asked + 2
    refused = http.post(f"/v1/workflows/{workflow['id']}/runs", headers=auth, json={**body, "responseCache": "yes"})
    assert refused.status_code in (400, 422)
