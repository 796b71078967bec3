"""A webhook delivery outlives the worker sending it: killed mid-delivery (the receiver holding its request), its
delivery is sent again by another worker with the same `webhook-id`, so a receiver deduplicating on it gets each
event once (docs/webhooks.md). Two real `parley serve` processes on one database."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.support.wait import eventually
from tests.support.webhooks import Answer, auth, receiver  # noqa: F401 (the fixture)
from tests.support.workers import running_workers




@pytest.fixture
def hooked_workers(parley_env, tmp_path, receiver):
    env = {"PARLEY_WEBHOOK_URLS": receiver.url(), "PARLEY_WEBHOOK_TIMEOUT": "2", "PARLEY_WEBHOOK_POLL": "0.1",
           "PARLEY_WEBHOOK_RETRY_DELAY": "0.2"}
    with running_workers(tmp_path, env) as pair:
        yield pair


def test_a_worker_killed_mid_delivery_leaves_it_to_another_with_the_same_id(hooked_workers, receiver, make_key,
                                                                             sync_db):
    held = threading.Event()
    receiver.answers = [Answer(hold=held)]  # the first request is held until its sender is dead
    key = make_key(["admin"])
    first, second = hooked_workers
    hook = httpx.post(first.url + "/v1/webhooks", json={"url": receiver.url()}, headers=auth(key)).json()["webhook"]
    chat = {"model": "openai:scripted", "messages": [{"role": "user", "content": "Hi"}]}
    run_id = httpx.post(first.url + "/v1/chat/completions", json=chat, headers=auth(key), timeout=60).headers[
        "x-run-id"]

    receiver.got(1, "the first attempt reaches the receiver, which holds it")
    sender = sync_db.webhook_deliveries.find_one({"runId": run_id})["worker"]
    holder, survivor = (first, second) if first.named(sender) else (second, first)
    assert holder.named(sender)
    holder.kill()
    got = receiver.got(2, "the survivor sends the delivery again once its lease ends")
    held.set()

    assert got[0].id == got[1].id and got[0].body == got[1].body
    assert all(d.verifies(hook["secret"]) for d in got)
    eventually(lambda: sync_db.webhook_deliveries.find_one({"runId": run_id})["status"] == "delivered",
               "the survivor records the delivery")
    stored = sync_db.webhook_deliveries.find_one({"runId": run_id})
    assert survivor.named(stored["attempts"][-1]["worker"]) and stored["attempts"][-1]["statusCode"] == 200

    other = httpx.post(survivor.url + "/v1/chat/completions", json=chat, headers=auth(key), timeout=60).headers[
        "x-run-id"]
    receiver.got(3, "the next run's event")
    events = {d.id: (d.json()["type"], d.json()["data"]["runId"]) for d in receiver.deliveries}
    assert sorted(events.values()) == sorted([("run.completed", run_id), ("run.completed", other)])
