"""Every query Parley sends while it serves runs seeks through an index: none scans a collection that grows
with the runs stored (issue 16: "with many stored runs 50 concurrent requests took 89x one").

The filters are the ones Parley really sends (captured by a command listener during a duel, a panel
request, a round-table question and the engine's tending: lease renewals (which read cancel requests too),
take-over looks, checkpoint saves and deletion), checked against the indexes the database really holds (Parley's `store.INDEXES`, the run
checkpointer's among them, the rate limiter's): a filter is covered when the first field of some index is constrained by
it (equality, `$in` or a range), as MongoDB needs to bound an index scan. The embedded server's
`explain` is not used: it reports COLLSCAN even for `{_id: ...}` updates.
"""

from __future__ import annotations

import httpx
from pymongo import MongoClient, monitoring

from parley.api.main import create_app
from tests.api.test_observability import DUEL, auth
from tests.support.duel import script_duel
from tests.support.servers import ServerThread
from tests.support.wait import eventually

PANEL = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]
SEEKING = {"$eq", "$in", "$lt", "$lte", "$gt", "$gte"}
# Queries that may scan: none of them runs per request or per poll.
ALLOWED_SCANS: set[tuple[str, str]] = set()


class FilterRecorder(monitoring.CommandListener):
    """The (collection, filter) of every read, update and delete sent while `on` (registered for the session:
    pymongo has no way to unregister a listener)."""

    def __init__(self) -> None:
        self.on, self.db = False, ""
        self.filters: list[tuple[str, str, dict]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if not self.on or event.database_name != self.db:
            return
        cmd, name = event.command, event.command_name
        if name == "find":
            self.filters.append((cmd["find"], name, cmd.get("filter", {})))
        elif name == "findAndModify":
            self.filters.append((cmd["findAndModify"], name, cmd.get("query", {})))
        elif name == "update":
            self.filters.extend((cmd["update"], name, u["q"]) for u in cmd.get("updates", []))
        elif name == "delete":
            self.filters.extend((cmd["delete"], name, d["q"]) for d in cmd.get("deletes", []))
        elif name == "aggregate" and cmd.get("pipeline") and "$match" in cmd["pipeline"][0]:
            self.filters.append((cmd["aggregate"], name, cmd["pipeline"][0]["$match"]))
        elif name == "count":
            self.filters.append((cmd["count"], name, cmd.get("query", {})))

    def succeeded(self, event) -> None: ...

    def failed(self, event) -> None: ...


RECORDER = FilterRecorder()
monitoring.register(RECORDER)


def seeks(condition: object) -> bool:
    """Whether a field's condition bounds an index scan (an equality, `$in` or a range)."""
    if not isinstance(condition, dict) or not condition or not all(str(k).startswith("$") for k in condition):
        return True  # a plain value: equality
    return bool(SEEKING & set(condition))


def covered(query: dict, indexes: list[list[str]]) -> bool:
    fields = {field for field, condition in query.items() if not field.startswith("$") and seeks(condition)}
    for clause in query.get("$and", []):
        fields |= {f for f, c in clause.items() if not f.startswith("$") and seeks(c)}
    return any(keys[0] in fields for keys in indexes)


def test_every_query_of_a_duel_a_panel_request_a_round_table_and_the_engine_seeks_an_index(
        parley_env, make_key, llm, sync_db):
    parley_env.parley_debate_models = list(PANEL)
    parley_env.parley_arbitrator_model = "anthropic:claude-opus-4-5"
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    script_duel(llm)
    chat, debate, table = make_key(["chat"]), make_key(["debate"]), make_key(["conversations"])
    RECORDER.filters.clear()
    RECORDER.db, RECORDER.on = parley_env.mongodb_db, True
    try:
        with ServerThread(create_app(parley_env)) as server, httpx.Client(base_url=server.url, timeout=60) as http:
            assert http.post("/api/debate", json=DUEL, headers=auth(debate)).status_code == 200
            body = {"model": "router/debate", "messages": [{"role": "user", "content": "CAP?"}]}
            assert http.post("/v1/chat/completions", json=body, headers=auth(chat)).status_code == 200
            http.post("/v1/agents", json={"name": "Claire", "role": "Finance"}, headers=auth(table)).raise_for_status()
            conversation = http.post("/v1/conversations", json={"title": "Lyon?"},
                                     headers=auth(table)).json()["conversation"]
            asked = http.post(f"/v1/conversations/{conversation['id']}/message", json={"content": "Open now?"},
                              headers=auth(table))
            assert asked.status_code == 200

            def replayed() -> bool:
                """A follower of an ended run reads its events from the database (the route's own follower
                read them from memory, as does one that comes while the run's execution is winding up)."""
                replay = http.get(f"/v1/runs/{asked.headers['X-Run-Id']}/events", headers=auth(table))
                assert replay.status_code == 200 and "event:" in replay.text
                return ("run_events", "find") in kinds()

            # The engine's tending ran meanwhile (lease renewals, take-over looks), and the runs' checkpoints
            # are deleted once they end.
            kinds = lambda: {(c, n) for c, n, _ in RECORDER.filters}  # noqa: E731
            eventually(replayed, "an ended run's events read from the database")
            eventually(lambda: {("runs", "update"), ("runs", "find"), ("run_checkpoints", "delete"),
                                ("run_checkpoints", "update"), ("run_events", "find")} <= kinds(), "the engine's queries")
    finally:
        RECORDER.on = False
    client = MongoClient(parley_env.mongodb_uri)
    try:
        db = client[parley_env.mongodb_db]
        indexes = {name: [list(ix["key"]) for ix in db[name].list_indexes()] for name in db.list_collection_names()}
    finally:
        client.close()
    assert len(RECORDER.filters) > 20
    scans = sorted({(collection, command, repr(query)) for collection, command, query in RECORDER.filters
                    if (collection, command) not in ALLOWED_SCANS and not covered(query, indexes.get(collection, []))})
    assert not scans, "\n".join(f"{c} {n}: {q}" for c, n, q in scans)


def test_the_coverage_rule_tells_a_seek_from_a_scan():
    runs = [["_id"], ["status", "leaseUntil"], ["workspace", "createdAt", "_id"]]
    assert covered({"_id": {"$in": ["a"]}, "cancelRequested": True}, runs)
    assert covered({"status": {"$in": ["queued"]}, "leaseUntil": {"$lt": 1}}, runs)
    assert not covered({"leaseUntil": {"$lt": 1}}, runs)  # the second field of an index bounds nothing alone
    assert not covered({"status": {"$ne": "completed"}}, runs)
    assert not covered({}, runs)
    assert not covered({"cancelRequested": True}, runs)
