"""The webhook outbox (`store.webhooks`): a due delivery is claimed by one worker of several, held for its lease,
due again once the lease ends; an attempt recorded by a worker whose claim was taken over is logged but sets
nothing; a rotated-out secret stops signing when its grace ends."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from cryptography.fernet import Fernet

from parley.core import clock
from parley.core.sealing import Sealer
from parley.store import webhooks

SEALER = Sealer((Fernet.generate_key().decode(),))


async def _one_delivery(db) -> str:
    hook = await webhooks.insert_webhook(db, workspace="ws1", fields={"url": "http://127.0.0.1:9/h",
                                                                      "events": ["run.completed"], "kinds": None},
                                         secret=SEALER.seal("whsec_c2VjcmV0"))
    ids = await webhooks.enqueue(db, workspace="ws1", event="run.completed", kind="panel", run_id="run_1",
                                 body='{"type":"run.completed"}')
    assert len(ids) == 1 and hook["_id"]
    return ids[0]


async def test_of_workers_claiming_at_once_one_gets_each_delivery_until_its_lease_ends(db):
    delivery = await _one_delivery(db)
    claims = await asyncio.gather(*(webhooks.claim_due(db, worker=f"w{n}", lease_seconds=0.3, limit=5)
                                    for n in range(6)))
    assert sorted(len(c) for c in claims) == [0, 0, 0, 0, 0, 1]
    assert await webhooks.claim_due(db, worker="late", lease_seconds=30, limit=5) == []  # held by its lease
    await asyncio.sleep(0.35)
    again = await webhooks.claim_due(db, worker="next", lease_seconds=30, limit=5)
    assert [d["_id"] for d in again] == [delivery] and again[0]["claims"] == 2


async def test_an_attempt_of_a_claim_taken_over_is_logged_but_does_not_set_the_status(db):
    await _one_delivery(db)
    [stale] = await webhooks.claim_due(db, worker="w1", lease_seconds=0.01, limit=1)
    await asyncio.sleep(0.02)
    [current] = await webhooks.claim_due(db, worker="w2", lease_seconds=30, limit=1)
    attempt = {"at": clock.now(), "statusCode": 500, "error": "http_status", "durationMs": 1, "worker": "w1"}
    assert not await webhooks.record_attempt(db, delivery=stale, attempt=attempt, status=webhooks.FAILED)
    assert await webhooks.record_attempt(db, delivery=current, attempt={**attempt, "statusCode": 200, "error": None,
                                                                         "worker": "w2"}, status=webhooks.DELIVERED)
    stored = await db.webhook_deliveries.find_one({"_id": current["_id"]})
    assert stored["status"] == "delivered" and [a["worker"] for a in stored["attempts"]] == ["w1", "w2"]


async def test_a_rotated_out_secret_signs_until_its_grace_ends(db):
    hook = await webhooks.insert_webhook(db, workspace="ws1", fields={"url": "http://127.0.0.1:9/h",
                                                                      "events": ["run.completed"], "kinds": None},
                                         secret=SEALER.seal("whsec_b2xk"))
    soon = clock.now() + timedelta(seconds=60)
    rotated = await webhooks.rotate_secret(db, workspace="ws1", webhook_id=hook["_id"],
                                           secret=SEALER.seal("whsec_bmV3"),
                                           grace_until=soon)
    assert [SEALER.open(s) for s in webhooks.live_secrets(rotated)] == ["whsec_bmV3", "whsec_b2xk"]
    assert [SEALER.open(s) for s in webhooks.live_secrets(rotated, soon + timedelta(seconds=1))] == ["whsec_bmV3"]
    assert await webhooks.rotate_secret(db, workspace="ws2", webhook_id=hook["_id"], secret=SEALER.seal("x"),
                                        grace_until=soon) is None  # another workspace's


async def test_an_event_announced_again_is_stored_once_and_a_sent_one_is_left_as_it_was(db):
    await webhooks.insert_webhook(db, workspace="ws1", fields={"url": "http://127.0.0.1:9/h",
                                                               "events": ["run.completed"], "kinds": None},
                                  secret=SEALER.seal("whsec_c2VjcmV0"))
    gate = {"status": "completed"}
    first = await webhooks.enqueue(db, workspace="ws1", event="run.completed", kind="panel", run_id="run_1",
                                   body='{"n":1}', key="run_1\nrun.completed", gate=gate)
    again = await webhooks.enqueue(db, workspace="ws1", event="run.completed", kind="panel", run_id="run_1",
                                   body='{"n":2}', key="run_1\nrun.completed", gate=gate)
    assert first == again and await db.webhook_deliveries.count_documents({}) == 1
    stored = await db.webhook_deliveries.find_one({"_id": first[0]})
    assert stored["body"] == '{"n":2}' and stored["gate"] == gate  # not yet through its gate: the latest body

    [claimed] = await webhooks.claim_due(db, worker="w1", lease_seconds=30, limit=1)
    attempt = {"at": clock.now(), "statusCode": 200, "error": None, "durationMs": 1, "worker": "w1"}
    assert await webhooks.record_attempt(db, delivery=claimed, attempt=attempt, status=webhooks.DELIVERED)
    await webhooks.enqueue(db, workspace="ws1", event="run.completed", kind="panel", run_id="run_1",
                           body='{"n":3}', key="run_1\nrun.completed", gate=gate)
    stored = await db.webhook_deliveries.find_one({"_id": first[0]})
    assert await db.webhook_deliveries.count_documents({}) == 1
    assert stored["body"] == '{"n":2}' and stored["status"] == "delivered" and stored["gate"] is None
    other = await webhooks.enqueue(db, workspace="ws1", event="run.completed", kind="panel", run_id="run_2",
                                   body="{}", key="run_2\nrun.completed", gate=gate)
    assert other != first and await db.webhook_deliveries.count_documents({}) == 2


async def test_a_held_delivery_is_due_again_without_an_attempt_and_a_void_one_never(db):
    delivery = await _one_delivery(db)
    [claimed] = await webhooks.claim_due(db, worker="w1", lease_seconds=30, limit=1)
    assert await webhooks.hold(db, delivery=claimed, next_at=clock.now())
    [again] = await webhooks.claim_due(db, worker="w2", lease_seconds=30, limit=1)
    stored = await db.webhook_deliveries.find_one({"_id": delivery})
    assert again["_id"] == delivery and stored["attemptCount"] == 0 and stored["holds"] == 1
    assert not await webhooks.void(db, delivery=claimed, reason="stale claim")  # w2 holds it now
    assert await webhooks.void(db, delivery=again, reason="run_ended: the run ended failed")
    assert await webhooks.claim_due(db, worker="w3", lease_seconds=30, limit=1) == []
    public = webhooks.public_delivery(await db.webhook_deliveries.find_one({"_id": delivery}))
    assert public["status"] == "void" and public["voidReason"].startswith("run_ended")


async def test_a_secret_stored_in_clear_or_under_an_old_key_is_sealed_again_under_the_first_key(db, parley_env):
    from parley.services.webhooks import reseal_secrets

    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    fields = {"url": "http://127.0.0.1:9/h", "events": ["run.completed"], "kinds": None}
    clear = await webhooks.insert_webhook(db, workspace="ws1", fields=fields, secret={"secret": "whsec_Y2xlYXI="})
    sealed = await webhooks.insert_webhook(db, workspace="ws1", fields=fields, secret=Sealer((old,)).seal("whsec_b2xk"))
    settings = parley_env.model_copy(update={"parley_encryption_keys": [new, old]})
    assert await reseal_secrets(db, settings) == 2
    assert await reseal_secrets(db, settings) == 0  # nothing left to seal again
    only_new = Sealer((new,))
    for doc, secret in ((clear, "whsec_Y2xlYXI="), (sealed, "whsec_b2xk")):
        [stored] = (await db.webhooks.find_one({"_id": doc["_id"]}))["secrets"]
        assert "secret" not in stored and only_new.current(stored) and only_new.open(stored) == secret
