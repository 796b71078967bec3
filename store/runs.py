"""Runs: one `runs` record per run of any mode, its numbered events (`run_events`) and the usage of each of
its model calls (in the page of events stored with it, else in `run_usage`).

A run is `queued` → `running` → `completed`, `failed` or `cancelled`; a running run may stop at a boundary of its
graph to wait for a person (`waiting`: `park`), holding no lease and executed nowhere, until an input wakes it on
whichever worker receives it (`wake`). The worker executing it holds a
lease (`worker`, `leaseUntil`) that it renews while it runs (`renew_leases`, from a thread of its own with a
synchronous client: a busy event loop does not delay it) and notes when it last did (`heartbeatAt`); once a
lease has expired and no heartbeat came for a whole lease, any other worker may claim the run and resume it
(`next_expiring`, `claim_expired`). Every lease has a number (`lease`: 1 when the run is created, one more at each
claim or wake) that the execution holding it keeps, and every write of an execution carries it: the run's record
changes only while its `lease` is the execution's (`conclude`, `finish`, `park`, `release`, `mark_running`,
`set_ref`), and its pages of events, usage rows and checkpoints are fenced by the worker that takes it over, so
that nothing an execution whose lease was taken writes afterwards is accepted (`Fenced`). Before a worker stores a run's end it claims it (`conclude`), unless a
cancel was asked for first (`request_cancel`): of the two, the first recorded wins. Times are the workers'
clocks (keep them in sync, e.g. with NTP): the embedded database cannot evaluate `$$NOW` in a query.

A run's events are stored a batch to a document, a page: `{runId, seq, last, events: [...], usage?, voided?}`
(`usage`: the usage rows of the model calls that ended since the page before), `seq` and
`last` the numbers of its first and last event (a database spends about as much on a document of thirty events as
on a document of one: bench/README.md). The numbers of one execution's pages follow on without a gap, so a worker
that takes a run over fences it (`fence_events`): a page at the number after the last stored, which the unique
`(runId, seq)` index keeps any later page of the earlier execution from taking (`EventConflict`). Events stored
before pages, a document each, read as pages of one.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import bson
from pymongo import ASCENDING, DESCENDING
from pymongo.asynchronous.change_stream import AsyncChangeStream
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.database import Database
from pymongo.errors import BulkWriteError, DuplicateKeyError
from pymongo.operations import UpdateOne

from parley.core.clock import now  # also the runs' clock for their engine (`store.now()`)
from parley.core.limits import MAX_EVENT_PAGE_BYTES, MAX_RUN_INPUTS
from parley.store.cursors import newest_first
from parley.store.group import DUPLICATE_KEY, Group, insert_each

if TYPE_CHECKING:  # the records' type only: store/ imports nothing of Parley's but core/ (tests/test_layers.py)
    from parley.llm.usage import UsageRecord

QUEUED, RUNNING, COMPLETED, FAILED, CANCELLED = "queued", "running", "completed", "failed", "cancelled"
WAITING = "waiting"
ACTIVE = (QUEUED, RUNNING)
UNFINISHED = (QUEUED, RUNNING, WAITING)
FINISHED = (COMPLETED, FAILED, CANCELLED)
KINDS = ("duel", "panel", "roundtable", "workflow")


INDEXES: list[tuple[str, list[tuple[str, int]], dict]] = [
    ("runs", [("status", 1), ("leaseUntil", 1)], {}),
    ("runs", [("workspace", 1), ("createdAt", -1), ("_id", -1)], {}),
    ("runs", [("workspace", 1), ("user", 1), ("createdAt", -1), ("_id", -1)], {}),  # a user's own runs
    ("run_events", [("runId", 1), ("seq", 1)], {"unique": True}),
    ("run_events", [("runId", 1), ("last", 1)], {}),  # the pages holding the events after a number
    ("run_usage", [("runId", 1)], {}),
    # LangGraph's checkpoints of runs (`runs.checkpoints.RunSaver`, one document per graph of a run, `_id`
    # {thread_id, checkpoint_ns}): a run's removed at its end by thread id, a crash's orphans by TTL.
    ("run_checkpoints", [("thread_id", 1)], {}),
    ("run_checkpoints", [("expiresAt", 1)], {"expireAfterSeconds": 0}),
]


class Fenced(RuntimeError):
    """A write of an execution was refused: another worker took its run over (a later lease, see `fence_usage` and
    `runs.checkpoints.RunSaver.afence`). The execution is to stop at once, writing nothing more."""


class EventConflict(Fenced):
    """Another worker stored events under the same sequence numbers: it holds the run now."""


# The share of a page of events kept for what it holds besides its events (1/128: 64 KB of 8 MB): its own fields and the
# usage rows of the model calls that came with them (a row is about 300 bytes; a batch is a quarter of a second of a
# run's events). One event may take the rest of the page (`oversized_event`).
EVENT_PAGE_RESERVE_SHARE = 128


class EventTooLarge(RuntimeError):
    """One event of a run is larger than a page of events may be (`MAX_EVENT_PAGE_BYTES`): none of the run's events
    of that batch are stored."""

    def __init__(self, run_id: str, seq: int, size: int) -> None:
        super().__init__(f"event {seq} is {size:,} bytes, more than a page of events holds ({MAX_EVENT_PAGE_BYTES:,})")
        self.run_id, self.seq, self.size = run_id, seq, size


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
        "heartbeatAt": at, "claims": 1, "lease": 1, "cancelRequested": False, "createdAt": at, "startedAt": at,
        "finishedAt": None, "updatedAt": at, "usage": None, "result": None, "error": None, "concluding": None,
    }
    await _new_runs(db, record)
    return record


# The records of runs started at once are stored in one command (`store.group`).
_new_runs: Group[dict, None] = Group("store new runs", send=lambda db, docs: insert_each(db.runs, docs))


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
    # A holder that handed the run over (`release`) left no heartbeat; one whose lease ran out stopped while
    # executing it: a crash, counted until the run is handed over or waits (`crashes`, see `MAX_RUN_CRASHES`).
    crashed = run.get("heartbeatAt") is not None
    taken = await db.runs.update_one(
        {"_id": run["_id"], "status": {"$in": list(ACTIVE)}, "leaseUntil": run["leaseUntil"],
         "heartbeatAt": run.get("heartbeatAt")},
        {"$set": {"worker": worker, "leaseUntil": at + timedelta(seconds=lease_seconds), "heartbeatAt": at,
                  "claimedAt": at, "updatedAt": at, **({} if crashed else {"crashes": 0})},
         "$inc": {"claims": 1, "lease": 1, **({"crashes": 1} if crashed else {})}},
    )
    if taken.modified_count != 1:
        return None
    return await db.runs.find_one({"_id": run["_id"]})


class Held(NamedTuple):
    """What a lease renewal reads of a run its worker still holds: whether someone asked to cancel it, and how many
    inputs were sent to it (`note_input`)."""

    cancel: bool
    inputs: int


def renew_leases(db: Database, *, run_ids: list[str], worker: str, lease_seconds: float,
                 extend: list[str] | None = None) -> dict[str, Held]:
    """Extend `worker`'s leases on `extend` (by default all of `run_ids`): a synchronous call, for the lease thread's
    own client. Return the runs of `run_ids` it still holds (a run it lost, or that has ended, is left out), each
    with whether someone asked to cancel it and how many inputs it was sent: one update (none when nothing is to
    be extended) and one read whatever the number of runs."""
    if not run_ids:
        return {}
    extend = run_ids if extend is None else extend
    query = {"_id": {"$in": run_ids}, "worker": worker, "status": {"$in": list(ACTIVE)}}
    if extend:
        at = now()
        db.runs.update_many({**query, "_id": {"$in": extend}},
                            {"$set": {"leaseUntil": at + timedelta(seconds=lease_seconds), "heartbeatAt": at}})
    rows = db.runs.find(query, {"_id": 1, "cancelRequested": 1, "inputs": 1})
    return {row["_id"]: Held(bool(row.get("cancelRequested")), int(row.get("inputs") or 0)) for row in rows}


def lease_of(record: dict) -> int | None:
    """The number of the lease an execution of run `record` holds (None: a run stored before leases had numbers,
    until its next claim)."""
    return record.get("lease")


async def release(db: AsyncDatabase, *, run_id: str, worker: str, lease: int | None) -> None:
    """Give a run up so that another worker resumes it at once (a worker shutting down)."""
    at = now()
    await db.runs.update_one({"_id": run_id, "worker": worker, "lease": lease, "status": {"$in": list(ACTIVE)}},
                             {"$set": {"leaseUntil": at, "heartbeatAt": None, "updatedAt": at}})


async def mark_running(db: AsyncDatabase, *, run_id: str, worker: str, lease: int | None) -> None:
    """Note that a claimed run runs again (it may have been claimed before it ever started)."""
    at = now()
    await db.runs.update_one({"_id": run_id, "worker": worker, "lease": lease},
                             {"$set": {"status": RUNNING, "updatedAt": at, "startedAt": at}})


async def conclude(db: AsyncDatabase, *, run_id: str, worker: str, lease: int | None, status: str) -> dict | None:
    """Claim a run's end as `status` (`completed` or `failed`) before its mode stores it, unless a cancel was
    asked for first: of a cancel request and this claim, the first to be recorded wins (`request_cancel`
    refuses a run whose end is claimed). Return the record's `worker`, `lease`, `status` and `concluding` as they
    now are (None when there is no such run); the claim holds when its `concluding` is `status` and its `lease` is
    `lease`."""
    # An atomic update by `_id` (not a findAndModify: see `claim_expired`). When it matched, the claim holds and
    # nothing needs reading back; otherwise the record read says why (a cancel came first, or another worker).
    done = await db.runs.update_one(
        {"_id": run_id, "worker": worker, "lease": lease, "status": {"$in": list(ACTIVE)},
         "cancelRequested": {"$ne": True}},
        {"$set": {"concluding": status, "updatedAt": now()}},
    )
    if done.matched_count == 1:
        return {"_id": run_id, "worker": worker, "lease": lease, "status": RUNNING, "concluding": status}
    return await db.runs.find_one({"_id": run_id}, {"worker": 1, "lease": 1, "status": 1, "concluding": 1})


def end_fields(*, status: str, result: Any = None, error: dict | None = None, usage: dict | None = None,
               stopped_by: str | None = None, budget: dict | None = None, at: datetime | None = None) -> dict:
    """The fields `finish` sets on a run's record, ending it as `status` at `at` (by default now): known before
    they are written, so that the run's announcement (`runs.announce`) can be stored first."""
    at = at or now()
    fields = {"status": status, "result": result, "error": error, "usage": usage, "finishedAt": at,
              "updatedAt": at, "leaseUntil": None, "waiting": None}
    if stopped_by is not None:
        fields["stoppedBy"] = stopped_by
    if budget is not None:
        fields["budget"] = budget
    return fields


async def finish(
    db: AsyncDatabase, *, run_id: str, worker: str, lease: int | None, status: str, result: Any = None, error: dict | None = None,
    usage: dict | None = None, stopped_by: str | None = None, budget: dict | None = None,
    at: datetime | None = None,
) -> dict | None:
    """Record how a run ended (at `at`, by default now), if `worker` still holds it, and return the fields set
    (`end_fields`: the engine adds them to the record it holds, for those waiting on the run: see
    `RunEngine.wait`); None when it does not (another worker took over: its `lease` is no longer `lease`).

    Only a run whose end was claimed as `status` (`conclude`) is stored `completed` or `failed`: never one whose
    cancel was acknowledged."""
    query: dict[str, Any] = {"_id": run_id, "worker": worker, "lease": lease, "status": {"$in": list(ACTIVE)}}
    if status != CANCELLED:
        query["concluding"] = status
    # An update by `_id` rather than a findAndModify, which the embedded database answers by reading the whole
    # collection (see `claim_expired`); a finished record is not changed again.
    fields = end_fields(status=status, result=result, error=error, usage=usage, stopped_by=stopped_by, budget=budget,
                        at=at)
    done = await db.runs.update_one(query, {"$set": fields})
    return fields if done.modified_count == 1 else None


async def set_ref(db: AsyncDatabase, *, run_id: str, ref: dict[str, Any]) -> None:
    """Add to the run's `ref` (pointers to the mode's own records)."""
    await db.runs.update_one({"_id": run_id}, {"$set": {f"ref.{k}": v for k, v in ref.items()}})


async def request_cancel(db: AsyncDatabase, *, run_id: str) -> tuple[dict | None, bool]:
    """Ask for an unfinished run (a waiting one too) to be cancelled. Return the record as it now is (None when
    there is no such run) and whether the request was recorded: not for a run that has ended or whose end is
    being stored."""
    asked = await db.runs.update_one(  # an update and a read by `_id`, not a findAndModify (see `claim_expired`)
        {"_id": run_id, "status": {"$in": list(UNFINISHED)}, "concluding": None},
        {"$set": {"cancelRequested": True, "updatedAt": now()}},
    )
    return await db.runs.find_one({"_id": run_id}), asked.matched_count == 1


class TooManyInputs(RuntimeError):
    """The run was sent `MAX_RUN_INPUTS` inputs already."""


def control_lap(record: dict) -> int:
    """The stretch of run `record` a control sent now belongs to: `2·w` while it waits at its wait number `w`, `2·w + 1`
    while it goes on after it (`2·0 + 1` before its first wait). Each wait needs a person's answer, so a run has as
    many laps as it waits (twice, plus one), however many controls are sent."""
    return 2 * int(record.get("waits") or 0) + (0 if record.get("status") == WAITING else 1)


def counts_against_cap(record: dict, action: str | None) -> bool:
    """Whether an input sent the run `record` now counts against `MAX_RUN_INPUTS`: a message does, and a control
    (`continue`, `guide`, `end`, `pause`) only when one of its kind was already sent in the same lap (`control_lap`):
    the first of each kind always gets through, so a run at the cap can still be let go on, paused or ended."""
    return action is None or (record.get("controls") or {}).get(action) == control_lap(record)


def inputs_full(record: dict, action: str | None = None) -> bool:
    """Whether the input `action` (None: a message) sent run `record` now would pass `MAX_RUN_INPUTS` (see
    `counts_against_cap`): checked before an input is stored, and held by `note_input` against inputs sent at
    once."""
    return counts_against_cap(record, action) and record.get("capped", 0) >= MAX_RUN_INPUTS


def _open_to_input(record: dict) -> bool:
    return record.get("status") in UNFINISHED and record.get("concluding") is None and \
        not record.get("cancelRequested")


async def note_input(db: AsyncDatabase, *, run_id: str, action: str | None = None) -> dict | None:
    """Count an input stored for a run (the lease renewal of the worker executing it reads the count, `inputs`, and
    fetches what is new); return the record as it now is, or None when the run has ended (or its end is being
    stored, or it was cancelled): no one will read the input.

    A message counts against `MAX_RUN_INPUTS` (`capped`); a control does only when one of its kind was sent in the
    same lap (`counts_against_cap`; `controls` holds the lap of each kind's last one).

    Raises:
        TooManyInputs: the input counts against the cap and the run holds `MAX_RUN_INPUTS` already (it is not
            counted).
    """
    if action is not None:
        for _ in range(8):  # a run that parks or is woken meanwhile changes lap: look again
            record = await db.runs.find_one({"_id": run_id})
            if record is None or not _open_to_input(record):
                return None
            if counts_against_cap(record, action):
                break
            lap = control_lap(record)
            noted = await db.runs.update_one(
                {"_id": run_id, "status": record["status"], "waits": record.get("waits"), "concluding": None,
                 "cancelRequested": {"$ne": True}, f"controls.{action}": (record.get("controls") or {}).get(action)},
                {"$inc": {"inputs": 1}, "$set": {"updatedAt": now(), f"controls.{action}": lap}},
            )
            if noted.matched_count == 1:
                return await db.runs.find_one({"_id": run_id})
    noted = await db.runs.update_one(
        {"_id": run_id, "status": {"$in": list(UNFINISHED)}, "concluding": None, "cancelRequested": {"$ne": True},
         "capped": {"$not": {"$gte": MAX_RUN_INPUTS}}},
        {"$inc": {"inputs": 1, "capped": 1}, "$set": {"updatedAt": now()}},
    )
    record = await db.runs.find_one({"_id": run_id})
    if noted.matched_count == 1:
        return record
    if record is not None and _open_to_input(record):
        raise TooManyInputs(f"The run has been sent {MAX_RUN_INPUTS} inputs, as many as a run takes (a control "
                            "goes through once per wait, and once between two waits)")
    return None


def next_wait(record: dict) -> int:
    """The number of run `record`'s next wait for a person (1 for its first): `park` stores it as the run's `waits`,
    so a wait announced and not stored (its worker died) is announced under the same number when it comes again."""
    return int(record.get("waits") or 0) + 1


async def park(db: AsyncDatabase, *, run_id: str, worker: str, lease: int | None, waiting: dict[str, Any],
               wait: int) -> bool:
    """Store that `worker`'s run waits for a person at a boundary (`waiting`: where; `wait`: its number, see
    `next_wait`): no worker holds it, no lease runs, no one takes it over. False when the worker no longer holds
    it, or a cancel was asked first."""
    at = now()
    parked = await db.runs.update_one(
        {"_id": run_id, "worker": worker, "lease": lease, "status": RUNNING, "concluding": None,
         "cancelRequested": {"$ne": True}},
        {"$set": {"status": WAITING, "worker": None, "leaseUntil": None, "heartbeatAt": None, "waiting": waiting,
                  "waitingSince": at, "updatedAt": at, "crashes": 0, "waits": wait}},
    )
    return parked.modified_count == 1


async def wake(db: AsyncDatabase, *, run_id: str, worker: str, lease_seconds: float) -> dict | None:
    """Take a waiting run to execute on `worker` (an input let it go on, or it was cancelled): atomic, so one
    worker of several asking gets it. Its time spent waiting is added to `waitedSeconds` (not counted against its
    deadline or its budget). Return the record as it now is, or None when it was not waiting."""
    record = await db.runs.find_one({"_id": run_id, "status": WAITING}, {"waitingSince": 1})
    if record is None:
        return None
    at = now()
    since = record.get("waitingSince") or at
    since = since if since.tzinfo else since.replace(tzinfo=UTC)
    taken = await db.runs.update_one(
        {"_id": run_id, "status": WAITING, "waitingSince": record.get("waitingSince")},
        {"$set": {"status": RUNNING, "worker": worker, "leaseUntil": at + timedelta(seconds=lease_seconds),
                  "heartbeatAt": at, "claimedAt": at, "updatedAt": at, "waiting": None, "waitingSince": None},
         "$inc": {"claims": 1, "lease": 1, "waitedSeconds": max(0.0, (at - since).total_seconds())}},
    )
    if taken.modified_count != 1:
        return None
    return await db.runs.find_one({"_id": run_id})


def active_seconds(record: dict, at: datetime | None = None) -> float:
    """Seconds a run has been executing (or held by a worker) since it was created: its age less the time it
    spent waiting for a person."""
    created = record.get("createdAt")
    if created is None:
        return 0.0
    created = created if created.tzinfo else created.replace(tzinfo=UTC)
    return max(0.0, ((at or now()) - created).total_seconds() - float(record.get("waitedSeconds") or 0.0))


async def get_run(db: AsyncDatabase, *, run_id: str, workspace: str | None = None) -> dict | None:
    query: dict[str, Any] = {"_id": run_id}
    if workspace is not None:
        query["workspace"] = workspace
    return await db.runs.find_one(query)


async def run_status(db: AsyncDatabase, *, run_id: str) -> str | None:
    """A run's status alone (None when there is no such run): what a follower's poll needs of the record."""
    record = await db.runs.find_one({"_id": run_id}, {"_id": 0, "status": 1})
    return None if record is None else record["status"]


async def run_progress(db: AsyncDatabase, *, run_id: str) -> tuple[str, int] | None:
    """A run's status and how many times it waited for a person (`waits`, see `next_wait`); None when there is no
    such run: what a webhook sender checks before it sends a run's event (`runs.announce.readiness`)."""
    record = await db.runs.find_one({"_id": run_id}, {"_id": 0, "status": 1, "waits": 1})
    return None if record is None else (record["status"], int(record.get("waits") or 0))


async def list_runs(
    db: AsyncDatabase, *, visible: dict[str, Any], status: str | None = None, limit: int = 20,
    cursor: str | None = None,
) -> tuple[list[dict], str | None]:
    """The runs matching `visible` (a workspace's, as `services.access.visible_runs` builds it), newest
    first: one page and the cursor of the next (None at the end)."""
    parts: list[dict[str, Any]] = [visible, *([{"status": status}] if status else [])]
    return await newest_first(db.runs, parts, limit=limit, cursor=cursor, projection={"input": 0, "result": 0})


# --- events ---------------------------------------------------------------------------------


async def append_events(db: AsyncDatabase, *, run_id: str, events: list[dict]) -> None:
    """Store events (`{"seq", "event", "data", "origin"}`, numbered on from the run's last page) of a run.

    Raises:
        EventConflict: the first number is taken: another worker took the run over (see `fence_events`).
        EventTooLarge: an event is larger than a page of events may be.
    """
    if (refused := (await append_batches(db, [(run_id, events)])).get(run_id)) is not None:
        raise refused


def event_bytes(event: dict) -> int:
    """The bytes one event (`{"seq", "event", "data", "origin"}`) takes in a page of events, or a few more."""
    return len(bson.encode({"e": event}))


def oversized_event(run_id: str, events: list[dict]) -> EventTooLarge | None:
    """The first of `events` too large to store (larger than a page of events less its reserve,
    `EVENT_PAGE_RESERVE_SHARE`), or None: the one rule `_pages` keeps, so that a run can check its closing events
    before it says how it ended."""
    most = MAX_EVENT_PAGE_BYTES - MAX_EVENT_PAGE_BYTES // EVENT_PAGE_RESERVE_SHARE
    for event in events:
        if (size := event_bytes(event)) > most:
            return EventTooLarge(run_id, event["seq"], size)
    return None


def _pages(run_id: str, events: list[dict], usage: list[UsageRecord], at: datetime) -> list[dict]:
    """A run's next events as pages to store: one page (with its usage rows), or several in order when one would
    hold more than `MAX_EVENT_PAGE_BYTES` (MongoDB refuses a document over 16 MB).

    Raises:
        EventTooLarge: a single event is larger than a page may be.
    """
    def page(chunk: list[dict], rows: list[UsageRecord]) -> dict:
        return {"runId": run_id, "seq": chunk[0]["seq"], "last": chunk[-1]["seq"], "at": at, "events": chunk,
                **({"usage": [asdict(r) for r in rows]} if rows else {})}

    if (refused := oversized_event(run_id, events)) is not None:
        raise refused
    whole = page(events, usage)
    if len(bson.encode(whole)) <= MAX_EVENT_PAGE_BYTES:  # nearly always: a page is a second or two of events
        return [whole]
    # What a page holds besides its events: its own fields and the usage rows (far within its reserve).
    room = MAX_EVENT_PAGE_BYTES - (len(bson.encode(page(events[:1], usage))) - event_bytes(events[0]))
    pages, chunk, size = [], [], 0
    for event in events:
        weight = event_bytes(event)
        if chunk and size + weight > room:
            pages.append(page(chunk, [] if pages else usage))
            chunk, size = [], 0
        chunk.append(event)
        size += weight
    pages.append(page(chunk, [] if pages else usage))
    return pages


async def append_batches(db: AsyncDatabase, batches: list[tuple[str, list[dict]]],
                         usage: Mapping[str, list[UsageRecord]] | None = None) -> dict[str, Exception]:
    """Store the events of several runs in one command, in pages (each run at most once in `batches`, its events in
    order, with its `usage` rows; `_pages`), and return the runs whose events were not stored, each with why: its
    first number is taken, by another worker that took the run over (`fence_events`: `EventConflict`), or one of
    its events is too large to store (`EventTooLarge`). Every other run's events are stored.
    """
    at = now()
    usage = usage or {}
    refused: dict[str, Exception] = {}
    docs = []
    for run_id, events in batches:
        if events:
            try:
                docs += _pages(run_id, events, usage.get(run_id) or [], at)
            except EventTooLarge as exc:
                refused[run_id] = exc
    while docs:
        try:
            await db.run_events.insert_many(docs, ordered=True)
            return refused
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if not errors or errors[0].get("code") != DUPLICATE_KEY:
                raise
            # Ordered: the pages before the first error are stored, none after it. Send the others again, but for
            # the rest of the conflicting run's pages.
            index = errors[0]["index"]
            run_id = docs[index]["runId"]
            refused[run_id] = EventConflict(f"run {run_id}: event numbers already taken")
            docs = [doc for doc in docs[index + 1:] if doc["runId"] != run_id]
    return refused


def page_events(pages: Any) -> list[dict]:
    """The events of stored pages (`run_events` documents, in order) as `{"seq", "event", "data", "origin",
    "void"?}`, in order; a fence holds none, a document stored before pages is one event."""
    rows: list[dict] = []
    for page in pages:
        if "events" in page:
            voided = set(page.get("voided") or ())
            rows += [{**event, "void": True} if event["seq"] in voided else event for event in page["events"]]
        else:
            rows.append({key: page[key] for key in ("seq", "event", "data", "origin", "void") if key in page})
    return rows


_PAGE = {"_id": 0, "runId": 0, "at": 0}


async def events_after(db: AsyncDatabase, *, run_id: str, after: int, limit: int = 1000) -> list[dict]:
    """Stored events of a run with `seq` greater than `after`, in order (void ones included, marked), at most
    `limit` (and at least the rest of a page that holds more: whole pages are read)."""
    pages = db.run_events.find({"runId": run_id, "last": {"$gt": after}}, _PAGE).sort("last", ASCENDING)
    rows: list[dict] = []
    async for page in pages:
        rows += [row for row in page_events([page]) if row["seq"] > after]
        if len(rows) >= limit:
            break
    return rows


class PageStream:
    """The runs whose events are stored from the moment `watch_pages` opened it on: a run id per page, in order."""

    def __init__(self, stream: AsyncChangeStream) -> None:
        self._stream = stream

    def __aiter__(self) -> PageStream:
        return self

    async def __anext__(self) -> str:
        return (await self._stream.next())["fullDocument"]["runId"]

    async def aclose(self) -> None:
        await self._stream.close()


async def watch_pages(db: AsyncDatabase) -> PageStream:
    """A change stream of the pages of events inserted from now on (a replica set's).

    Raises:
        OperationFailure: the server has no change streams (code 40573: a standalone server).
    """
    return PageStream(await db.run_events.watch([{"$match": {"operationType": "insert"}},
                                                 {"$project": {"fullDocument.runId": 1}}]))


async def all_events(db: AsyncDatabase, *, run_id: str) -> list[dict]:
    return page_events(await db.run_events.find({"runId": run_id}, _PAGE).sort("seq", ASCENDING).to_list())


async def last_events(db: AsyncDatabase, *, run_id: str, pages: int = 2) -> list[dict]:
    """The events of a run's last `pages` stored pages, in order (void ones included, marked): its latest steps."""
    rows = await db.run_events.find({"runId": run_id}, _PAGE).sort("seq", DESCENDING).limit(pages).to_list()
    return page_events(reversed(rows))


async def last_seq(db: AsyncDatabase, *, run_id: str) -> int:
    """The highest stored event number of a run (-1 when none; a fence counts)."""
    rows = await db.run_events.find({"runId": run_id}, {"seq": 1, "last": 1}).sort("seq", DESCENDING).limit(
        1).to_list()
    return rows[0].get("last", rows[0]["seq"]) if rows else -1


async def fence_events(db: AsyncDatabase, *, run_id: str) -> int:
    """Keep every earlier execution of a run from storing events (a worker taking it over does this first): a page
    of no events at the number after the last stored, the number the earlier execution's next page must start at.
    Return that last stored number (-1 when none)."""
    while True:
        last = await last_seq(db, run_id=run_id)
        try:
            await db.run_events.insert_one({"runId": run_id, "seq": last + 1, "last": last + 1, "at": now(),
                                            "events": []})
            return last
        except DuplicateKeyError:  # the earlier execution stored a page meanwhile: fence after it
            continue


async def mark_void(db: AsyncDatabase, *, run_id: str, seqs: list[int]) -> None:
    """Mark events as void: sent by a task that did not finish and will run again."""
    if not seqs:
        return
    wanted = set(seqs)
    query = {"runId": run_id, "seq": {"$lte": max(wanted)}, "last": {"$gte": min(wanted)}}
    async for page in db.run_events.find(query, {"seq": 1, "last": 1, "events": 1}):
        if "events" not in page:  # stored before pages: one event
            await db.run_events.update_one({"_id": page["_id"]}, {"$set": {"void": True}})
            continue
        mine = sorted(wanted & {event["seq"] for event in page["events"]})
        if mine:
            await db.run_events.update_one({"_id": page["_id"]}, {"$addToSet": {"voided": {"$each": mine}}})


async def migrate_events(db: AsyncDatabase) -> None:
    """Give events stored before pages, a document each, the `last` that pages are found by (once)."""
    if await db.migrations.find_one({"_id": "run_events.last"}) is None:
        await db.run_events.update_many({"last": {"$exists": False}}, [{"$set": {"last": "$seq"}}])
        await db.migrations.update_one({"_id": "run_events.last"}, {"$set": {"at": now()}}, upsert=True)


async def add_usage(db: AsyncDatabase, *, run_id: str, records: list[UsageRecord], lease: int | None = None) -> None:
    """Store the usage of model calls as they are made, so a resumed run still bills them (by the execution holding
    lease `lease`: see `add_usage_batches`).

    Raises:
        Fenced: another worker took the run over (`fence_usage`): the rows are not stored.
    """
    if (refused := (await add_usage_batches(db, [(run_id, records, lease)])).get(run_id)) is not None:
        raise refused


def _usage_query(run_id: str, lease: int | None) -> dict[str, Any]:
    # A run's usage rows stored on their own are one document (`_id` the run's id) that only an execution whose
    # lease is not older than the latest `fence_usage` may push to: a stale one's upsert meets the id, a duplicate.
    return {"_id": run_id, "lease": {"$not": {"$gt": lease or 0}}}


async def add_usage_batches(db: AsyncDatabase, batches: list[tuple[str, list[UsageRecord], int | None]]
                            ) -> dict[str, Fenced]:
    """`add_usage` for several runs in one command (each run at most once, with the lease its execution holds);
    return the runs whose rows were refused (another worker took them over), every other run's are stored."""
    at = now()
    writes, runs = [], []
    for run_id, records, lease in batches:
        if records:
            writes.append(UpdateOne(_usage_query(run_id, lease), {
                "$set": {"lease": lease or 0}, "$setOnInsert": {"runId": run_id},
                "$push": {"rows": {"$each": [{"at": at, **asdict(r)} for r in records]}}}, upsert=True))
            runs.append(run_id)
    if not writes:
        return {}
    try:
        await db.run_usage.bulk_write(writes, ordered=False)
    except BulkWriteError as exc:
        errors = exc.details.get("writeErrors", [])
        if exc.details.get("writeConcernErrors") or any(e.get("code") != DUPLICATE_KEY for e in errors):
            raise
        return {runs[e["index"]]: Fenced(f"run {runs[e['index']]}: usage refused, another worker holds the run")
                for e in errors}
    return {}


async def fence_usage(db: AsyncDatabase, *, run_id: str, lease: int) -> None:
    """Keep every execution of a run whose lease is older than `lease` from storing usage rows on their own (a
    worker taking the run over does this first; those riding in pages of events are fenced with them)."""
    await db.run_usage.update_one({"_id": run_id}, {"$max": {"lease": lease}, "$setOnInsert": {"runId": run_id}},
                                  upsert=True)


async def store_batch(db: AsyncDatabase, *, run_id: str, events: list[dict], usage: list[UsageRecord],
                      lease: int | None = None) -> None:
    """Store one execution's next events, then its usage rows, with the batches of every other run that came
    meanwhile (`store.group`: a hundred runs storing every quarter of a second cost a few commands a round).
    `lease`: the lease the execution holds (its usage rows stored without events are fenced by it, `fence_usage`).

    Raises:
        EventConflict: one of the events' numbers is taken (another worker took the run over); neither the rest
            of its events nor its usage rows are stored, while every other run's are.
        Fenced: its usage rows came without events, and another worker took the run over: they are not stored.
        EventTooLarge: one of the events is larger than a page of events may be; none of them, nor the usage
            rows, are stored (every other run's are).
    """
    if events or usage:
        await _batches(db, (run_id, events, usage, lease))


async def _store_batches(db: AsyncDatabase, items: list[tuple[str, list[dict], list[UsageRecord], int | None]]
                         ) -> list[Exception | None]:
    # Usage rows ride in their run's page; those that came without events go on their own.
    refused: dict[str, Exception] = dict(await append_batches(
        db, [(run_id, events) for run_id, events, _, _ in items if events],
        {run_id: usage for run_id, events, usage, _ in items if events}))
    refused.update(await add_usage_batches(db, [(run_id, usage, lease) for run_id, events, usage, lease in items
                                                if usage and not events]))
    return [refused.get(run_id) for run_id, _, _, _ in items]


_batches: Group[tuple[str, list[dict], list[UsageRecord], int | None], None] = Group("store event batches",
                                                                                    send=_store_batches)


async def list_usage(db: AsyncDatabase, *, run_id: str) -> list[dict[str, Any]]:
    """The usage of a run's model calls so far, oldest first: the fields of each `llm.usage.UsageRecord` stored
    (in the run's pages of events, and on their own)."""
    paged = db.run_events.find({"runId": run_id, "usage": {"$exists": True}}, {"at": 1, "usage": 1}).sort(
        "seq", ASCENDING)
    rows = [(page["at"], row) async for page in paged for row in page["usage"]]
    async for doc in db.run_usage.find({"runId": run_id}, {"runId": 0, "lease": 0}):
        # One document of rows per run (`add_usage_batches`); a row a document, as stored before leases had numbers.
        for row in doc.get("rows") or ([] if "rows" in doc or "at" not in doc else [doc]):
            rows.append((row["at"], {k: v for k, v in row.items() if k not in ("_id", "at")}))
    return [row for _, row in sorted(rows, key=lambda pair: pair[0])]
