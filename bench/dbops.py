"""What each kind of database command of the run engine costs the embedded database, alone, and how that grows
with what is stored.

Each command is sent `--reps` times, in the shape and size the engine sends it (the filters of
store/runs.py and of the checkpointer runs/checkpoints.py, documents of the sizes bench/dbcalls.py measured), against
the embedded database (`secantusd-py`), first empty and then holding `--stored` finished runs (each with
its events, usage rows and, with `--checkpoints`, its checkpoint document, as
PARLEY_RUN_KEEP_CHECKPOINTS=true leaves it). It prints the database process's CPU and the wall time per
command. Multiply by the counts per run of bench/dbcalls.py for the cost of each write and poll of a run.

With `--after-writes N`, each command again after N more writes (one small update each), sent first as Parley's
clients send them (not retryable: `core.embedded.EMBEDDED_DB_OPTIONS`) and then as retryable writes, pymongo's
default, which the server remembers for 30 minutes: what a busy half hour costs each command either way.

Run from the repository root:  .venv/bin/python bench/dbops.py [--reps 100] [--stored 10000] [--checkpoints]
                               [--after-writes 12000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pymongo import MongoClient  # noqa: E402

from bench.costs import cpu_seconds  # noqa: E402

ACTIVE = ["queued", "running"]
BLOB = b"x" * 2400  # a checkpoint saved whole (a graph's first): ~2.5 KB
DELTA = b"x" * 1200  # a checkpoint's changed channels: ~2 KB sent per delta put (bench/dbcalls.py, a duel)
WRITE = b"x" * 1500  # a task's writes: ~1.7 KB per put_writes


def indexes(db) -> None:
    from parley import store

    for collection, keys, options in store.INDEXES:
        db[collection].create_index(keys, **options)

def checkpoint_doc(run: str, ids: list[str]) -> dict:
    """A run's graph as runs/checkpoints.py stores it: its latest checkpoint, the writes against it, the ids."""
    return {"_id": {"thread_id": run, "checkpoint_ns": ""}, "thread_id": run, "checkpoint_ns": "",
            "checkpoint_id": ids[-1], "checkpoint": {"z": BLOB[:500]}, "metadata": {"p": b"m" * 150},
            "values": {"answers": {"v": 1, "list": True, "parts": [{"z": BLOB[:1900]}]}}, "ids": ids,
            "writes": [{"cid": ids[-1], "task_id": "t", "path": "", "part": {"z": WRITE}}]}


def seed(db, runs: int, checkpoints: bool, chunk: int = 500) -> float:
    """`runs` finished panel runs, each with 8 events, 4 usage rows and a billing row; seconds it took."""
    started, at = time.perf_counter(), datetime.now(UTC)
    for first in range(0, runs, chunk):
        ids = [f"old_{i}" for i in range(first, min(runs, first + chunk))]
        db.runs.insert_many([{"_id": r, "kind": "panel", "workspace": "bench", "user": "bench", "title": "t",
                              "input": {"messages": [{"role": "user", "content": "q" * 200}]}, "ref": {},
                              "status": "completed", "worker": "w0", "leaseUntil": None, "heartbeatAt": at,
                              "claims": 1, "cancelRequested": False, "createdAt": at, "startedAt": at,
                              "finishedAt": at, "updatedAt": at, "usage": {"calls": 4}, "result": {"a": "r" * 400},
                              "error": None} for r in ids])
        db.run_events.insert_many([{"runId": r, "seq": 0, "last": 7, "at": at,
                                    "events": [{"seq": s, "event": "answer", "data": {"t": "e" * 200}, "origin": None}
                                               for s in range(8)],
                                    "usage": [{"model": f"m{k}", "input_tokens": 10, "output_tokens": 10}
                                              for k in range(4)]} for r in ids])
        db.usage.insert_many([{"workspace": "bench", "user": "bench", "requestId": r, "mode": "panel",
                               "model": "m", "createdAt": at} for r in ids])
        if checkpoints:
            db.run_checkpoints.insert_many([checkpoint_doc(r, [f"c{s}" for s in range(3)]) for r in ids])
    return time.perf_counter() - started


def commands(db, k: int):
    """(name, command) pairs for the k-th live run, in the order one run sends them."""
    run, at = f"live_{k}", datetime.now(UTC)
    held = [run, f"live_{k - 1}"]
    yield "runs insert (create_run)", lambda: db.runs.insert_one(
        {"_id": run, "kind": "panel", "workspace": "bench", "status": "running", "worker": "w1",
         "leaseUntil": at + timedelta(seconds=5), "cancelRequested": False, "createdAt": at, "input": {"q": "q" * 900}})
    yield "runs find (cancelled_runs)", lambda: list(db.runs.find(
        {"_id": {"$in": held}, "cancelRequested": True}, {"_id": 1}))
    yield "runs update (renew_leases)", lambda: db.runs.update_many(
        {"_id": {"$in": held}, "worker": "w1", "status": {"$in": ACTIVE}},
        {"$set": {"leaseUntil": at + timedelta(seconds=5), "heartbeatAt": at}})
    yield "runs find (renew_leases)", lambda: list(db.runs.find(
        {"_id": {"$in": held}, "worker": "w1", "status": {"$in": ACTIVE}}, {"_id": 1}))
    yield "runs findAndModify (claim_expired)", lambda: db.runs.find_one_and_update(
        {"status": {"$in": ACTIVE}, "leaseUntil": {"$lt": at - timedelta(days=1)}},
        {"$set": {"worker": "w1"}, "$inc": {"claims": 1}}, sort=[("leaseUntil", 1)])
    graph = {"thread_id": run, "checkpoint_ns": ""}
    yield "run_checkpoints update (put, first: whole)", lambda: db.run_checkpoints.update_one(
        {"_id": graph}, {"$set": {"checkpoint_id": "c0", "checkpoint": {"z": BLOB[:500]}, "metadata": {"p": b"m" * 150},
                                  "values": {"messages": {"v": 1, "list": True, "parts": [{"z": BLOB[:1900]}]}}},
                         "$setOnInsert": graph, "$addToSet": {"ids": "c0"},
                         "$pull": {"writes": {"cid": {"$lt": "c0"}}}}, upsert=True)
    yield "run_checkpoints update (put, delta)", lambda: db.run_checkpoints.update_one(
        {"_id": graph, "checkpoint_id": "c0"},
        {"$set": {"checkpoint_id": "c1", "parent_id": "c0", "checkpoint": {"z": BLOB[:500]},
                  "metadata": {"p": b"m" * 150}, "values.messages.v": 2},
         "$push": {"values.messages.parts": {"z": DELTA}, "ids": "c1"},
         "$pull": {"writes": {"cid": {"$lt": "c1"}}}})
    yield "run_checkpoints update (put_writes)", lambda: db.run_checkpoints.update_one(
        {"_id": graph}, {"$push": {"writes": {"cid": "c1", "task_id": "t", "path": "", "part": {"z": WRITE}}},
                         "$setOnInsert": graph}, upsert=True)
    yield "run_events insert (a page of 4)", lambda: db.run_events.insert_one(
        {"runId": run, "seq": (first := time.perf_counter_ns()), "last": first + 3, "at": at,
         "events": [{"seq": first + s, "event": "chunk", "data": {"t": "e" * 500}, "origin": None} for s in range(4)]})
    yield "run_usage insert (add_usage)", lambda: db.run_usage.insert_many(
        [{"runId": run, "model": "m", "input_tokens": 10, "output_tokens": 10, "at": at}])
    yield "run_events find (events_after)", lambda: list(db.run_events.find(
        {"runId": run, "last": {"$gt": -1}}).sort("last", 1).limit(1000))
    yield "runs find (get_run)", lambda: db.runs.find_one({"_id": run})
    yield "run_checkpoints find (get_tuple)", lambda: db.run_checkpoints.find_one({"_id": graph})
    yield "runs update (finish)", lambda: db.runs.update_one(
        {"_id": run, "worker": "w1", "status": {"$in": ACTIVE}},
        {"$set": {"status": "completed", "result": {"a": "r" * 900}, "leaseUntil": None, "finishedAt": at}})
    yield "usage insert (record_usage)", lambda: db.usage.insert_many(
        [{"workspace": "bench", "requestId": run, "model": f"m{i}", "createdAt": at} for i in range(4)])
    yield "run_checkpoints delete (delete_thread)", lambda: db.run_checkpoints.delete_many({"thread_id": run})


def measure(db, pid: int, reps: int, offset: int) -> dict[str, tuple[float, float]]:
    """Per command: (database CPU ms, wall ms), over `reps` runs' worth of each."""
    cpu: dict[str, float] = {}
    wall: dict[str, float] = {}
    for k in range(offset, offset + reps):
        for name, send in commands(db, k):
            c0, t0 = cpu_seconds(pid), time.perf_counter()
            send()
            wall[name] = wall.get(name, 0.0) + time.perf_counter() - t0
            cpu[name] = cpu.get(name, 0.0) + cpu_seconds(pid) - c0
    return {name: (cpu[name] * 1000 / reps, wall[name] * 1000 / reps) for name in cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--stored", type=int, default=10_000, help="finished runs stored for the second round")
    parser.add_argument("--checkpoints", action="store_true", help="the stored runs keep 3 checkpoints each")
    parser.add_argument("--after-writes", type=int, default=0,
                        help="then each command after this many more writes, not retryable and retryable")
    args = parser.parse_args()

    from parley.core.embedded import database_server

    home = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    server = database_server(home / "db").start(timeout=90)
    client = MongoClient(server.url, tz_aware=True)
    try:
        pid = server.process.pid
        db = client.bench
        indexes(db)
        measure(db, pid, 5, 10_000_000)  # warm-up
        empty = measure(db, pid, args.reps, 0)
        took = seed(db, args.stored, args.checkpoints)
        print(f"seeded {args.stored} finished runs ({'with' if args.checkpoints else 'without'} checkpoints) "
              f"in {took:.0f} s", flush=True)
        stored = measure(db, pid, args.reps, args.reps)
        print(f"\nper command, {args.reps} reps (CPU resolution {1000 / 100:.0f} ms per tick: read the averages)")
        print(f"{'command':<46} {'empty: db CPU ms':>16} {'wall ms':>8} {'stored: db CPU ms':>18} {'wall ms':>8}")
        for name, (cpu, wall) in empty.items():
            cpu2, wall2 = stored[name]
            print(f"{name:<46} {cpu:16.2f} {wall:8.2f} {cpu2:18.2f} {wall2:8.2f}"
                  f"{'   <- grows' if cpu2 > 2 * cpu + 0.5 else ''}")
        if args.after_writes:
            after_writes(server.url, pid, args.reps, args.after_writes, stored)
    finally:
        client.close()
        server.stop()


def after_writes(url: str, pid: int, reps: int, writes: int, before: dict[str, tuple[float, float]]) -> None:
    """Each command after `writes` more writes: as Parley's clients send them, then as retryable writes."""
    columns = {}
    for label, options in (("parley", {}), ("retryable", {"retryWrites": True})):
        with MongoClient(url, tz_aware=True, **options) as client:
            for _ in range(writes):
                client.bench.filler.update_one({"_id": 0}, {"$inc": {"n": 1}}, upsert=True)
            columns[label] = measure(client.bench, pid, reps, (2 + len(columns)) * reps)
    print(f"\nafter {writes} more writes, db CPU ms per command (stored: as above)")
    print(f"{'command':<46} {'stored':>8} {'as Parley':>10} {'retryable':>10}")
    for name, (cpu, _) in before.items():
        print(f"{name:<46} {cpu:8.2f} {columns['parley'][name][0]:10.2f} {columns['retryable'][name][0]:10.2f}")


if __name__ == "__main__":
    main()
