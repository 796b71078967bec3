"""Panel mode benchmark: how close a debate's wall time comes to the models' own latency.

Every model call to the scripted server takes `--latency` seconds (500 ms by default). The floor of a
debate is one panelist round (they run in parallel) plus the arbitrator; it is measured, next to each
run, with the bare openai SDK (three calls at once, then one), so the machine's own per-call overhead
counts in the floor and only Parley's counts against it. The script reports wall / floor for

- the panel graph in-process (`graph.ainvoke`),
- Parley over HTTP (`POST /v1/chat/completions`, `model: router/debate`), JSON and streamed,
- a sequential baseline: the same three panelists asked one after another, then the arbitrator;

and what a request costs besides the models, with Parley as its own process (`uvicorn`): CPU of Parley
and of the embedded database, and the database operations and bytes by collection and command (from
Parley's `/metrics`), per request for `--in-a-row` requests one after another and inside a `--burst`.

Run from the repository root:  .venv/bin/python bench/panel.py [--latency 0.5] [--runs 5] [--in-a-row 20]
[--burst 20] [--costs-only] [--turns 2000] [--probe]
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
    from parley.graphs.panel import PanelContext, graph
    from parley.nodes.context import RunContext

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


BODY = {"model": "router/debate", "messages": [{"role": "user", "content": QUESTION}]}


def transcript_body(turns: int) -> dict:
    """The request's body with `turns` earlier messages (user and assistant in turn, ~60 words each) before the
    question: a long conversation, as a chat client sends it."""
    earlier = [{"role": "assistant" if i % 2 else "user", "content": f"Turn {i}: " + "a fairly ordinary word " * 15}
               for i in range(turns)]
    return {**BODY, "messages": [*earlier, *BODY["messages"]]}


async def panel_request(http: httpx.AsyncClient, stream: bool = False, body: dict | None = None) -> float:
    """One panel request (JSON or streamed to its end); its wall time."""
    body = body or BODY
    started = time.perf_counter()
    if stream:
        async with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as resp:
            resp.raise_for_status()
            async for _ in resp.aiter_lines():
                pass
    else:
        (await http.post("/v1/chat/completions", json=body)).raise_for_status()
    return time.perf_counter() - started


class LoopProbe:
    """How long Parley's event loop takes to answer a trivial request (a 404) sent every 20 ms: its stalls."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http, self.times, self._task = http, [], None

    async def _run(self) -> None:
        while True:
            started = time.perf_counter()
            await self.http.get("/bench-probe-not-a-route")
            self.times.append(time.perf_counter() - started)
            await asyncio.sleep(0.02)

    def start(self) -> None:
        self.times, self._task = [], asyncio.create_task(self._run())

    async def stop(self) -> str:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        ms = sorted(t * 1000 for t in self.times)
        return (f"    event loop probe ({len(ms)} GETs, every 20 ms): median {statistics.median(ms):.1f} ms, "
                f"p99 {ms[int(len(ms) * 0.99)]:.1f} ms, max {ms[-1]:.1f} ms")


async def request_costs(url: str, key: str, meter, *, in_a_row: int, burst: int, title: str = "",
                        turns: int = 0, probe: bool = False) -> dict:
    """Costs per panel request: `in_a_row` requests one after another, then `burst` at once; print both.
    `turns` earlier messages go before the question; `probe` also times the event loop (its GETs cost CPU)."""
    limits = httpx.Limits(max_connections=burst + 10, max_keepalive_connections=burst + 10)
    out: dict = {}
    body = transcript_body(turns) if turns else BODY
    async with (httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600,
                                  limits=limits) as http,
                httpx.AsyncClient(base_url=url, timeout=60) as probe_http):
        prober = LoopProbe(probe_http) if probe else None
        await panel_request(http, body=body)  # warm-up: connections, imports, first checkpoint
        if in_a_row:
            if prober:
                prober.start()
            meter.start()
            walls = [await panel_request(http, body=body) for _ in range(in_a_row)]
            costs = meter.stop()
            out["one"], out["row"] = statistics.median(walls), costs
            print(f"{title}{in_a_row} panel requests in a row: median wall {statistics.median(walls) * 1000:.0f} ms",
                  flush=True)
            print(costs.line(in_a_row, "request"))
            if prober:
                print(await prober.stop())
            print(costs.db.table(in_a_row, "database, per request"), flush=True)
        if burst:
            if prober:
                prober.start()
            meter.start()
            started = time.perf_counter()
            walls = await asyncio.gather(*[panel_request(http, body=body) for _ in range(burst)])
            elapsed = time.perf_counter() - started
            costs = meter.stop()
            out["burst"], out["burst_costs"] = elapsed, costs
            ratio = f" = {elapsed / out['one']:.2f} x one request" if "one" in out else ""
            print(f"{title}{burst} concurrent panel requests: all answered in {elapsed:.2f} s{ratio} "
                  f"(slowest {max(walls):.2f} s)")
            print(costs.line(burst, "request"))
            if prober:
                print(await prober.stop())
            print(costs.db.table(burst, "database, per request in the burst"), flush=True)
    return out


def start_parley_for(db_url: str, base_url: str, home: Path, db_name: str = "bench"):
    """Parley as its own process on the bench's database and scripted model; (process, url)."""
    from bench.costs import start_parley
    from parley.core.embedded import free_port

    port = free_port()
    env = {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-bench", "MONGODB_URI": db_url, "MONGODB_DB": db_name,
           "PARLEY_HOME": str(home), "PARLEY_DEBATE_MODELS": ",".join(PANEL), "PARLEY_ARBITRATOR_MODEL": ARBITRATOR}
    return start_parley(env, port), f"http://127.0.0.1:{port}"


async def provision(db_url: str, db_name: str = "bench", credit: float = 1000.0) -> str:
    """Indexes, credit for the bench workspace and a chat key; the key."""
    from bench.costs import make_keys

    return (await make_keys(db_url, db_name, 1, scopes=["chat"], credit=credit, user="bench"))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.5, help="seconds each scripted model call takes")
    parser.add_argument("--runs", type=int, default=5, help="measured runs per variant (after one warm-up)")
    parser.add_argument("--in-a-row", type=int, default=20, help="requests one after another for the costs")
    parser.add_argument("--burst", type=int, default=20, help="concurrent requests for the costs (0 skips)")
    parser.add_argument("--costs-only", action="store_true", help="only the costs, not the wall ÷ floor runs")
    parser.add_argument("--turns", type=int, default=0,
                        help="earlier messages before the question in each request of the costs (a long conversation)")
    parser.add_argument("--probe", action="store_true",
                        help="time the event loop during the costs with a trivial GET every 20 ms (it costs CPU)")
    args = parser.parse_args()

    from parley.api.main import create_app
    from parley.core.embedded import database_server
    from parley.core.settings import Settings
    from parley.llm.factory import ModelFactory
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
        key = run_sync(lambda: provision(db_server.url))
        if not args.costs_only:
            factory = ModelFactory(settings)
            local = asyncio.run(bench_in_process(factory, base_url, args.runs))
            summarise("panel graph, in-process", *local["graph"])
            summarise("sequential baseline, in-process", *local["sequential"])
            with ServerThread(create_app(settings)) as server:
                remote = asyncio.run(bench_http(server.url, key, base_url, args.runs))
            summarise("HTTP debate, JSON", *remote["json"])
            summarise("HTTP debate, streamed", *remote["stream"])
            summarise("HTTP debate, streamed: first token", *remote["first"])
        if args.in_a_row or args.burst:
            from bench.costs import Meter, stop_process

            print("\nParley as its own process (uvicorn), costs per request:", flush=True)
            parley, url = start_parley_for(db_server.url, base_url, home)
            try:
                asyncio.run(request_costs(url, key, Meter(url, parley.pid, db_server.process.pid),
                                          in_a_row=args.in_a_row, burst=args.burst, turns=args.turns,
                                          probe=args.probe))
            finally:
                stop_process(parley)
    finally:
        db_server.stop()
        scripted.terminate()
        scripted.wait(10)


if __name__ == "__main__":
    main()
