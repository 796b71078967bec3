"""Benchmark the duel over HTTP against the scripted model at a fixed latency.

Parley and the scripted model server run as separate processes, so Parley's own CPU time can be
read from /proc without the model's. Prints:
  (a) wall time of one debate ÷ the model time on its critical path (and ÷ the sum of all calls);
  (b) Parley CPU milliseconds per chunk streamed from the model to the SSE client;
  (c) N concurrent debates on one worker (or `--workers W`): all complete? p50/p99/max gap between chunks of a turn;
and with (a) and (c), per debate: Parley's and the embedded database's CPU and the database operations and
bytes by collection and command (from Parley's /metrics, see bench/costs.py).

    .venv/bin/python bench/duel.py [--latency 0.05] [--token-delay 0.005] [--concurrent 100] [--workers 1]

MONGODB_URI picks the database (else an embedded one is started); BENCH_PARLEY_PYTHON_ARGS adds
interpreter options to the Parley process, e.g. "-m cProfile -o parley.prof" to profile it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.costs import (  # noqa: E402
    Meter,
    cpu_seconds,
    make_keys,
    percentile,
    start_process,
    tree_cpu_seconds,
)
from parley.core.embedded import database_server, free_port  # noqa: E402
from tests.support.sse import SseParser  # noqa: E402

# Three sentences, 147 characters: inside the 100–200 bounds, so every turn is kept whole (the text past
# 100 characters streams sentence by sentence, as the length rule requires).
TURN = ("Remote work widens the talent pool and cuts hours of commuting. Teams still need deliberate rituals "
        "to build trust. Large firms report steady output.")
OPPONENT = {"name": "Margaret Hale", "title": "Operations director", "bio": "Ran large teams for decades.",
            "stance": "Offices remain the better default.", "traits": ["pragmatic", "blunt", "precise"]}
JUDGEMENT = {"consensus": ["Trust takes effort"], "disagreements": ["Whether output holds"], "winner": "A",
             "winnerReason": "Speaker A gave more evidence.",
             "conclusion": "Remote work works with deliberate rituals.", "recommendations": ["Pilot hybrid schedules"]}
# A turn of 45 one-word sentences (180 characters): every model chunk becomes one SSE chunk.
MANY_CHUNKS = "Ok. " * 45


def rules(turn: str = TURN) -> list[dict]:
    return [
        {"match": "You cast debate opponents", "json": OPPONENT},
        {"match": "impartial debate judge", "json": JUDGEMENT},
        {"reply": turn},
    ]


def script(base_url: str, turn: str) -> None:
    control = base_url.removesuffix("/v1")
    httpx.post(control + "/_reset").raise_for_status()
    httpx.post(control + "/_script", json=rules(turn)).raise_for_status()


async def bare_call_seconds(base_url: str, kind: str, samples: int = 5) -> float:
    """Median time the scripted model takes for one call of `kind`, as a bare HTTP client sees it.

    This is the model's own latency (its configured delays plus its timer overshoot), measured
    the way Parley's calls are made: turns streamed, structured answers in one response.
    """
    prompt = {"turn": "Your turn.", "select": "You cast debate opponents", "judge": "impartial debate judge"}[kind]
    body: dict = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}
    if kind == "turn":
        body["stream"] = True
    else:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    times = []
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(samples):
            started = time.perf_counter()
            async with client.stream("POST", base_url + "/chat/completions", json=body) as resp:
                async for _ in resp.aiter_bytes():
                    pass
            times.append(time.perf_counter() - started)
    return statistics.median(times)


async def model_time(base_url: str, rounds: int) -> tuple[float, float]:
    """(critical path, sum of all calls) of the model's own time in one debate; the two judges run in parallel."""
    select, turn, judge = [await bare_call_seconds(base_url, kind) for kind in ("select", "turn", "judge")]
    return select + 2 * rounds * turn + judge, select + 2 * rounds * turn + 2 * judge


async def one_debate(client: httpx.AsyncClient, key: str, rounds: int) -> dict:
    """Run one debate; return its wall time, chunk count and the gaps between chunks within a turn."""
    gaps: list[float] = []
    chunks = 0
    last_chunk: float | None = None
    started = time.perf_counter()
    body = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada", "bio": "Engineer"},
            "rounds": rounds}
    parser = SseParser()
    async with client.stream("POST", "/api/debate", json=body, headers={"x-api-key": key}) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            event = parser.feed_line(line)
            if event is None:
                continue
            now = time.perf_counter()
            if event.event == "chunk":
                chunks += 1
                if last_chunk is not None:
                    gaps.append(now - last_chunk)
                last_chunk = now
            elif event.event in ("start", "message"):
                last_chunk = None
            elif event.event == "error":
                raise RuntimeError(event.data)
            elif event.event == "done":
                return {"wall": now - started, "chunks": chunks, "gaps": gaps, "done": True}
    return {"wall": time.perf_counter() - started, "chunks": chunks, "gaps": gaps, "done": False}


def db_pid(db_server) -> int | None:
    return db_server.process.pid if db_server is not None and db_server.process is not None else None


async def run(args: argparse.Namespace) -> None:
    """Start the database, the scripted model and Parley; measure; stop them whatever happens."""
    home = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    started: list[subprocess.Popen] = []
    db_server = None
    try:
        uri = os.environ.get("MONGODB_URI")
        if not uri:
            db_server = database_server(home).start(timeout=90)
            uri = db_server.url
        await measure(args, home, uri, started, db_pid(db_server))
    finally:
        for proc in reversed(started):
            # SIGINT lets uvicorn shut down cleanly (and a profiler wrapping Parley write its file).
            proc.send_signal(signal.SIGINT)
        for proc in started:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if db_server is not None:
            db_server.stop()


async def measure(args: argparse.Namespace, home: Path, uri: str, started: list[subprocess.Popen],
                  database_pid: int | None = None) -> None:
    db_name = "bench_" + uuid.uuid4().hex[:8]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MONGODB_", "PARLEY_"))}
    env["PYTHONPATH"] = str(ROOT)
    llm, ready = start_process(
        [sys.executable, "-m", "tests.support.scripted_llm", "--port", "0", "--latency", str(args.latency),
         "--token-delay", str(args.token_delay)], env, "READY")
    started.append(llm)
    base_url = ready.split()[1]
    script(base_url, TURN)
    port = free_port()
    parley_env = {**env, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "x", "OPENAI_MODEL": "openai:gpt-4o-mini",
                  "MONGODB_URI": uri, "MONGODB_DB": db_name, "PARLEY_HOME": str(home)}
    if args.workers > 1:  # /metrics answers for every worker (core/metrics.py), so the database counts are all of them
        metrics_dir = home / "metrics"
        metrics_dir.mkdir()
        parley_env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    parley, _ = start_process(
        [sys.executable, *os.environ.get("BENCH_PARLEY_PYTHON_ARGS", "").split(), "-m", "uvicorn",
         "parley.api.main:create_app", "--factory", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning", *(["--workers", str(args.workers)] if args.workers > 1 else [])],
        parley_env, None)
    started.append(parley)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300) as probe:
        for _ in range(200):
            try:
                if (await probe.get("/openapi.json")).status_code == 200:
                    break
            except httpx.TransportError:
                await asyncio.sleep(0.1)
    keys = await make_keys(uri, db_name, args.concurrent + 30, scopes=["debate"])
    limits = httpx.Limits(max_connections=args.concurrent + 10, max_keepalive_connections=args.concurrent + 10)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300, limits=limits) as client:
        await one_debate(client, keys.pop(), 1)  # warm-up: imports, connections, indexes

        critical, total = await model_time(base_url, args.rounds)
        meter = Meter(f"http://127.0.0.1:{port}", parley.pid, database_pid)
        meter.start()
        alone = [await one_debate(client, keys.pop(), args.rounds) for _ in range(3)]
        alone_costs = meter.stop()
        wall = statistics.median(r["wall"] for r in alone)
        alone_gaps = [g for r in alone for g in r["gaps"]]
        print(f"(a) one debate, {args.rounds} rounds, latency {args.latency * 1000:.0f} ms + "
              f"{args.token_delay * 1000:.0f} ms/chunk: wall {wall:.3f} s (median of 3); model time "
              f"{critical:.3f} s on the critical path, {total:.3f} s summed over all calls")
        print(f"    wall ÷ critical-path model time = {wall / critical:.3f}   "
              f"wall ÷ sum of model latencies = {wall / total:.3f}")
        print(f"    gap between chunks of a turn, one debate alone: "
              f"p50 {percentile(alone_gaps, 0.5) * 1000:.1f} ms, "
              f"p99 {percentile(alone_gaps, 0.99) * 1000:.1f} ms")
        print(alone_costs.line(3, "debate") + (" (database CPU not read: MONGODB_URI)" if not database_pid else ""))
        print(alone_costs.db.table(3, "database, per debate alone"), flush=True)

        async def batch_cpu(turn: str) -> tuple[float, int]:
            script(base_url, turn)
            cpu0 = tree_cpu_seconds(parley.pid)
            batch = await asyncio.gather(*[one_debate(client, keys.pop(), args.rounds) for _ in range(10)])
            return tree_cpu_seconds(parley.pid) - cpu0, sum(r["chunks"] for r in batch)

        cpu_few, chunks_few = await batch_cpu(TURN)
        cpu_many, chunks_many = await batch_cpu(MANY_CHUNKS)
        script(base_url, TURN)
        marginal = (cpu_many - cpu_few) / (chunks_many - chunks_few)
        print(f"(b) Parley CPU per streamed chunk, marginal: {marginal * 1000:.3f} ms  (10 debates with "
              f"{chunks_few} chunks took {cpu_few:.2f} s CPU, 10 with {chunks_many} chunks {cpu_many:.2f} s)")
        print(f"    amortised over all the process does (auth, storage, opponent, judges): "
              f"{cpu_few * 1000 / chunks_few:.3f} ms per chunk")

        if not args.concurrent:
            return
        cpu0, llm_cpu0, own_cpu0 = tree_cpu_seconds(parley.pid), cpu_seconds(llm.pid), time.process_time()
        meter.start()
        t0 = time.perf_counter()
        many = await asyncio.gather(*[one_debate(client, keys.pop(), args.rounds)
                                      for _ in range(args.concurrent)], return_exceptions=True)
        elapsed = time.perf_counter() - t0
        many_costs = meter.stop()
        cpu = tree_cpu_seconds(parley.pid) - cpu0
        llm_cpu, own_cpu = cpu_seconds(llm.pid) - llm_cpu0, time.process_time() - own_cpu0
        ok = [r for r in many if isinstance(r, dict) and r["done"]]
        gaps = [g for r in ok for g in r["gaps"]]
        chunks = sum(r["chunks"] for r in ok)
        workers = "one worker" if args.workers == 1 else f"{args.workers} workers"
        print(f"(c) {args.concurrent} concurrent debates on {workers}: {len(ok)}/{args.concurrent} completed in "
              f"{elapsed:.1f} s (one alone: {wall:.1f} s); {chunks} chunks; gap between chunks of a turn "
              f"p50 {percentile(gaps, 0.5) * 1000:.1f} ms, p99 {percentile(gaps, 0.99) * 1000:.1f} ms, "
              f"max {max(gaps) * 1000:.1f} ms")
        print(f"    CPU seconds in those {elapsed:.1f} s on {os.cpu_count()} cores: Parley {cpu:.1f} "
              f"({cpu * 1000 / max(chunks, 1):.3f} ms per chunk), scripted model {llm_cpu:.1f}, "
              f"SSE clients {own_cpu:.1f}; load average now {os.getloadavg()[0]:.1f}")
        print(many_costs.line(args.concurrent, "debate"))
        print(many_costs.db.table(args.concurrent, "database, per debate in (c)"))
        failures = [r for r in many if not (isinstance(r, dict) and r["done"])]
        if failures:
            print(f"    failures: {failures[:3]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds before the first token of each call")
    parser.add_argument("--token-delay", type=float, default=0.005, help="seconds between streamed chunks")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=100, help="debates at once in (c); 0 skips (c)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes of Parley")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
