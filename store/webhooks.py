"""Webhooks: the receivers a workspace's admin subscribed to run events (`webhooks`), and the deliveries to them, an
outbox and its log at once (`webhook_deliveries`).

A run event's delivery is stored before the run's status is written (`enqueue`), under an id made of what it
announces (`delivery_id`), so that announcing the event again (the run resumed by another worker after its first
died between the two writes) stores nothing twice. Until the run's stored status says the event happened, the
delivery holds a `gate` (what the run's record must show) and is not sent: a worker that claims it early hands it
back unsent (`hold`), or sets it `void` (never sent) when the run ended otherwise (`void`). A delivery is `pending`
until a worker claims it (`claim_due`: a compare-and-set that holds it for a lease, by moving its `nextAttemptAt`
past the attempt's end), and is then `delivered`, due again later (a failed attempt: `record_attempt`), or `failed`
after its last attempt. A worker that dies holding one lets its lease run out; the delivery is then due again, for
any worker, with the same id: at least once. A subscription's secrets (`whsec_...`) are stored sealed
(`core.sealing`: a token and the name of the key that sealed it, never the secret) for Parley to sign with, and never
leave this module in a public view (`public_webhook`); only when they were made and when an old one stops signing.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timedelta
from collections.abc import Mapping
from typing import Any

from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError
from pymongo.operations import UpdateOne

from parley.core import clock
from parley.core.limits import WEBHOOK_LOGGED_ATTEMPTS
from parley.store.cursors import newest_first
from parley.store.group import DUPLICATE_KEY

PENDING, DELIVERED, FAILED, VOID = "pending", "delivered", "failed", "void"
STATUSES = (PENDING, DELIVERED, FAILED, VOID)

INDEXES: list[tuple[str, list[tuple[str, int]], dict]] = [
    ("webhooks", [("workspace", 1), ("createdAt", -1)], {}),
    ("webhook_deliveries", [("status", 1), ("nextAttemptAt", 1)], {}),  # the due ones, first due first
    ("webhook_deliveries", [("workspace", 1), ("createdAt", -1), ("_id", -1)], {}),
    ("webhook_deliveries", [("webhookId", 1), ("createdAt", -1), ("_id", -1)], {}),
]


# --- subscriptions ----------------------------------------------------------------------------------------------


def public_webhook(doc: dict[str, Any], *, secret: str | None = None) -> dict[str, Any]:
    """A subscription as the API shows it: its secrets' dates, never their values (`secret`: the one just made,
    shown once)."""
    out = {
        "id": doc["_id"], "url": doc["url"], "events": list(doc["events"]),
        "kinds": list(doc["kinds"]) if doc.get("kinds") is not None else None,
        "description": doc.get("description") or "", "active": bool(doc.get("active", True)),
        "secrets": [{"createdAt": clock.iso(s["createdAt"]), "expiresAt": clock.iso(s.get("expiresAt"))}
                    for s in live_secrets(doc)],
        "backedOffUntil": clock.iso(backed_off_until(doc)),
        "createdAt": clock.iso(doc.get("createdAt")), "updatedAt": clock.iso(doc.get("updatedAt")),
    }
    if secret is not None:
        out["secret"] = secret
    return out


def live_secrets(doc: dict[str, Any], at: datetime | None = None) -> list[dict[str, Any]]:
    """The secrets of subscription `doc` that still sign (newest first): the current one, and any rotated out whose
    grace has not ended."""
    at = at or clock.now()
    return [s for s in doc.get("secrets") or [] if s.get("expiresAt") is None or _aware(s["expiresAt"]) > at]


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=clock.now().tzinfo)


async def insert_webhook(db: AsyncDatabase, *, workspace: str, fields: dict[str, Any],
                         secret: dict[str, str]) -> dict[str, Any]:
    """Store a new subscription signing with `secret`, as `core.sealing.Sealer.seal` sealed it."""
    now = clock.now()
    doc = {"_id": "whk_" + uuid.uuid4().hex[:16], **fields, "workspace": workspace, "active": True,
           "secrets": [{**secret, "createdAt": now, "expiresAt": None}], "createdAt": now, "updatedAt": now}
    await db.webhooks.insert_one(doc)
    return doc


async def count_webhooks(db: AsyncDatabase, *, workspace: str) -> int:
    return await db.webhooks.count_documents({"workspace": workspace})


async def list_webhooks(db: AsyncDatabase, *, workspace: str) -> list[dict[str, Any]]:
    return await db.webhooks.find({"workspace": workspace}).sort("createdAt", DESCENDING).to_list()


async def get_webhook(db: AsyncDatabase, *, workspace: str, webhook_id: str) -> dict[str, Any] | None:
    return await db.webhooks.find_one({"_id": webhook_id, "workspace": workspace})


async def update_webhook(db: AsyncDatabase, *, workspace: str, webhook_id: str,
                         fields: dict[str, Any]) -> dict[str, Any] | None:
    """Change a subscription's `fields`; the record as it now is, None when there is no such subscription."""
    done = await db.webhooks.update_one({"_id": webhook_id, "workspace": workspace},
                                        {"$set": {**fields, "updatedAt": clock.now()}})
    return await get_webhook(db, workspace=workspace, webhook_id=webhook_id) if done.matched_count else None


async def rotate_secret(db: AsyncDatabase, *, workspace: str, webhook_id: str, secret: dict[str, str],
                        grace_until: datetime) -> dict[str, Any] | None:
    """Make `secret` (sealed) the subscription's current secret; the secrets that signed until now go on signing until
    `grace_until` (or their own earlier end). The record as it now is, None when there is no such subscription."""
    doc = await get_webhook(db, workspace=workspace, webhook_id=webhook_id)
    if doc is None:
        return None
    now = clock.now()
    kept = [{**s, "expiresAt": min(_aware(s["expiresAt"]), grace_until) if s.get("expiresAt") else grace_until}
            for s in live_secrets(doc, now)]
    secrets = [{**secret, "createdAt": now, "expiresAt": None}, *(s for s in kept if s["expiresAt"] > now)]
    # A compare-and-set on the secrets read: of two rotations at once, one wins and the other finds no match.
    done = await db.webhooks.update_one({"_id": webhook_id, "workspace": workspace, "secrets": doc.get("secrets")},
                                        {"$set": {"secrets": secrets, "updatedAt": now}})
    return await get_webhook(db, workspace=workspace, webhook_id=webhook_id) if done.matched_count else None


def stale_seals(db: AsyncDatabase, *, key: str) -> Any:
    """The subscriptions holding a secret not sealed by `key` (the name of the key that seals now), or stored in
    clear before secrets were sealed: an async cursor."""
    return db.webhooks.find({"secrets": {"$elemMatch": {"key": {"$ne": key}}}})  # a secret in clear has no key


async def reseal(db: AsyncDatabase, *, doc: dict[str, Any], secrets: list[dict[str, Any]]) -> bool:
    """Store `secrets` (those of `doc`, sealed again) in place of `doc`'s, unless they changed since it was read (a
    rotation meanwhile): whether they were stored."""
    done = await db.webhooks.update_one({"_id": doc["_id"], "secrets": doc.get("secrets")},
                                        {"$set": {"secrets": secrets}})
    return done.matched_count == 1


async def count_timeout(db: AsyncDatabase, *, webhook_id: str) -> int:
    """Count one more attempt in a row that subscription `webhook_id`'s receiver let time out; how many now."""
    await db.webhooks.update_one({"_id": webhook_id}, {"$inc": {"timeouts": 1}})
    doc = await db.webhooks.find_one({"_id": webhook_id}, {"timeouts": 1})
    return int((doc or {}).get("timeouts") or 0)


async def back_off(db: AsyncDatabase, *, webhook_id: str, until: datetime) -> None:
    """Send nothing to subscription `webhook_id` before `until`: its receiver keeps timing out."""
    await db.webhooks.update_one({"_id": webhook_id}, {"$set": {"backoffUntil": until}})


async def answered(db: AsyncDatabase, *, webhook_id: str) -> None:
    """Subscription `webhook_id`'s receiver answered an attempt: its count of timeouts starts afresh, no back-off."""
    await db.webhooks.update_one({"_id": webhook_id}, {"$set": {"timeouts": 0, "backoffUntil": None}})


def backed_off_until(doc: dict[str, Any], at: datetime | None = None) -> datetime | None:
    """Until when subscription `doc` is backed off (its receiver kept timing out), None when it is not."""
    until = doc.get("backoffUntil")
    return _aware(until) if until is not None and _aware(until) > (at or clock.now()) else None


async def delete_webhook(db: AsyncDatabase, *, workspace: str, webhook_id: str) -> bool:
    """Remove a subscription; its deliveries' log stays (a pending one fails when it comes due)."""
    done = await db.webhooks.delete_one({"_id": webhook_id, "workspace": workspace})
    return done.deleted_count == 1


# --- deliveries -------------------------------------------------------------------------------------------------


def public_delivery(doc: dict[str, Any]) -> dict[str, Any]:
    """A delivery as the API shows it: its id (the `webhook-id` header), event, payload, status and attempts."""
    return {
        "id": doc["_id"], "webhookId": doc["webhookId"], "event": doc["event"], "runId": doc.get("runId"),
        "status": doc["status"], "payload": json.loads(doc["body"]),
        "attempts": [{**a, "at": clock.iso(a["at"])} for a in doc.get("attempts") or []],
        "attemptCount": doc.get("attemptCount", 0), "replays": doc.get("replays", 0),
        "voidReason": doc.get("voidReason") if doc["status"] == VOID else None,
        "nextAttemptAt": clock.iso(doc.get("nextAttemptAt")) if doc["status"] == PENDING else None,
        "createdAt": clock.iso(doc.get("createdAt")), "deliveredAt": clock.iso(doc.get("deliveredAt")),
    }


def delivery_id(webhook_id: str, key: str) -> str:
    """The id of the delivery to subscription `webhook_id` of the event that `key` names (a run's id, its event and
    the number of its wait): the same however often the event is announced."""
    return "msg_" + hashlib.sha256(f"{webhook_id}\n{key}".encode()).hexdigest()[:32]


async def enqueue(db: AsyncDatabase, *, workspace: str, event: str, kind: str | None, run_id: str | None,
                  body: str, webhook_id: str | None = None, key: str | None = None,
                  gate: dict[str, Any] | None = None, lease: int | None = None) -> list[str]:
    """Store one pending delivery of `body` (the payload's JSON, sent as is) for each active subscription of the
    workspace to `event` whose `kinds` admit `kind` (None: every subscription to the event; `webhook_id`: only that
    one, whatever it subscribed to). Return the deliveries' ids.

    With `key` (what names the event, see `delivery_id`) the ids are the event's own, and storing them again is
    harmless: a delivery not yet let through its `gate` (what run `run_id`'s record must show before it is sent,
    see `runs.announce.readiness`) takes the new `body`, any other is left as it is; with `lease` (the lease of the
    run's execution that announces it, `store.runs.lease_of`) only a delivery stored under no later lease: a worker
    whose run was taken over never rewrites what the worker holding it now stored. One read of the workspace's
    subscriptions, and no write when none subscribes."""
    query: dict[str, Any] = {"workspace": workspace, "active": True}
    if webhook_id is not None:
        query["_id"] = webhook_id
    else:
        query["events"] = event
    subscribers = [doc["_id"] for doc in await db.webhooks.find(query, {"kinds": 1}).to_list()
                   if webhook_id is not None or doc.get("kinds") is None or kind in doc["kinds"]]
    if not subscribers:
        return []
    now = clock.now()

    def fresh(subscriber: str, _id: str) -> dict[str, Any]:
        return {"_id": _id, "workspace": workspace, "webhookId": subscriber, "event": event, "runId": run_id,
                "status": PENDING, "nextAttemptAt": now, "attempts": [], "attemptCount": 0, "tries": 0,
                "claims": 0, "replays": 0, "holds": 0, "createdAt": now}

    if key is None:
        docs = [{**fresh(s, "msg_" + uuid.uuid4().hex), "body": body, "updatedAt": now} for s in subscribers]
        await db.webhook_deliveries.insert_many(docs)
        return [doc["_id"] for doc in docs]
    ids = [delivery_id(s, key) for s in subscribers]
    # An upsert on the id, matching only a delivery still behind its gate: one past it (or being sent) does not
    # match, so the upsert's insert meets the id already stored, a duplicate key, which is what it should meet.
    fence = {} if lease is None else {"lease": {"$not": {"$gt": lease}}}
    writes = [UpdateOne({"_id": _id, "status": PENDING, "gate": {"$ne": None}, **fence},
                        {"$set": {"body": body, "gate": gate, "updatedAt": now,
                                  **({} if lease is None else {"lease": lease})},
                         "$setOnInsert": {k: v for k, v in fresh(s, _id).items() if k != "_id"}}, upsert=True)
              for s, _id in zip(subscribers, ids, strict=True)]
    try:
        await db.webhook_deliveries.bulk_write(writes, ordered=False)
    except BulkWriteError as exc:
        if any(error.get("code") != DUPLICATE_KEY for error in exc.details.get("writeErrors", [])) or \
                exc.details.get("writeConcernErrors"):
            raise
    return ids


async def claim_due(db: AsyncDatabase, *, worker: str, lease_seconds: float, limit: int,
                    share: int | None = None, busy: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """Claim up to `limit` deliveries that are due, first due first, for `worker` to send: each is held for
    `lease_seconds` (its `nextAttemptAt` moved to then, when it is due again should the worker not record the
    attempt). Return them as claimed (their `claims` counts this claim).

    With `share`, a workspace's deliveries hold at most `share` of the worker's slots, counting `busy` (the worker's
    deliveries under way, by workspace): once a workspace has its share, its due deliveries are skipped (left due,
    in their order) and the next workspaces' are claimed, so one workspace's queue never stands before another's.

    Atomic per delivery: a compare-and-set on the `nextAttemptAt` read, so of several workers one gets each. Indexed
    `find`s (at most `limit` of them: each claims a delivery or fills a workspace's share) and an `update` by `_id`
    (not a findAndModify, which the embedded database answers by reading the whole collection: see
    `store.runs.claim_expired`)."""
    now = clock.now()
    held = dict(busy or {})
    claimed: list[dict[str, Any]] = []
    for _ in range(limit):
        wanted = limit - len(claimed)
        if wanted <= 0:
            break
        query: dict[str, Any] = {"status": PENDING, "nextAttemptAt": {"$lte": now}}
        if share is not None and (full := sorted(w for w, n in held.items() if n >= share)):
            query["workspace"] = {"$nin": full}
        due = await db.webhook_deliveries.find(query).sort("nextAttemptAt", ASCENDING).limit(wanted).to_list()
        if not due:
            break
        for doc in due:
            if len(claimed) >= limit or (share is not None and held.get(doc["workspace"], 0) >= share):
                continue
            hold = {"nextAttemptAt": now + timedelta(seconds=lease_seconds), "worker": worker, "claimedAt": now}
            taken = await db.webhook_deliveries.update_one(
                {"_id": doc["_id"], "status": PENDING, "nextAttemptAt": doc["nextAttemptAt"]},
                {"$set": hold, "$inc": {"claims": 1}})
            if taken.modified_count == 1:
                claimed.append({**doc, **hold, "claims": doc.get("claims", 0) + 1})
                held[doc["workspace"]] = held.get(doc["workspace"], 0) + 1
        if share is None:
            break
    return claimed


async def record_attempt(db: AsyncDatabase, *, delivery: dict[str, Any], attempt: dict[str, Any], status: str,
                         next_at: datetime | None = None) -> bool:
    """Log an `attempt` of the claimed `delivery` and set its `status`: `delivered`, `failed`, or `pending` again
    (due at `next_at`). The status is set only while the claim holds (no other worker claimed it since, its lease
    having run out); the attempt is logged either way (the latest `WEBHOOK_LOGGED_ATTEMPTS`). Whether it was set."""
    now = clock.now()
    log = {"$push": {"attempts": {"$each": [attempt], "$slice": -WEBHOOK_LOGGED_ATTEMPTS}},
           "$inc": {"attemptCount": 1}}
    fields: dict[str, Any] = {"status": status, "updatedAt": now, "worker": None, "gate": None}
    if status == PENDING:
        fields["nextAttemptAt"] = next_at or now
    elif status == DELIVERED:
        fields["deliveredAt"] = now
    done = await db.webhook_deliveries.update_one(
        {"_id": delivery["_id"], "status": PENDING, "claims": delivery["claims"]},
        {**log, "$set": fields, "$inc": {"attemptCount": 1, "tries": 1}})
    if done.matched_count == 1:
        return True
    await db.webhook_deliveries.update_one({"_id": delivery["_id"]}, log)
    return False


async def hold(db: AsyncDatabase, *, delivery: dict[str, Any], next_at: datetime) -> bool:
    """Hand a claimed delivery back unsent, due again at `next_at`, no attempt counted: its run has not yet stored
    the status it announces. Whether the claim still held."""
    done = await db.webhook_deliveries.update_one(
        {"_id": delivery["_id"], "status": PENDING, "claims": delivery["claims"]},
        {"$set": {"nextAttemptAt": next_at, "worker": None, "updatedAt": clock.now()}, "$inc": {"holds": 1}})
    return done.matched_count == 1


async def void(db: AsyncDatabase, *, delivery: dict[str, Any], reason: str) -> bool:
    """Set a claimed delivery `void`, never to be sent (`reason`: why): the event it announces did not happen,
    its run having ended otherwise. Whether the claim still held."""
    done = await db.webhook_deliveries.update_one(
        {"_id": delivery["_id"], "status": PENDING, "claims": delivery["claims"]},
        {"$set": {"status": VOID, "voidReason": reason, "worker": None, "updatedAt": clock.now()}})
    return done.matched_count == 1


async def release(db: AsyncDatabase, *, delivery: dict[str, Any]) -> None:
    """Hand a claimed delivery back unsent (its worker is stopping): due at once, for any worker."""
    await db.webhook_deliveries.update_one({"_id": delivery["_id"], "status": PENDING, "claims": delivery["claims"]},
                                           {"$set": {"nextAttemptAt": clock.now(), "worker": None}})


async def list_deliveries(db: AsyncDatabase, *, workspace: str, webhook_id: str | None = None,
                          status: str | None = None, cursor: str | None = None,
                          limit: int = 20) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the workspace's deliveries (of one subscription, of one status), newest first, and the cursor of
    the next page (None on the last).

    Raises:
        ValueError: `cursor` is not one this function returned.
    """
    parts: list[dict[str, Any]] = [{"workspace": workspace}]
    if webhook_id is not None:
        parts.append({"webhookId": webhook_id})
    if status is not None:
        parts.append({"status": status})
    return await newest_first(db.webhook_deliveries, parts, limit=limit, cursor=cursor)


async def get_delivery(db: AsyncDatabase, *, workspace: str, delivery_id: str) -> dict[str, Any] | None:
    return await db.webhook_deliveries.find_one({"_id": delivery_id, "workspace": workspace})


async def replay(db: AsyncDatabase, *, workspace: str, delivery_id: str) -> dict[str, Any] | None:
    """Make a delivered or failed delivery pending again, due at once, with its attempts to come counted afresh and
    its id kept; the record as it now is (unchanged when it was pending already), None when there is no such
    delivery."""
    now = clock.now()
    await db.webhook_deliveries.update_one(
        {"_id": delivery_id, "workspace": workspace, "status": {"$in": [DELIVERED, FAILED]}},
        {"$set": {"status": PENDING, "nextAttemptAt": now, "tries": 0, "updatedAt": now},
         "$inc": {"replays": 1}})
    return await get_delivery(db, workspace=workspace, delivery_id=delivery_id)
