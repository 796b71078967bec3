"""What a stored Responses conversation adds to the database per turn (issue 45, bug 4: every turn stored the whole
conversation again, in its response and in its run).

A first response of `--first-bytes` of text, then `--turns` responses of `--turn-bytes` each, every one continuing
the last (`previous_response_id`), on the scripted model (no latency). After each turn: the BSON bytes of its response
document, of its run document and of its run's event pages, and the wall time of the request.

Run from the repository root:  .venv/bin/python bench/responses_storage.py [--turns 20] [--first-bytes 3500000]
On another checkout's code (its own virtual environment, this script read from here):
    /work/main/.venv/bin/python bench/responses_storage.py --repo /work/main
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20, help="short turns after the first, long one")
    parser.add_argument("--first-bytes", type=int, default=3_500_000, help="characters of the first input")
    parser.add_argument("--turn-bytes", type=int, default=110, help="characters of each later input")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose Parley and test support run")
    args = parser.parse_args()
    sys.path.insert(0, str(args.repo.resolve()))

    import bson
    import httpx
    from pymongo import MongoClient

    from bench.costs import make_keys
    from parley.api.main import create_app
    from parley.core.embedded import database_server
    from parley.core.settings import Settings
    from tests.support.scripted_llm import spawn
    from tests.support.servers import ServerThread, run_sync

    scripted, base_url = spawn()
    home = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    db_server = database_server(home / "db").start(timeout=90)
    settings = Settings(_env_file=None, openai_base_url=base_url, openai_api_key="sk-bench",
                        mongodb_uri=db_server.url, mongodb_db="bench", parley_home=home)
    mongo = MongoClient(db_server.url, tz_aware=True)
    db = mongo.bench
    try:
        [key] = run_sync(lambda: make_keys(db_server.url, "bench", 1, scopes=["chat"], credit=1000.0))
        with ServerThread(create_app(settings)) as server, httpx.Client(
                base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=300) as http:
            print(f"code: {args.repo.resolve()}; first input {args.first_bytes:,} characters, then {args.turns} "
                  f"turns of {args.turn_bytes} each\n")
            print(f"{'turn':>4} {'response doc':>13} {'run doc':>12} {'run events':>11} {'turn total':>12} "
                  f"{'wall':>8}")
            previous, totals = None, []
            for turn in range(args.turns + 1):
                size = args.first_bytes if turn == 0 else args.turn_bytes
                started = time.perf_counter()
                answered = http.post("/v1/responses", json={
                    "model": "openai:gpt-4o", "input": (f"{turn} " + "rain " * size)[:size],
                    "previous_response_id": previous})
                wall = time.perf_counter() - started
                answered.raise_for_status()
                previous = answered.json()["id"]
                doc = db.responses.find_one({"_id": previous})
                run = db.runs.find_one({"_id": doc["run"]})
                events = sum(len(bson.encode(page)) for page in db.run_events.find({"runId": doc["run"]}))
                sizes = (len(bson.encode(doc)), len(bson.encode(run)), events)
                totals.append(sum(sizes))
                print(f"{turn:>4} {sizes[0]:>13,} {sizes[1]:>12,} {sizes[2]:>11,} {sum(sizes):>12,} "
                      f"{wall * 1000:>6.0f} ms", flush=True)
            later = totals[1:]
            print(f"\nthe {len(later)} short turns stored {sum(later):,} bytes in all ({sum(later) / len(later):,.0f} "
                  f"a turn, {sum(later) / len(later) / args.turn_bytes:,.0f} x their input); the first turn "
                  f"{totals[0]:,}")
    finally:
        mongo.close()
        db_server.stop()
        scripted.terminate()
        scripted.wait(10)


if __name__ == "__main__":
    main()
