"""Runs: one `runs` record per run of any mode, its numbered events (`run_events`) and the usage of each of
its model calls (`run_usage`).

A run is `queued` → `running` → `completed`, `failed` or `cancelled`. The worker executing it holds a
lease (`worker`, `leaseUntil`) that it renews while it runs (`renew_leases`, from a thread of its own with a
synchronous client: a busy event loop does not delay it) and notes when it last did (`heartbeatAt`); once a
lease has expired and no heartbeat came for a whole lease, any other worker may claim the run and resume it
(`next_expiring`, `claim_expired`). Before a worker stores a run's end it claims it (`conclude`), unless a
cancel was asked for first (`request_cancel`): of the two, the first recorded wins. Times are the workers'
clocks (keep them in sync, e.g. with NTP): the embedded database cannot evaluate `$$NOW` in a query.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.database import Database
from pymongo.errors import BulkWriteError

from store.cursors import encode_cursor, older_than

if TYPE_CHECKING:  # the records' type only: store/ imports nothing of Parley's but core/ (tests/test_layers.py)
    from llm.usage import UsageRecord

QUEUED, RUNNING, COMPLETED, FAILED, CANCELLED = "queued", "running", "completed", "failed", "cancelled"
ACTIVE = (QUEUED, RUNNING)
FINISHED = (COMPLETED, FAILED, CANCELLED)
KINDS = ("duel", "panel", "roundtable", "workflow")
DUPLICATE_KEY = 11000

INDEXES: list[tuple[str, list[tuple[str, int]], dict]] = [
    ("runs", [("status", 1), ("leaseUntil", 1)], {}),
    ("runs", [("workspace", 1), ("createdAt", -1), ("_id", -1)], {}),
    ("runs", [("workspace", 1), ("user", 1), ("createdAt", -1), ("_id", -1)], {}),  # a user's own runs
    ("run_events", [("runId", 1), ("seq", 1)], {"unique": True}),
    ("run_usage", [("runId", 1)], {}),
    # LangGraph's checkpoints of runs (`runs.checkpoints.RunSaver`, one document per graph of a run, `_id`
    # {thread_id, checkpoint_ns}): a run's removed at its end by thread id, a crash's orphans by TTL.
    ("run_checkpoints", [("thread_id", 1)], {}),
    ("run_checkpoints", [("expiresAt", 1)], {"expireAfterSeconds": 0}),
]


class EventConflict(RuntimeError):
    """Another worker stored events under the same sequence numbers: it holds the run now."""


def now() -> datetime:
    return datetime.now(UTC)


def _lease(seconds: float) -> datetime:
    return now() + timedelta(seconds=seconds)


# --- the run record -------------------------------------------------------------------------


async def create_run(
    db: AsyncDatabase, *, run_id: str, kind: str, workspace: str, user: str, title: str, input: dict[str, Any],
    ref: dict[str, Any] | None, worker: str, lease_seconds: float,
) -> dict:
    """Store a new run, already `running` on `worker` (which starts it at once); return the record."""
    at = now()
    record = {
        "_id": run_id, "kind": kind, "workspace": workspace, "user": user, "title": title, "input": input,
        "ref": ref or {}, "status": RUNNING, "worker": worker, "leaseUntil": at + timedelta(seconds=lease_seconds),
        "heartbeatAt": at, "claims": 1, "cancelRequested": False, "createdAt": at, "startedAt": at,
        "finishedAt": None, "updatedAt": at, "usage": None, "result": None, "error": None, "concluding": None,
    }
    await db.runs.insert_one(record)
    return record


async def next_expiring(db: AsyncDatabase, *, exclude: list[str]) -> dict | None:
    """The unfinished run outside `exclude` (the runs this worker executes) whose lease ends first, as
    `{"_id", "leaseUntil", "heartbeatAt"}` (None: no such run). A seek on the `(status, leaseUntil)` index that
    reads one row, whatever the number of runs stored."""
    query = {"status": {"$in": list(ACTIVE)}, "leaseUntil": {"$ne": None}, "_id": {"$nin": exclude}}
    rows = await db.runs.find(query, {"_id": 1, "leaseUntil": 1, "heartbeatAt": 1}).sort(
        "leaseUntil", ASCENDING).limit(1).to_list()
    return rows[0] if rows else None


def claimable_at(run: dict, lease_seconds: float) -> datetime:
    """When a worker whose lease is `lease_seconds` may take `run` over (as `next_expiring` read it), should its
    holder not renew it: once its lease has expired and no heartbeat came for a whole lease of the claimant's
    own (a holder configured with a shorter lease is not robbed early). A released run (`heartbeatAt` None, see
    `release`) may be taken as soon as its lease ends."""
    heartbeat = run.get("heartbeatAt")
    if heartbeat is None:
        return run["leaseUntil"]
    return max(run["leaseUntil"], heartbeat + timedelta(seconds=lease_seconds))


async def claim_expired(db: AsyncDatabase, *, run: dict, worker: str, lease_seconds: float) -> dict | None:
    """Take `run` over (as `next_expiring` read it) if its holder is gone (`claimable_at` has passed) and nothing
    changed since it was read: return the record as it now is, None when the run is not (or no longer) free.

    Atomic: a compare-and-set on the lease and heartbeat that were read, so of several workers asking at
    once one gets the run, and a holder that renewed in between keeps it. An `update` by `_id` and a `find`
    by `_id`, not a findAndModify: the embedded database answers a findAndModify that matches (and any filter
    with `$or`) by reading the whole collection, a cost that grows with every run ever stored (10–25 µs per
    stored run, measured on secantusd-py; an update or find by `_id` stays under 2 ms).
    """
    at = now()
    if claimable_at(run, lease_seconds) >= at:
        return None
    taken = await db.runs.update_one(
        {"_id": run["_id"], "status": {"$in": list(ACTIVE)}, "leaseUntil": run["leaseUntil"],
         "heartbeatAt": run.get("heartbeatAt")},
        {"$set": {"worker": worker, "leaseUntil": at + timedelta(seconds=lease_seconds), "heartbeatAt": at,
                  "claimedAt": at, "updatedAt": at}, "$inc": {"claims": 1}},
    )
    if taken.modified_count != 1:
        return None
    return await db.runs.find_one({"_id": run["_id"]})


def renew_leases(db: Database, *, run_ids: list[str], worker: str, lease_seconds: float) -> dict[str, bool]:
    """Extend `worker`'s leases on `run_ids`: a synchronous call, for the lease thread's own client. Return the
    runs it still holds (a run it lost, or that has ended, is left out), each with whether someone asked to
    cancel it: one update and one read whatever the number of runs."""
    if not run_ids:
        return {}
    at = now()
    query = {"_id": {"$in": run_ids}, "worker": worker, "status": {"$in": list(ACTIVE)}}
    db.runs.update_many(query, {"$set": {"leaseUntil": at + timedelta(seconds=lease_seconds), "heartbeatAt": at}})
    rows = db.runs.find(query, {"_id": 1, "cancelRequested": 1})
    return {row["_id"]: bool(row.get("cancelRequested")) for row in rows}


async def release(db: AsyncDatabase, *, run_id: str, worker: str) -> None:
    """Give a run up so that another worker resumes it at once (a worker shutting down)."""
    at = now()
    await db.runs.update_one({"_id": run_id, "worker": worker, "status": {"$in": list(ACTIVE)}},
                             {"$set": {"leaseUntil": at, "heartbeatAt": None, "updatedAt": at}})


async def mark_running(db: AsyncDatabase, *, run_id: str, worker: str) -> None:
    """Note that a claimed run runs again (it may have been claimed before it ever started)."""
    at = now()
    await db.runs.update_one({"_id": run_id, "worker": worker},
                             {"$set": {"status": RUNNING, "updatedAt": at, "startedAt": at}})


async def conclude(db: AsyncDatabase, *, run_id: str, worker: str, status: str) -> dict | None:
    """Claim a run's end as `status` (`completed` or `failed`) before its mode stores it, unless a cancel was
    asked for first: of a cancel request and this claim, the first to be recorded wins (`request_cancel`
    refuses a run whose end is claimed). Return the record's `worker`, `status` and `concluding` as they now
    are (None when there is no such run); the claim holds when its `concluding` is `status`."""
    # An atomic update by `_id` (not a findAndModify: see `claim_expired`). When it matched, the claim holds and
    # nothing needs reading back; otherwise the record read says why (a cancel came first, or another worker).
    done = await db.runs.update_one(
        {"_id": run_id, "worker": worker, "status": {"$in": list(ACTIVE)}, "cancelRequested": {"$ne": True}},
        {"$set": {"concluding": status, "updatedAt": now()}},
    )
    if done.matched_count == 1:
        return {"_id": run_id, "worker": worker, "status": RUNNING, "concluding": status}
    return await db.runs.find_one({"_id": run_id}, {"worker": 1, "status": 1, "concluding": 1})


async def finish(
    db: AsyncDatabase, *, run_id: str, worker: str, status: str, result: Any = None, error: dict | None = None,
    usage: dict | None = None,
) -> dict | None:
    """Record how a run ended, if `worker` still holds it, and return the fields set (the engine adds them to
    the record it holds, for those waiting on the run: see `RunEngine.wait`); None when it does not (another
    worker took over).

    Only a run whose end was claimed as `status` (`conclude`) is stored `completed` or `failed`: never one whose
    cancel was acknowledged."""
    at = now()
    query: dict[str, Any] = {"_id": run_id, "worker": worker, "status": {"$in": list(ACTIVE)}}
    if status != CANCELLED:
        query["concluding"] = status
    # An update by `_id` rather than a findAndModify, which the embedded database answers by reading the whole
    # collection (see `claim_expired`); a finished record is not changed again.
    fields = {"status": status, "result": result, "error": error, "usage": usage, "finishedAt": at,
              "updatedAt": at, "leaseUntil": None}
    done = await db.runs.update_one(query, {"$set": fields})
    return fields if done.modified_count == 1 else None


async def set_ref(db: AsyncDatabase, *, run_id: str, ref: dict[str, Any]) -> None:
    """Add to the run's `ref` (pointers to the mode's own records)."""
    await db.runs.update_one({"_id": run_id}, {"$set": {f"ref.{k}": v for k, v in ref.items()}})


async def request_cancel(db: AsyncDatabase, *, run_id: str) -> tuple[dict | None, bool]:
    """Ask for an unfinished run to be cancelled. Return the record as it now is (None when there is no such
    run) and whether the request was recorded: not for a run that has ended or whose end is being stored."""
    asked = await db.runs.update_one(  # an update and a read by `_id`, not a findAndModify (see `claim_expired`)
        {"_id": run_id, "status": {"$in": list(ACTIVE)}, "concluding": None},
        {"$set": {"cancelRequested": True, "updatedAt": now()}},
    )
    return await db.runs.find_one({"_id": run_id}), asked.matched_count == 1


async def get_run(db: AsyncDatabase, *, run_id: str, workspace: str | None = None) -> dict | None:
    query: dict[str, Any] = {"_id": run_id}
    if workspace is not None:
        query["workspace"] = workspace
    return await db.runs.find_one(query)


async def run_status(db: AsyncDatabase, *, run_id: str) -> str | None:
    """A run's status alone (None when there is no such run): what a follower's poll needs of the record."""
    record = await db.runs.find_one({"_id": run_id}, {"_id": 0, "status": 1})
    return None if record is None else record["status"]


async def list_runs(
    db: AsyncDatabase, *, visible: dict[str, Any], status: str | None = None, limit: int = 20,
    cursor: str | None = None,
) -> tuple[list[dict], str | None]:
    """The runs matching `visible` (a workspace's, as `services.access.visible_runs` builds it), newest
    first: one page and the cursor of the next (None at the end)."""
    parts: list[dict[str, Any]] = [visible]
    if status:
        parts.append({"status": status})
    if cursor:
        parts.append(older_than(cursor))
    query = parts[0] if len(parts) == 1 else {"$and": parts}
    rows = await db.runs.find(query, {"input": 0, "result": 0}).sort(
        [("createdAt", DESCENDING), ("_id", DESCENDING)]).limit(limit + 1).to_list()
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, encode_cursor(rows[-1]) if more and rows else None


# --- events ---------------------------------------------------------------------------------


async def append_events(db: AsyncDatabase, *, run_id: str, events: list[dict]) -> None:
    """Store events (`{"seq", "event", "data", "origin"}`) of a run.

    Raises:
        EventConflict: one of the sequence numbers is taken, by another worker that took the run over.
    """
    if run_id in await append_batches(db, [(run_id, events)]):
        raise EventConflict(f"run {run_id}: event numbers already taken")


async def append_batches(db: AsyncDatabase, batches: list[tuple[str, list[dict]]]) -> set[str]:
    """Store the events of several runs in one command (each run at most once in `batches`, its events in order)
    and return the runs whose events conflicted: one of their sequence numbers is taken, by another worker that
    took the run over. A conflicting run's events from the taken one on are not stored; every other run's are.
    """
    at = now()
    docs = [{"runId": run_id, "at": at, **event} for run_id, events in batches for event in events]
    conflicted: set[str] = set()
    while docs:
        try:
            await db.run_events.insert_many(docs, ordered=True)
            return conflicted
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if not errors or errors[0].get("code") != DUPLICATE_KEY:
                raise
            # Ordered: the documents before the first error are stored, none after it. Send the others again,
            # less the rest of the conflicting run's.
            index = errors[0]["index"]
            loser = docs[index]["runId"]
            conflicted.add(loser)
            docs = [doc for doc in docs[index + 1:] if doc["runId"] != loser]
    return conflicted


async def events_after(db: AsyncDatabase, *, run_id: str, after: int, limit: int = 1000) -> list[dict]:
    """Stored events of a run with `seq` greater than `after`, in order (void ones included, marked)."""
    cursor = db.run_events.find({"runId": run_id, "seq": {"$gt": after}}, {"_id": 0, "runId": 0, "at": 0})
    return await cursor.sort("seq", ASCENDING).limit(limit).to_list()


async def all_events(db: AsyncDatabase, *, run_id: str) -> list[dict]:
    cursor = db.run_events.find({"runId": run_id}, {"_id": 0, "runId": 0, "at": 0})
    return await cursor.sort("seq", ASCENDING).to_list()


async def last_seq(db: AsyncDatabase, *, run_id: str) -> int:
    """The highest stored event number of a run (-1 when none)."""
    rows = await db.run_events.find({"runId": run_id}, {"seq": 1}).sort("seq", DESCENDING).limit(1).to_list()
    return rows[0]["seq"] if rows else -1


async def mark_void(db: AsyncDatabase, *, run_id: str, seqs: list[int]) -> None:
    """Mark events as void: sent by a task that did not finish and will run again."""
    if seqs:
        await db.run_events.update_many({"runId": run_id, "seq": {"$in": seqs}}, {"$set": {"void": True}})


# --- usage ----------------------------------------------------------------------------------


async def add_usage(db: AsyncDatabase, *, run_id: str, records: list[UsageRecord]) -> None:
    """Store the usage of model calls as they are made, so a resumed run still bills them."""
    await add_usage_batches(db, [(run_id, records)])


async def add_usage_batches(db: AsyncDatabase, batches: list[tuple[str, list[UsageRecord]]]) -> None:
    """`add_usage` for several runs in one command."""
    at = now()
    docs = [{"runId": run_id, "at": at, **asdict(r)} for run_id, records in batches for r in records]
    if docs:
        await db.run_usage.insert_many(docs, ordered=False)


async def list_usage(db: AsyncDatabase, *, run_id: str) -> list[dict[str, Any]]:
    """The usage of a run's model calls so far, oldest first: the fields of each `llm.usage.UsageRecord` stored."""
    rows = db.run_usage.find({"runId": run_id}, {"runId": 0, "at": 0}).sort("_id", ASCENDING)
    return [{k: v for k, v in row.items() if k != "_id"} async for row in rows]
