"""Announce a run's end, or its wait for a person, to the workspace's webhooks: `announce` stores a delivery for each
subscription to the event (`store.webhooks.enqueue`) as soon as the run's status is written, before anything is
sent. The engine sends nothing itself: the services' sender (`services.webhooks`) does, on every worker.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from parley.core import clock
from parley.store import webhooks as webhook_store

log = logging.getLogger("parley.runs")

# A run's status → the event a webhook subscribes to.
EVENTS = {"completed": "run.completed", "failed": "run.failed", "cancelled": "run.cancelled",
          "waiting": "run.waiting"}


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


async def announce(db: AsyncDatabase, record: dict[str, Any], status: str) -> None:
    """Store the deliveries of run `record`'s new `status` (one of `EVENTS`) to the workspace's subscribed webhooks.
    A database failure here is logged, not raised: the run's status is stored already, and its followers must not
    see it fail for its announcement."""
    event = payload(record, status)
    try:
        await webhook_store.enqueue(db, workspace=record["workspace"], event=event["type"], kind=record["kind"],
                                    run_id=record["_id"], body=json.dumps(event, ensure_ascii=False,
                                                                          separators=(",", ":")))
    except PyMongoError as exc:
        log.error("run %s: its %s event was not stored for the webhooks (%s)", record["_id"], event["type"], exc)
