"""`parley_db_operations_total` and `parley_db_bytes_total`: what each request asks of the database, counted by
the command listener on every client Parley builds (its own, the checkpointer's, the rate limiter's)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from parley import store
from parley.api.main import create_app
from parley.store.monitor import COLLECTIONS, COMMANDS, OTHER
from tests.api.test_observability import DUEL, auth, scrape
from tests.support.duel import script_duel
from tests.support.servers import ServerThread, run_sync

REPO_ROOT = Path(__file__).resolve().parents[2]
PANEL = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]


def deltas(before, after, name: str) -> dict[frozenset, float]:
    return {labels: v - before.get((n, labels), 0.0) for (n, labels), v in after.items()
            if n == name and v - before.get((n, labels), 0.0) > 0}


def ops(before, after) -> dict[tuple[str, str], float]:
    return {(dict(k)["collection"], dict(k)["command"]): v
            for k, v in deltas(before, after, "parley_db_operations_total").items()}


def bytes_moved(before, after) -> dict[tuple[str, str, str], float]:
    return {(dict(k)["collection"], dict(k)["command"], dict(k)["direction"]): v
            for k, v in deltas(before, after, "parley_db_bytes_total").items()}


def assert_bounded(samples) -> None:
    for (name, labels) in samples:
        if name.startswith("parley_db_"):
            found = dict(labels)
            assert found["collection"] in COLLECTIONS | {OTHER}, found
            assert found["command"] in COMMANDS | {OTHER}, found
            assert found.get("direction", "sent") in ("sent", "received"), found


def test_a_duel_counts_the_writes_of_its_run_its_events_its_turns_and_its_rate_limit(http, make_key, llm):
    script_duel(llm)
    key = make_key(["debate"])
    before = scrape(http)
    resp = http.post("/api/debate", json=DUEL, headers=auth(key))
    assert resp.status_code == 200 and "event: done" in resp.text
    after = scrape(http)
    counted = ops(before, after)
    assert counted[("runs", "insert")] == 1  # the run record (store.runs.create_run)
    assert counted[("runs", "update")] >= 1  # at least its end (store.runs.finish)
    assert counted[("debates", "insert")] == 1
    # Its opponent and each turn are its run's events (a duel's checkpoint); the record is written at its end.
    assert counted[("debates", "update")] == 1
    assert counted[("run_events", "insert")] >= 1
    assert not any(c == "run_checkpoints" for c, _ in counted)  # no LangGraph checkpoint
    assert counted[("ratelimit_windows", "update")] >= 1  # the rate limiter's hit
    moved = bytes_moved(before, after)
    # Every event of the debate went out in run_events inserts: at least the transcript's text.
    assert moved[("run_events", "insert", "sent")] > len(resp.text) / 2
    assert moved[("run_events", "insert", "received")] > 0
    assert_bounded(after)


def test_a_panel_request_counts_its_run_and_usage_and_saves_no_checkpoint(parley_env, make_key, llm, sync_db):
    parley_env.parley_debate_models = list(PANEL)
    parley_env.parley_arbitrator_model = "anthropic:claude-opus-4-5"
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    body = {"model": "router/debate", "messages": [{"role": "user", "content": "CAP?"}]}
    with ServerThread(create_app(parley_env)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        key = make_key(["chat"])
        before = scrape(http)
        resp = http.post("/v1/chat/completions", json=body, headers=auth(key))
        assert resp.status_code == 200, resp.text
        after = scrape(http)
    counted = ops(before, after)
    assert counted[("runs", "insert")] == 1
    assert counted[("run_events", "insert")] >= 1  # its events, and the usage of its four model calls in their pages
    assert counted[("usage", "insert")] == 1  # the request's billing rows
    assert not any(c == "run_checkpoints" for c, _ in counted)  # it starts over after a crash
    assert counted[("api_keys", "find")] >= 1  # the caller's key
    assert sum(v for (c, _), v in counted.items() if c == "workspaces") >= 1  # credit reserved and settled
    # No webhook URL is allowed (PARLEY_WEBHOOK_URLS, empty by default): its end is announced to no one, unread.
    assert not any(c in ("webhooks", "webhook_deliveries") for c, _ in counted), counted
    moved = bytes_moved(before, after)
    assert moved[("run_events", "insert", "sent")] > 0 and moved[("runs", "insert", "sent")] > 0
    assert_bounded(after)


def test_a_collection_parley_does_not_know_counts_as_other(http, parley_env):
    """Labels stay bounded whatever collection a command names."""
    before = scrape(http)

    async def write() -> None:
        client, db = store.connect(parley_env.mongodb_uri, parley_env.mongodb_db)
        try:
            await db["not_parleys_" + "x" * 8].insert_one({"a": 1})
            await db.command("ping")
        finally:
            await client.close()

    run_sync(write)
    after = scrape(http)
    counted = ops(before, after)
    assert counted[(OTHER, "insert")] == 1
    assert counted[(OTHER, OTHER)] >= 1  # ping names no collection
    assert not any("not_parleys" in str(labels) for _, labels in after)
    assert_bounded(after)


def test_every_collection_the_store_names_is_a_label():
    """A new collection in store/*.py is counted under its own name, not `other`."""
    named = set()
    for path in (REPO_ROOT / "store").glob("*.py"):
        named.update(re.findall(r"\bdb\.([a-z_]+)\.", path.read_text()))
        named.update(re.findall(r'\bdb\["([a-z_]+)"\]', path.read_text()))
    named.update(collection for collection, _, _ in store.INDEXES)
    assert named and named <= COLLECTIONS, named - COLLECTIONS


@pytest.mark.parametrize("name", ["ratelimit_counters", "ratelimit_windows"])
def test_the_rate_limiters_collections_are_labels(name):
    assert name in (REPO_ROOT / "api" / "ratelimit.py").read_text() and name in COLLECTIONS
