"""Announce a run's end, or its wait for a person, to the workspace's webhooks: `announce` stores a delivery for each
subscription to the event (`store.webhooks.enqueue`) *before* the run's status is written, so that no worker can
die between the two and leave the event unannounced. The engine sends nothing itself: the services' sender
(`services.webhooks`) does, on every worker, once `readiness` finds the status the event announces stored.

A delivery's id is made of the run, the event and, for `run.waiting`, the number of the wait (`store.runs.next_wait`):
a worker that dies after announcing and before writing the status leaves the run to be resumed elsewhere (its lease
runs out), and the run announces the same event again under the same ids when it gets there: no second delivery.
A delivery of an event that never happened (the run resumed and ended otherwise) is set `void`, never sent.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pymongo.asynchronous.database import AsyncDatabase

from parley.core import clock
from parley.core.settings import Settings
from parley.store import runs as run_store
from parley.store import webhooks as webhook_store

# A run's status → the event a webhook subscribes to.
EVENTS = {"completed": "run.completed", "failed": "run.failed", "cancelled": "run.cancelled",
          "waiting": "run.waiting"}

Readiness = Literal["send", "hold", "void"]


def payload(record: dict[str, Any], status: str, *, at: Any = None) -> dict[str, Any]:
    """The body of a run event, as the Standard Webhooks payload convention shapes it: `type`, `timestamp` and
    `data`, a short summary of the run with the paths that read the rest (relative to Parley's base URL)."""
    run_id = record["_id"]
    data: dict[str, Any] = {
        "runId": run_id, "kind": record["kind"], "status": status, "title": record.get("title") or "",
        "user": record.get("user"), "workspace": record.get("workspace"),
        "createdAt": clock.iso(record.get("createdAt")), "finishedAt": clock.iso(record.get("finishedAt")),
        "links": {"run": f"/v1/runs/{run_id}", "events": f"/v1/runs/{run_id}/events"},
    }
    if status == "failed" and record.get("error"):
        error = record["error"]
        data["error"] = {"message": error.get("message"), "code": error.get("code"), "status": error.get("status")}
    if record.get("stoppedBy"):
        data["stoppedBy"] = record["stoppedBy"]
    if status == "waiting":
        data["waiting"] = record.get("waiting") or {}
        data["links"]["input"] = f"/v1/runs/{run_id}/input"
    return {"type": EVENTS[status], "timestamp": clock.iso(at or clock.now()), "data": data}


def announcing(settings: Settings) -> bool:
    """Whether this deployment announces run events at all: only where its operator allows webhook URLs
    (`PARLEY_WEBHOOK_URLS`). With none allowed no delivery could be sent, so no run event costs a read."""
    return bool(settings.parley_webhook_urls)


async def announce(db: AsyncDatabase, record: dict[str, Any], status: str, *, wait: int | None = None,
                   lease: int | None = None) -> None:
    """Store the deliveries of run `record`'s coming `status` (one of `EVENTS`; `record` as it will be once the
    status is written) to the workspace's subscribed webhooks, before the status is written; for `waiting`, `wait`
    is the wait's number (`store.runs.next_wait`); `lease`, the lease of the execution announcing it (a delivery
    stored by a later one is not rewritten by it). Nothing is written when no subscription matches (one read).

    Raises:
        PyMongoError: the deliveries could not be stored: the status is not to be written either (the run is
            resumed once the database answers, and announces it then).
    """
    event = payload(record, status)
    if status == run_store.WAITING:
        if wait is None:
            raise ValueError("a run.waiting event is announced with the number of its wait")
        key, gate = f"{record['_id']}\n{event['type']}\n{wait}", {"wait": wait}
    else:
        key, gate = f"{record['_id']}\n{event['type']}", {"status": status}
    await webhook_store.enqueue(db, workspace=record["workspace"], event=event["type"], kind=record["kind"],
                                run_id=record["_id"], key=key, gate=gate, lease=lease,
                                body=json.dumps(event, ensure_ascii=False, separators=(",", ":")))


async def readiness(db: AsyncDatabase, delivery: dict[str, Any]) -> tuple[Readiness, str | None]:
    """Whether a claimed delivery may be sent, by its run's stored record: `send` (the status it announces is
    stored, or it announces no run's status), `hold` (not yet: the run is still on its way there, here or on a
    worker that resumes it) or `void` (never: the run ended otherwise, or is gone), with the reason to log."""
    gate = delivery.get("gate")
    if not gate:
        return "send", None
    progress = await run_store.run_progress(db, run_id=delivery["runId"])
    if progress is None:
        return "void", "run_gone: the run no longer exists"
    status, waits = progress
    if "wait" in gate:
        if waits >= gate["wait"]:  # it waited there (and may have gone on since)
            return "send", None
        if status in run_store.FINISHED:
            return "void", f"run_ended: the run ended {status} without waiting there"
        return "hold", None
    if status == gate["status"]:
        return "send", None
    if status in run_store.FINISHED:
        return "void", f"run_ended: the run ended {status}"
    return "hold", None
