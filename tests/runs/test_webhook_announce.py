"""A run event is stored for the webhooks before the run's status is written (docs/webhooks.md, "At least once"):
a worker that dies between the two writes (here: the status write fails, as it would were the worker killed there)
leaves the run to be resumed once its lease runs out, and the resumed run announces the same event under the same
delivery id, sent once its status is stored; a delivery of an event the resumed run never reached (it ended
otherwise) is set `void` and never sent. One Parley in-process, a real database, a verifying receiver."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from pymongo.errors import AutoReconnect

from parley.api.main import create_app
from parley.core.settings import get_settings
from parley.store import runs as run_store
from tests.support.servers import ServerThread
from tests.support.wait import eventually
from tests.support.webhooks import REVIEWED, auth, receiver  # noqa: F401 (the fixture)
from tests.support.workers import FAST_FAILOVER



@pytest.fixture
def hooked(parley_env, monkeypatch, receiver) -> Iterator[httpx.Client]:
    """Parley allowing webhooks to the receiver, with leases of two seconds (a run whose worker stopped executing
    it is resumed within seconds)."""
    for name, value in FAST_FAILOVER.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PARLEY_WEBHOOK_URLS", receiver.url("/hooks"))
    monkeypatch.setenv("PARLEY_WEBHOOK_POLL", "0.05")
    get_settings.cache_clear()
    with ServerThread(create_app(get_settings())) as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


class CrashAt:
    """Make the first call of one of `store.runs`' status writes fail, as a worker killed just before it would:
    noting how many deliveries of the run were stored by then, and what the run's record said."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, sync_db, *, then=None) -> None:
        self.real, self.sync_db, self.then = getattr(run_store, name), sync_db, then
        self.stored_first: list[list[str]] = []
        monkeypatch.setattr(run_store, name, self)

    async def __call__(self, db, **fields):
        if self.stored_first:
            return await self.real(db, **fields)
        run_id = fields["run_id"]
        self.stored_first.append(sorted(d["event"] for d in self.sync_db.webhook_deliveries.find({"runId": run_id})))
        if self.then is not None:
            await self.then(db, run_id)
        raise AutoReconnect("the worker died before it wrote the run's status")


def start(http: httpx.Client, key: str) -> str:
    """Start the workflow; its id (the request, which waits for the run, answers an error when its execution here
    stops: the run goes on elsewhere)."""
    resp = http.post("/v1/workflows/runs", json={"workflow": REVIEWED, "input": {"topic": "Lyon"}},
                     headers=auth(key))
    return resp.json().get("runId") or resp.json()["id"]


def status(http: httpx.Client, key: str, run_id: str) -> str:
    return http.get(f"/v1/runs/{run_id}", headers=auth(key)).json()["status"]


def test_an_event_whose_status_write_failed_is_delivered_once_the_resumed_run_stores_it(
        hooked, receiver, make_key, sync_db, monkeypatch):
    key = make_key(["admin"])
    hook = hooked.post("/v1/webhooks", json={"url": receiver.url()}, headers=auth(key)).json()["webhook"]
    parked = CrashAt(monkeypatch, "park", sync_db)
    finished = CrashAt(monkeypatch, "finish", sync_db)

    run_id = start(hooked, key)
    eventually(lambda: status(hooked, key, run_id) == "waiting", "the resumed run parks", timeout=30)
    assert parked.stored_first == [["run.waiting"]]  # stored before the wait was (and the wait then failed)
    waiting = receiver.got(1, "its wait reaches the receiver")[0]
    assert waiting.json()["type"] == "run.waiting" and waiting.json()["data"]["waiting"]["at"] == "review"

    answered = hooked.post(f"/v1/runs/{run_id}/input", json={"action": "continue"}, headers=auth(key))
    assert answered.status_code in (200, 202), answered.text
    eventually(lambda: status(hooked, key, run_id) == "completed", "the resumed run completes", timeout=30)
    assert finished.stored_first == [["run.completed", "run.waiting"]]
    got = receiver.got(2, "its end reaches the receiver")
    eventually(lambda: sync_db.webhook_deliveries.count_documents({"runId": run_id, "status": "delivered"}) == 2,
               "both deliveries are recorded")

    assert [d.json()["type"] for d in got] == ["run.waiting", "run.completed"]
    assert len({d.id for d in got}) == 2 and all(d.verifies(hook["secret"]) for d in got)
    stored = list(sync_db.webhook_deliveries.find({"runId": run_id}))
    assert sorted(d["_id"] for d in stored) == sorted(d.id for d in got)  # announced twice each, stored once
    assert all(d["attemptCount"] == 1 for d in stored)
    assert len(receiver.deliveries) == 2


def test_an_event_the_resumed_run_never_reached_is_void_and_never_sent(hooked, receiver, make_key, sync_db,
                                                                         monkeypatch):
    key = make_key(["admin"])
    hooked.post("/v1/webhooks", json={"url": receiver.url()}, headers=auth(key))

    async def cancel_meanwhile(db, run_id: str) -> None:  # a cancel comes while the worker dies
        record, asked = await run_store.request_cancel(db, run_id=run_id)
        assert asked and record["status"] == "running"

    parked = CrashAt(monkeypatch, "park", sync_db, then=cancel_meanwhile)
    run_id = start(hooked, key)
    eventually(lambda: status(hooked, key, run_id) == "cancelled", "the resumed run ends cancelled", timeout=30)
    assert parked.stored_first == [["run.waiting"]]
    got = receiver.got(1, "the cancel reaches the receiver")
    eventually(lambda: sync_db.webhook_deliveries.find_one({"runId": run_id, "event": "run.waiting"})["status"]
               == "void", "the wait's delivery is void")

    void = sync_db.webhook_deliveries.find_one({"runId": run_id, "event": "run.waiting"})
    assert void["attemptCount"] == 0 and void["voidReason"].startswith("run_ended: the run ended cancelled")
    assert [d.json()["type"] for d in got] == ["run.cancelled"] and len(receiver.deliveries) == 1
    shown = hooked.get(f"/v1/webhooks/deliveries/{void['_id']}", headers=auth(key)).json()["delivery"]
    assert shown["status"] == "void" and shown["voidReason"] == void["voidReason"]
    replay = hooked.post(f"/v1/webhooks/deliveries/{void['_id']}/replay", headers=auth(key))
    assert replay.status_code == 409 and replay.json()["code"] == "delivery_void"
    listed = hooked.get("/v1/webhooks/deliveries", params={"status": "void"}, headers=auth(key)).json()["data"]
    assert [d["id"] for d in listed] == [void["_id"]]
