"""The embedded model with and without llama.cpp's prompt cache: the README's duel and round table, wall time.

Each run starts a fresh embedded model server (so no run finds another's prompts cached), with the prompt cache
off (`prompt_cache_bytes=0`, as before issue 38) or on (`EMBEDDED_PROMPT_CACHE_BYTES`, the default), and runs one
debate through the graph in-process: the duel "Should remote work be the default?" for Ada, Engineer (5 rounds),
or the round table "Should we open a second office in Lyon?" with Claire (Finance), Marc (Sales) and the
devil's advocate, all three debate rounds (convergence off, so both sides of a pair run the same number of calls).
Every call is greedy (temperature 0), so both sides of a pair generate the same text and differ only in what
llama.cpp had to read: the log's prompt tokens read and generated, with their seconds, are printed per run.
Runs alternate off/on, then on/off, so a neighbour's load on the shared machine favours neither; the load average
is printed with each run.

Run from the repository root:  .venv/bin/python bench/prompt_cache.py [--runs 2] [--mode duel --mode roundtable]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parley.core.embedded import model_server  # noqa: E402
from parley.core.limits import EMBEDDED_PROMPT_CACHE_BYTES  # noqa: E402
from parley.core.settings import Settings  # noqa: E402
from parley.llm.factory import ModelFactory  # noqa: E402

TOPIC, USER = "Should remote work be the default?", {"name": "Ada", "bio": "Engineer"}
QUESTION = "Should we open a second office in Lyon?"
AGENTS = [{"id": "claire", "name": "Claire", "role": "Finance"}, {"id": "marc", "name": "Marc", "role": "Sales"}]


async def duel(factory: ModelFactory) -> str:
    from parley.graphs.duel import graph
    from parley.graphs.duel.steps import DuelContext

    ctx = DuelContext(models=factory, temperature=0.0, synthesis_temperature=0.0)
    result = await graph.ainvoke({"topic": TOPIC, "user_profile": USER}, context=ctx)
    return f"{len(result['messages'])} turns"


async def roundtable(factory: ModelFactory) -> str:
    from parley.graphs.roundtable import RoundTableContext, graph

    ctx = RoundTableContext(models=factory, convergence_threshold=1.01, temperature=0.0)
    result = await graph.ainvoke({"question": QUESTION, "topic": QUESTION, "agents": AGENTS}, context=ctx)
    return f"{result['total_rounds']} debate rounds, {len(result['transcript'])} turns"


MODES = {"duel": duel, "roundtable": roundtable}


def work(log: str) -> tuple[int, float, int, float]:
    """From llama.cpp's log: the prompt tokens it read (those no cached prefix covered) and the seconds it took, and
    the tokens it generated and the seconds they took."""
    tokens = sum(int(n) for n in re.findall(r"remaining (\d+) prompt tokens to eval", log))
    millis = sum(float(ms) for ms in re.findall(r"prompt eval time =\s+([\d.]+) ms", log))
    runs = re.findall(r"\s eval time =\s+([\d.]+) ms /\s+(\d+) runs", log)
    return tokens, millis / 1000, sum(int(n) for _, n in runs), sum(float(ms) for ms, _ in runs) / 1000


async def one_run(mode: str, cache_bytes: int) -> float:
    with tempfile.TemporaryDirectory() as home:
        server = model_server(Path(home), prompt_cache_bytes=cache_bytes).start(timeout=120)
        try:
            factory = ModelFactory(Settings(_env_file=None), local_base_url=server.url)
            started = time.perf_counter()
            what = await MODES[mode](factory)
            wall = time.perf_counter() - started
        finally:
            server.stop()
        read, reading, written, writing = work(server.log_path.read_text(errors="replace"))
    label = "cache on " if cache_bytes else "cache off"
    print(f"  {mode:<10} {label}  {wall:6.1f} s  ({what}); prompt tokens read {read} in {reading:.1f} s, "
          f"{written} generated in {writing:.1f} s; load average {os.getloadavg()[0]:.2f}", flush=True)
    return wall


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="pairs of runs (off and on) per mode")
    parser.add_argument("--mode", action="append", choices=sorted(MODES))
    args = parser.parse_args()
    print(f"embedded model on {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} before the runs")
    for mode in args.mode or list(MODES):
        walls: dict[int, list[float]] = {0: [], EMBEDDED_PROMPT_CACHE_BYTES: []}
        for run in range(args.runs):
            order = [0, EMBEDDED_PROMPT_CACHE_BYTES][:: 1 if run % 2 == 0 else -1]
            for cache_bytes in order:
                walls[cache_bytes].append(await one_run(mode, cache_bytes))
        off, on = statistics.median(walls[0]), statistics.median(walls[EMBEDDED_PROMPT_CACHE_BYTES])
        print(f"{mode}: median {off:.1f} s without the prompt cache, {on:.1f} s with it: x{on / off:.2f}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
