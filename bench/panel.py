"""Panel mode benchmark: how close a debate's wall time comes to the models' own latency.

Every model call to the scripted server takes `--latency` seconds (500 ms by default). The floor of a
debate is one panelist round (they run in parallel) plus the arbitrator; it is measured, next to each
run, with the bare openai SDK (three calls at once, then one), so the machine's own per-call overhead
counts in the floor and only Parley's counts against it. The script reports wall / floor for

- the panel graph in-process (`graph.ainvoke`),
- Parley over HTTP (`POST /v1/chat/completions`, `model: router/debate`), JSON and streamed,
- a sequential baseline: the same three panelists asked one after another, then the arbitrator.

Run from the repository root:  .venv/bin/python bench/panel.py [--latency 0.5] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import openai  # noqa: E402

from tests.support.scripted_llm import spawn  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402

PANEL = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]
ARBITRATOR = "anthropic:claude-opus-4-5"
QUESTION = "Explain the CAP theorem in two sentences."


def summarise(name: str, walls: list[float], floors: list[float]) -> None:
    """Print median wall, median floor and the median and worst per-run ratio."""
    ratios = [w / f for w, f in zip(walls, floors, strict=True)]
    wall_ms, floor_ms = statistics.median(walls) * 1000, statistics.median(floors) * 1000
    print(f"{name:<36} wall {wall_ms:6.0f} ms   floor {floor_ms:6.0f} ms"
          f"   ratio {statistics.median(ratios):.3f} (worst {max(ratios):.3f})", flush=True)


async def raw_floor(raw: openai.AsyncOpenAI) -> float:
    """Slowest panelist + arbitrator with the bare openai SDK and no Parley: three calls at once, then one."""
    messages = [{"role": "user", "content": QUESTION}]
    started = time.perf_counter()
    await asyncio.gather(*[raw.chat.completions.create(model=m.split(":", 1)[1], messages=messages) for m in PANEL])
    await raw.chat.completions.create(model=ARBITRATOR.split(":", 1)[1], messages=messages)
    return time.perf_counter() - started


async def bench_in_process(factory, base_url: str, runs: int) -> dict[str, tuple[list[float], list[float]]]:
    from graphs.panel import PanelContext, graph
    from nodes.context import RunContext

    async def panel_graph() -> None:
        await graph.ainvoke({"messages": [{"role": "user", "content": QUESTION}], "models": PANEL,
                             "arbitrators": [ARBITRATOR]}, context=PanelContext(models=factory))

    async def sequential() -> None:
        ctx = RunContext(models=factory)
        answers = [(await ctx.chat(m).ainvoke([HumanMessage(QUESTION)])).content for m in PANEL]
        await ctx.chat(ARBITRATOR).ainvoke([HumanMessage("\n\n".join(answers))])

    out: dict[str, tuple[list[float], list[float]]] = {"graph": ([], []), "sequential": ([], [])}
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench") as raw:
        for i in range(runs + 1):  # the first round warms every client up and is not counted
            for name, run in (("graph", panel_graph), ("sequential", sequential)):
                floor = await raw_floor(raw)
                started = time.perf_counter()
                await run()
                if i:
                    out[name][0].append(time.perf_counter() - started)
                    out[name][1].append(floor)
    return out


async def bench_http(url: str, key: str, base_url: str, runs: int) -> dict[str, tuple[list[float], list[float]]]:
    """JSON and streamed debates through Parley's HTTP API, each run next to a bare-SDK floor."""
    body = {"model": "router/debate", "messages": [{"role": "user", "content": QUESTION}]}
    out: dict[str, tuple[list[float], list[float]]] = {"json": ([], []), "stream": ([], []), "first": ([], [])}
    async with (openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench") as raw,
                httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http):
        for i in range(runs + 1):
            floor = await raw_floor(raw)
            started = time.perf_counter()
            (await http.post("/v1/chat/completions", json=body)).raise_for_status()
            if i:
                out["json"][0].append(time.perf_counter() - started)
                out["json"][1].append(floor)
            floor = await raw_floor(raw)
            started, first = time.perf_counter(), None
            async with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as resp:
                async for line in resp.aiter_lines():
                    if first is None and line.startswith("data:"):
                        first = time.perf_counter() - started
            if i:
                out["stream"][0].append(time.perf_counter() - started)
                out["stream"][1].append(floor)
                out["first"][0].append(first)
                out["first"][1].append(floor)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.5, help="seconds each scripted model call takes")
    parser.add_argument("--runs", type=int, default=5, help="measured runs per variant (after one warm-up)")
    args = parser.parse_args()

    from api.main import create_app
    from store import connect, ensure_indexes
    from store.keys import create_key
    from store.workspaces import add_credit
    from core.embedded import database_server
    from core.settings import Settings
    from nodes.models import ModelFactory
    from tests.support.servers import ServerThread, run_sync

    scripted, base_url = spawn(latency=args.latency)
    home = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    db_server = database_server(home / "db").start(timeout=90)
    settings = Settings(_env_file=None, openai_base_url=base_url, openai_api_key="sk-bench",
                        mongodb_uri=db_server.url, mongodb_db="bench", parley_home=home,
                        parley_debate_models=PANEL, parley_arbitrator_model=ARBITRATOR)
    print(f"scripted latency {args.latency * 1000:.0f} ms per call; floor = slowest of 3 parallel bare-SDK calls "
          f"+ 1 bare-SDK call, measured next to each run; {args.runs} runs each (median, worst)\n", flush=True)
    try:
        factory = ModelFactory(settings)
        local = asyncio.run(bench_in_process(factory, base_url, args.runs))
        summarise("panel graph, in-process", *local["graph"])
        summarise("sequential baseline, in-process", *local["sequential"])

        async def provision() -> str:
            client, db = connect(db_server.url, "bench")
            await ensure_indexes(db)
            await add_credit(db, "bench", 100.0)
            key = (await create_key(db, user="bench", workspace="bench", scopes=["chat"]))[1]
            await client.close()
            return key

        key = run_sync(provision)
        with ServerThread(create_app(settings)) as server:
            remote = asyncio.run(bench_http(server.url, key, base_url, args.runs))
        summarise("HTTP debate, JSON", *remote["json"])
        summarise("HTTP debate, streamed", *remote["stream"])
        summarise("HTTP debate, streamed: first token", *remote["first"])
    finally:
        db_server.stop()
        scripted.terminate()
        scripted.wait(10)


if __name__ == "__main__":
    main()
