"""What durable runs cost: a duel and a round table over HTTP, with this checkout and with a baseline checkout.

Both Parleys run as processes on one database and one scripted model server, and are asked in turn
(this one, the baseline, this one, ...), so load from elsewhere on the machine hits both alike. The
baseline is any other checkout of Parley, e.g. the last commit before the run engine:

    git worktree add ../parley-before 8ded09f
    .venv/bin/python bench/checkpointing.py --baseline ../parley-before [--runs 7]

Prints, for each mode, the median wall time of one run with each and the overhead in percent.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from pymongo import AsyncMongoClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.costs import start_process  # noqa: E402
from bench.duel import JUDGEMENT, OPPONENT, TURN  # noqa: E402
from bench.roundtable import QUESTION, ROLES, TITLE  # noqa: E402
from parley.core.embedded import database_server, free_port  # noqa: E402
from parley.store.keys import create_key  # noqa: E402

# The duel's opponent, turns (their prompts say "Round N of M") and judges; the round table's first agent always
# against, so it never converges early; everything else gets the scripted server's schema-valid defaults.
RULES = [
    {"match": "You cast debate opponents", "json": OPPONENT},
    {"match": "impartial debate judge", "json": JUDGEMENT},
    {"match": "Round ", "reply": TURN},
    {"match": f"Agent1 ({ROLES[0]}) said:",
     "json": {"stance": "against", "confidence": 0.9, "keyPoint": "Five months of cash is too thin."}},
]


class Parley:
    """One Parley process run from `checkout`, with a key for everything on its own database."""

    def __init__(self, checkout: Path, uri: str, model_url: str, home: Path) -> None:
        self.db_name = "bench_" + uuid.uuid4().hex[:8]
        self.uri = uri
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MONGODB_", "PARLEY_"))}
        env.update(PYTHONPATH=str(checkout), OPENAI_BASE_URL=model_url, OPENAI_API_KEY="x",
                   OPENAI_MODEL="openai:gpt-4o-mini", MONGODB_URI=uri, MONGODB_DB=self.db_name,
                   PARLEY_HOME=str(home / self.db_name))
        command = [sys.executable, "-m", "uvicorn", "parley.api.main:create_app", "--factory", "--host", "127.0.0.1",
                   "--port", str(port), "--log-level", "warning"]
        self.proc, _ = start_process(command, env, None, cwd=checkout)
        self.url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(self.url + "/openapi.json", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        self.headers = {"Authorization": f"Bearer {asyncio.run(self._key())}"}
        self.http = httpx.Client(base_url=self.url, headers=self.headers, timeout=300)
        for i, role in enumerate(ROLES):
            self.http.post("/v1/agents", json={"name": f"Agent{i + 1}", "role": role,
                                               "persona": f"You defend the {role} view."}).raise_for_status()

    async def _key(self) -> str:
        client = AsyncMongoClient(self.uri)
        try:
            db = client[self.db_name]
            return (await create_key(db, user="bench", workspace="bench", scopes=["admin"]))[1]
        finally:
            await client.close()

    def duel(self, rounds: int) -> float:
        body = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": rounds}
        started = time.perf_counter()
        with self.http.stream("POST", "/api/debate", json=body) as resp:
            for line in resp.iter_lines():
                if line == "event: done":
                    return time.perf_counter() - started
                if line == "event: error":
                    raise RuntimeError("the duel failed")
        raise RuntimeError("the duel's stream ended early")

    def round_table(self) -> float:
        conversation = self.http.post("/v1/conversations", json={"title": TITLE}).json()["conversation"]
        started = time.perf_counter()
        resp = self.http.post(f"/v1/conversations/{conversation['id']}/message", json={"content": QUESTION})
        wall = time.perf_counter() - started
        resp.raise_for_status()
        return wall

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(30)


def compare(name: str, ours: list[float], theirs: list[float]) -> None:
    mine, base = statistics.median(ours), statistics.median(theirs)
    print(f"{name}: this checkout {mine:.3f} s, baseline {base:.3f} s (medians of {len(ours)}): "
          f"overhead {100 * (mine / base - 1):+.1f} %", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="another checkout of Parley")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds before a call's first token")
    parser.add_argument("--token-delay", type=float, default=0.005, help="seconds between streamed chunks")
    parser.add_argument("--rounds", type=int, default=5, help="duel rounds")
    parser.add_argument("--modes", default="duel,roundtable", help="which to measure (comma list)")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    db_server = None
    uri = os.environ.get("MONGODB_URI")
    if not uri:
        db_server = database_server(home).start(timeout=90)
        uri = db_server.url
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    llm, ready = start_process([sys.executable, "-m", "tests.support.scripted_llm", "--port", "0", "--latency",
                                str(args.latency), "--token-delay", str(args.token_delay)], env, "READY")
    model_url = ready.split()[1]
    control = model_url.removesuffix("/v1")
    httpx.post(control + "/_script", json=RULES).raise_for_status()
    parleys = []
    try:
        parleys = [Parley(ROOT, uri, model_url, home), Parley(args.baseline.resolve(), uri, model_url, home)]
        for parley in parleys:  # warm-up: imports, connections, indexes
            parley.duel(1)
        duels: list[list[float]] = [[], []]
        tables: list[list[float]] = [[], []]
        modes = args.modes.split(",")
        for _ in range(args.runs if "duel" in modes else 0):
            for i, parley in enumerate(parleys):
                duels[i].append(parley.duel(args.rounds))
        if duels[0]:
            compare(f"duel, {args.rounds} rounds, {args.latency * 1000:.0f} ms + "
                    f"{args.token_delay * 1000:.0f} ms/chunk", *duels)
        for _ in range(args.runs if "roundtable" in modes else 0):
            for i, parley in enumerate(parleys):
                tables[i].append(parley.round_table())
        if tables[0]:
            compare(f"round table, 5 agents + devil's advocate, 3 debate rounds, {args.latency * 1000:.0f} ms a call",
                    *tables)
    finally:
        for parley in parleys:
            parley.stop()
        llm.terminate()
        llm.wait(30)
        if db_server is not None:
            db_server.stop()


if __name__ == "__main__":
    main()
