"""Does a panel request cost more once many runs are stored? The same measurements on an empty database and
on one holding `--stored` finished runs (issue 16: "within 10 % of an empty database").

Parley runs as its own process (`uvicorn`) on the embedded database, the scripted model answers each
call after `--latency` seconds. Round 1 on the empty database, then `--stored` finished panel runs are
written straight into it (each with 8 events, 4 usage rows, a billing row and, with `--checkpoints`, its
checkpoint document, as PARLEY_RUN_KEEP_CHECKPOINTS=true leaves it; see bench/dbops.py), then
round 2. Each round: `--in-a-row` requests one after another (median wall, CPU and database operations
per request) and a `--burst` of concurrent requests (wall ÷ one request).

Run from the repository root:  .venv/bin/python bench/stored.py [--stored 10000] [--latency 0.5] [--burst 20]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pymongo import MongoClient  # noqa: E402

from bench.costs import Meter, stop_process  # noqa: E402
from bench.dbops import seed  # noqa: E402
from bench.panel import provision, request_costs, start_parley_for  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=10_000, help="finished runs stored before round 2")
    parser.add_argument("--checkpoints", action="store_true", help="the stored runs keep 3 checkpoints each")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds each scripted model call takes")
    parser.add_argument("--in-a-row", type=int, default=5)
    parser.add_argument("--burst", type=int, default=20)
    args = parser.parse_args()

    from parley.core.embedded import database_server
    from tests.support.scripted_llm import spawn
    from tests.support.servers import run_sync

    scripted, base_url = spawn(latency=args.latency)
    home = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    db_server = database_server(home / "db").start(timeout=90)
    parley = None
    try:
        key = run_sync(lambda: provision(db_server.url))
        parley, url = start_parley_for(db_server.url, base_url, home)
        meter = Meter(url, parley.pid, db_server.process.pid)
        print(f"scripted latency {args.latency * 1000:.0f} ms per call; {args.in_a_row} requests in a row, then "
              f"{args.burst} at once\n", flush=True)
        rounds = {}
        rounds["empty"] = asyncio.run(request_costs(url, key, meter, in_a_row=args.in_a_row, burst=args.burst,
                                                    title="[empty database] "))
        client = MongoClient(db_server.url, tz_aware=True)
        try:
            took = seed(client.bench, args.stored, args.checkpoints)
        finally:
            client.close()
        print(f"\nstored {args.stored} finished runs ({'with' if args.checkpoints else 'without'} checkpoints) "
              f"in {took:.0f} s\n", flush=True)
        time.sleep(2)
        rounds["stored"] = asyncio.run(request_costs(url, key, meter, in_a_row=args.in_a_row, burst=args.burst,
                                                     title=f"[{args.stored} runs stored] "))
        print(f"\n{'':24} {'one request':>12} {'burst':>8} {'burst ÷ one':>12} {'Parley CPU/req':>15} "
              f"{'db CPU/req':>11} {'db ops/req':>11}")
        for name, r in rounds.items():
            row, burst = r["row"], r["burst_costs"]
            print(f"{name:24} {r['one'] * 1000:9.0f} ms {r['burst']:6.2f} s {r['burst'] / r['one']:12.2f} "
                  f"{row.parley_cpu * 1000 / args.in_a_row:12.0f} ms {row.db_cpu * 1000 / args.in_a_row:8.0f} ms "
                  f"{row.db.total_ops / args.in_a_row:11.1f}")
        e, s = rounds["empty"], rounds["stored"]
        print(f"stored ÷ empty: one request {s['one'] / e['one']:.3f}, burst {s['burst'] / e['burst']:.3f}")
    finally:
        if parley is not None:
            stop_process(parley)
        db_server.stop()
        scripted.terminate()
        scripted.wait(10)


if __name__ == "__main__":
    main()
