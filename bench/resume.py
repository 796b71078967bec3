"""Benchmark how long a run waits after its worker is killed: lease expiry, then restore from the checkpoint.

Two `parley serve` workers share one database (an embedded one unless MONGODB_URI is set) and the scripted
model server. Each round starts a duel on a fresh worker, follows it on the other one, SIGKILLs the
holder after the debate's second message, and measures, from the kill:
  - claim: until the surviving worker holds the run (the lease expired and it claimed it);
  - resume: until the first event the surviving worker sends (the checkpoint restored, the half-streamed
    turn retracted, the graph running again).

    .venv/bin/python bench/resume.py [--rounds 5] [--lease 5] [--heartbeat 1] [--poll 0.25]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
from pymongo import AsyncMongoClient, MongoClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from parley import store  # noqa: E402
from parley.core.embedded import database_server  # noqa: E402
from parley.store.keys import create_key  # noqa: E402
from parley.store.runs import page_events  # noqa: E402
from tests.support.duel import USER_REPLY, script_duel  # noqa: E402
from tests.support.scripted_llm import ScriptedLLM  # noqa: E402
from tests.support.workers import Worker, follow  # noqa: E402


async def new_key(uri: str, db_name: str) -> str:
    client = AsyncMongoClient(uri)
    try:
        db = client[db_name]
        await store.ensure_indexes(db)
        return (await create_key(db, user="bench", workspace="bench", scopes=["debate"]))[1]
    finally:
        await client.close()


def one_round(follower: Worker, home: Path, key: str, db, settings: dict[str, str]) -> tuple[float, float]:
    """Kill a fresh holder mid-duel; return (seconds to claim, seconds to the first resumed event)."""
    holder = Worker(home, env=settings).wait_ready()
    try:
        body = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 5}
        with httpx.stream("POST", f"{holder.url}/api/debate", json=body, timeout=30,
                          headers={"Authorization": f"Bearer {key}"}) as started:
            run_id = started.headers["x-run-id"]
        messages = 0
        for event in follow(f"{follower.url}/v1/runs/{run_id}/events", key):
            messages += event.event == "message"
            if messages == 2:
                break
        holder.kill()
        killed = datetime.now(UTC)
        last = page_events(db.run_events.find({"runId": run_id}).sort("seq", 1))[-1]["seq"]
        for event in follow(f"{follower.url}/v1/runs/{run_id}/events?lastEventId={last}", key):
            if event.event == "done":
                break
        # The first page after the last event the killed holder stored (the fence has none).
        first = db.run_events.find_one({"runId": run_id, "seq": {"$gt": last}, "events.0": {"$exists": True}},
                                       sort=[("seq", 1)])
        run = db.runs.find_one({"_id": run_id})
        return (run["claimedAt"] - killed).total_seconds(), (first["at"] - killed).total_seconds()
    finally:
        holder.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--poll", type=float, default=0.25)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, ScriptedLLM() as llm:
        home = Path(tmp)
        server = None
        uri = os.environ.get("MONGODB_URI")
        if not uri:
            server = database_server(home / "db-home").start(timeout=90)
            uri = server.url
        db_name = "bench_resume_" + uuid.uuid4().hex[:8]
        os.environ.update({
            "MONGODB_URI": uri, "MONGODB_DB": db_name, "OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "sk-bench",
            "PARLEY_RUN_LEASE": str(args.lease), "PARLEY_RUN_HEARTBEAT": str(args.heartbeat),
            "PARLEY_RUN_POLL": str(args.poll),
        })
        llm.script(match="You are Ada,", reply=USER_REPLY, token_delay=0.05)
        script_duel(llm, opponent_turn={"token_delay": 0.05})
        key = asyncio.run(new_key(uri, db_name))
        sync = MongoClient(uri, tz_aware=True)
        settings = {"PARLEY_RUN_LEASE": str(args.lease), "PARLEY_RUN_HEARTBEAT": str(args.heartbeat),
                    "PARLEY_RUN_POLL": str(args.poll)}
        follower = Worker(home, env=settings).wait_ready()
        try:
            claims, resumes = [], []
            for n in range(args.rounds):
                claimed, resumed = one_round(follower, home, key, sync[db_name], settings)
                claims.append(claimed)
                resumes.append(resumed)
                print(f"round {n + 1}: claimed {claimed:.2f} s after the kill, "
                      f"first resumed event after {resumed:.2f} s", flush=True)
            print(f"lease {args.lease:g} s, heartbeat {args.heartbeat:g} s, poll {args.poll:g} s: "
                  f"resume delay median {statistics.median(resumes):.2f} s "
                  f"(min {min(resumes):.2f}, max {max(resumes):.2f}); claim median {statistics.median(claims):.2f} s")
        finally:
            follower.stop()
            sync.drop_database(db_name)
            sync.close()
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
