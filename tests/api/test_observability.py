"""`GET /metrics` and run tracing, driven by real requests against the scripted model server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from parley.designer import load_example
from tests.support.duel import script_duel
from tests.support.sse import iter_sse
from tests.support.wait import eventually

REPO_ROOT = Path(__file__).resolve().parents[2]
DUEL = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 1}
MODEL = "openai:gpt-4o-mini"  # the default model with the scripted endpoint configured


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


Samples = dict[tuple[str, frozenset], float]


def scrape(http: httpx.Client) -> Samples:
    resp = http.get("/metrics")  # no key: like /healthz
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(resp.text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; the sum of the samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in samples.items() if n == name and wanted <= got)


# --- metrics --------------------------------------------------------------------------------


def test_a_duel_moves_the_run_model_token_and_latency_metrics(http, make_key, llm, sync_db):
    script_duel(llm)
    before = scrape(http)
    resp = http.post("/api/debate", json=DUEL, headers=auth(make_key(["debate"])))
    assert resp.status_code == 200 and "event: done" in resp.text
    after = scrape(http)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("parley_runs_total", kind="duel", status="completed") == 1
    calls = len(llm.requests)  # every request the model server answered is one model call
    assert calls >= 5  # opponent, two turns, two judges
    assert delta("parley_model_calls_total", model=MODEL, outcome="ok") == calls
    assert delta("parley_model_latency_seconds_count", model=MODEL) == calls
    assert delta("parley_model_time_to_first_token_seconds_count", model=MODEL) == calls
    assert 0 < delta("parley_model_time_to_first_token_seconds_sum", model=MODEL) <= delta(
        "parley_model_latency_seconds_sum", model=MODEL)
    # The same tokens and cost as the debate's usage rows.
    rows = list(sync_db.usage.find({"mode": "duel"}))
    assert delta("parley_model_tokens_total", model=MODEL, direction="input") == sum(r["inputTokens"] for r in rows)
    assert delta("parley_model_tokens_total", model=MODEL, direction="output") == sum(r["outputTokens"] for r in rows)
    assert delta("parley_model_cost_usd_total", model=MODEL) == pytest.approx(sum(r["costUsd"] for r in rows))
    assert sum(r["costUsd"] for r in rows) > 0


def test_a_failed_duel_counts_as_failed_with_the_model_error(http, make_key, llm):
    script_duel(llm, opponent_turn={"status": 500})
    before = scrape(http)
    assert "event: error" in http.post("/api/debate", json=DUEL, headers=auth(make_key(["debate"]))).text
    after = scrape(http)
    assert value(after, "parley_runs_total", kind="duel", status="failed") - value(
        before, "parley_runs_total", kind="duel", status="failed") == 1
    assert value(after, "parley_model_calls_total", model=MODEL, outcome="error") > value(
        before, "parley_model_calls_total", model=MODEL, outcome="error")


def test_open_sse_listeners_are_counted_and_released_when_the_client_hangs_up(http, make_key, llm):
    script_duel(llm, opponent_turn={"hold": "opponent"})
    route = "/api/debate"
    base = value(scrape(http), "parley_sse_listeners", route=route)
    with http.stream("POST", route, json=DUEL, headers=auth(make_key(["debate"]))) as resp:
        events = iter_sse(resp.iter_lines())  # kept: dropping the iterator would close the connection
        assert next(events).event == "init"
        llm.wait_held("opponent")  # the debate is mid-way, its stream open
        assert value(scrape(http), "parley_sse_listeners", route=route) == base + 1
    # The client hung up mid-debate; the gauge comes back down once the server notices.
    eventually(lambda: value(scrape(http), "parley_sse_listeners", route=route) == base, "listener released")
    llm.release("opponent")


def test_a_panel_stream_is_a_listener_and_a_run(parley_env, make_key, llm, sync_db):
    from parley.api.main import create_app
    from tests.support.servers import ServerThread

    parley_env.parley_debate_models = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]
    parley_env.parley_arbitrator_model = "anthropic:claude-opus-4-5"
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(model="claude-opus-4-5", reply="The arbitrated answer.", hold="arbitrator")
    route = "/v1/chat/completions"
    body = {"model": "router/debate", "messages": [{"role": "user", "content": "CAP?"}], "stream": True}
    with ServerThread(create_app(parley_env)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        before = scrape(http)
        with http.stream("POST", route, json=body, headers=auth(make_key(["chat"]))) as resp:
            lines = resp.iter_lines()
            llm.wait_held("arbitrator")
            assert value(scrape(http), "parley_sse_listeners", route=route) == value(
                before, "parley_sse_listeners", route=route) + 1
            llm.release("arbitrator")
            assert any(line == "data: [DONE]" for line in lines)
        eventually(lambda: value(scrape(http), "parley_sse_listeners", route=route) == value(
            before, "parley_sse_listeners", route=route), "listener released")
        after = scrape(http)
    assert value(after, "parley_runs_total", kind="panel", status="completed") - value(
        before, "parley_runs_total", kind="panel", status="completed") == 1
    opus = "anthropic:claude-opus-4-5"
    assert value(after, "parley_model_calls_total", model=opus, outcome="ok") - value(
        before, "parley_model_calls_total", model=opus, outcome="ok") == 1
    # Streamed: its first token came before its last.
    assert value(after, "parley_model_time_to_first_token_seconds_count", model=opus) > value(
        before, "parley_model_time_to_first_token_seconds_count", model=opus)


def test_rate_limit_refusals_are_counted_by_route(http, make_key):
    key = make_key(["debate"])
    before = value(scrape(http), "parley_rate_limit_refusals_total", route="debate")
    statuses = [http.post("/api/debate", json={"topic": "x"}, headers=auth(key)).status_code for _ in range(9)]
    assert statuses == [400] * 8 + [429]
    assert value(scrape(http), "parley_rate_limit_refusals_total", route="debate") == before + 1


def test_round_table_and_workflow_runs_are_counted(http, make_key, llm):
    key = make_key(["conversations", "workflows"])
    before = scrape(http)
    http.post("/v1/agents", json={"name": "Claire", "role": "Finance"}, headers=auth(key)).raise_for_status()
    conversation = http.post("/v1/conversations", json={"title": "Lyon?"}, headers=auth(key)).json()["conversation"]
    resp = http.post(f"/v1/conversations/{conversation['id']}/message", json={"content": "Open now?"},
                     headers=auth(key))
    assert resp.status_code == 200, resp.text
    run = http.post("/v1/workflows/runs", headers=auth(key),
                    json={"workflow": load_example("outline-brief"), "input": {"topic": "tides"}})
    assert run.status_code == 200 and run.json()["status"] == "completed"
    after = scrape(http)
    for kind in ("roundtable", "workflow"):
        assert value(after, "parley_runs_total", kind=kind, status="completed") - value(
            before, "parley_runs_total", kind=kind, status="completed") == 1


def test_multiprocess_mode_sums_every_worker(tmp_path):
    """With PROMETHEUS_MULTIPROC_DIR set, what each worker process records shows in any worker's /metrics."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}
    record = ("from core.metrics import record_run, sse_listener\n"
              "record_run('duel', 'completed')\n"
              "with sse_listener('/api/debate'):\n    pass\n")
    for _ in range(2):  # two workers, one after the other
        subprocess.run([sys.executable, "-c", record], env=env, check=True, cwd=REPO_ROOT)
    show = "from core.metrics import render\nprint(render()[0].decode())"
    text = subprocess.run([sys.executable, "-c", show], env=env, check=True, cwd=REPO_ROOT, capture_output=True,
                          text=True).stdout
    samples = {(s.name, frozenset(s.labels.items())): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert value(samples, "parley_runs_total", kind="duel", status="completed") == 2
    assert value(samples, "parley_sse_listeners", route="/api/debate") == 0


# --- traces ---------------------------------------------------------------------------------


def chat_model_spans(spans) -> list:
    found = [s for s in spans.spans if s.kind == "chat_model"]
    assert found, "no model call was traced"
    return found


def test_every_model_call_of_a_duel_carries_its_run_id(http, make_key, llm, spans):
    script_duel(llm)
    resp = http.post("/api/debate", json=DUEL, headers=auth(make_key(["debate"])))
    debate_id = resp.headers["x-debate-id"]
    calls = chat_model_spans(spans)
    assert len(calls) == len(llm.requests)
    assert all(s.metadata.get("parley_run_id") == debate_id for s in calls)
    assert all(s.metadata["parley_kind"] == "duel" and s.metadata["parley_workspace"] == "ws1"
               and s.metadata["parley_user"] == "alice" and "parley:duel" in s.tags for s in calls)
    # One trace: every model call sits under the run's root span, named after the mode.
    roots = [s for s in spans.spans if s.parent_run_id is None]
    assert [s.name for s in roots] == ["parley.duel"]
    assert {root_of(spans, s).run_id for s in calls} == {roots[0].run_id}


def root_of(spans, span):
    by_id = {s.run_id: s for s in spans.spans}
    while span.parent_run_id is not None:
        span = by_id[span.parent_run_id]
    return span


def test_panel_round_table_and_workflow_runs_are_traced_with_their_ids(parley_env, make_key, llm, sync_db, spans):
    from parley.api.main import create_app
    from tests.support.servers import ServerThread

    parley_env.parley_debate_models = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]
    parley_env.parley_arbitrator_model = "anthropic:claude-opus-4-5"
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    key = make_key(["chat", "conversations", "workflows"])
    with ServerThread(create_app(parley_env)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        completion = http.post("/v1/chat/completions", headers=auth(key), json={
            "model": "router/debate", "messages": [{"role": "user", "content": "CAP?"}]})
        panel = chat_model_spans(spans)
        assert len(panel) == 4 and {s.metadata.get("parley_run_id") for s in panel} == {
            completion.headers["x-run-id"]}
        spans.clear()

        http.post("/v1/agents", json={"name": "Claire"}, headers=auth(key)).raise_for_status()
        conversation = http.post("/v1/conversations", json={"title": "Lyon?"}, headers=auth(key)).json()
        asked = http.post(f"/v1/conversations/{conversation['conversation']['id']}/message",
                          json={"content": "Open now?"}, headers=auth(key))
        asked.raise_for_status()
        table = chat_model_spans(spans)
        assert {s.metadata.get("parley_run_id") for s in table} == {asked.headers["x-run-id"]}
        assert {s.metadata["parley_kind"] for s in table} == {"roundtable"}
        spans.clear()

        run = http.post("/v1/workflows/runs", headers=auth(key),
                        json={"workflow": load_example("outline-brief"), "input": {"topic": "tides"}})
        flow = chat_model_spans(spans)
        assert {s.metadata.get("parley_run_id") for s in flow} == {run.headers["x-run-id"]}
        assert [s.name for s in spans.spans if s.parent_run_id is None] == ["parley.workflow"]
