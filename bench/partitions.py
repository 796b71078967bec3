"""Benchmark scale-out across hosts that lose each other: the resume delay and the work done twice.

Three `parley serve` workers, each in a network namespace of its own (`tests.support.hosts`, as
tests/runs/test_partitions.py makes them; run as root), on one embedded database and the scripted model server. Each
round starts a run of five slow model calls (`STEPS`) on host 1, follows it from host 2, and then either SIGKILLs host
1's worker (`kill`) or cuts host 1 from the database for 2.5 leases (`cut`, its model call in flight), and measures:
  - claim: from the kill or cut until another worker holds the run (its `claimedAt`);
  - resume: until the follower's first event of the new execution (numbered past the fence it stored);
  - calls twice: model calls made more than once for one step (target: at most the one interrupted);
  - events twice: events a client that applies `retract` sees more than once (target: 0);
  - late calls: model calls host 1 made more than a lease after the cut (target: 0).

    sudo .venv/bin/python bench/partitions.py [--rounds 3] [--lease 2] [--heartbeat 0.5] [--poll 0.1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.hosts import STEP_COUNT, cluster, last_id, step_of  # noqa: E402
from tests.support.netns import require_root  # noqa: E402
from tests.support.workers import apply_retracts  # noqa: E402


def one_round(case: str, settings: dict[str, str], lease: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home, cluster(Path(home), env=settings) as net:
        net.script_steps()
        holder, follower = net.workers[0], net.workers[1]
        run_id = net.start_steps(holder)
        events: list = []
        arrivals: list[float] = []

        def follow() -> None:
            after = None
            while not events or events[-1].event not in ("done", "error", "cancelled"):
                net.follow_run(follower, run_id, after=after, into=events, times=arrivals)
                after = last_id(events)

        following = threading.Thread(target=follow)
        following.start()
        net.wait_for_call(holder, 2)
        net.wait_step_saved(run_id, 1)  # only the call in flight may be asked again
        cut_at, cut_wall = time.monotonic(), datetime.now(UTC)
        if case == "kill":
            holder.kill()
        else:
            net.net.cut(net.host_of(holder), net.net.db)
        claimed = net.wait_for(lambda: (r := net.db.runs.find_one({"_id": run_id}))["lease"] > 1 and r, "a take-over")
        if case == "cut":
            time.sleep(max(0.0, cut_at + 2.5 * lease - time.monotonic()))
            net.net.heal(net.host_of(holder), net.net.db)
        following.join(120)
        fence = max(page["seq"] for page in net.db.run_events.find({"runId": run_id, "events": []}))
        first_new = next(at for at, event in zip(arrivals, events, strict=True) if event.id and int(event.id) > fence)
        kept = apply_retracts(events)
        ids = Counter(e.id for e in kept if e.id)
        asked = Counter(step_of(body) for _, _, body in net.llm.calls)
        return {
            "claim": (claimed["claimedAt"] - cut_wall).total_seconds(),
            "resume": first_new - cut_at,
            "calls twice": sum(n - 1 for n in asked.values()),
            "events twice": sum(n - 1 for n in ids.values())
            + sum(n - 1 for n in Counter(e.json()["node"] for e in kept if e.event == "node_end").values()),
            "late calls": len(net.calls(holder, after=cut_at + lease)) if case == "cut" else 0,
            "steps": len(asked) == STEP_COUNT,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--poll", type=float, default=0.1)
    args = parser.parse_args()
    require_root()
    settings = {"PARLEY_RUN_LEASE": str(args.lease), "PARLEY_RUN_HEARTBEAT": str(args.heartbeat),
                "PARLEY_RUN_POLL": str(args.poll)}
    print(f"lease {args.lease:g} s, heartbeat {args.heartbeat:g} s, poll {args.poll:g} s; {args.rounds} round(s) each")
    for case in ("kill", "cut"):
        rounds = [one_round(case, settings, args.lease) for _ in range(args.rounds)]
        for n, row in enumerate(rounds, 1):
            print(f"  {case} {n}: claim {row['claim']:.2f} s, resume {row['resume']:.2f} s, calls twice "
                  f"{row['calls twice']}, events twice {row['events twice']}, late calls {row['late calls']}")
        print(f"{case}: claim {statistics.median(r['claim'] for r in rounds):.2f} s, resume (median) "
              f"{statistics.median(r['resume'] for r in rounds):.2f} s, calls made twice (most) "
              f"{max(r['calls twice'] for r in rounds)}, events seen twice {sum(r['events twice'] for r in rounds)}, "
              f"late calls {sum(r['late calls'] for r in rounds)}, every step run {all(r['steps'] for r in rounds)}")


if __name__ == "__main__":
    main()
