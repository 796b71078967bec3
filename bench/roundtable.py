"""Round-table benchmark: does a debate cost its slowest agent per round, and do prompts grow linearly?

Five agents and the devil's advocate debate three rounds after round 0 (one agent disagrees, so the
table never converges early). Every call to the scripted model takes `--latency` seconds. An agent's
turn is two calls (its streamed answer, then the extraction of its stance), so the floor of a debate
is 4 rounds x 2 calls + the synthesis (memory notes are written alongside it): 9 x latency. The floor
is also measured with the bare openai SDK making the same calls in the same pattern, without Parley.

Figures:
- wall / floor for the graph in-process and for Parley over HTTP (`POST /v1/conversations/{id}/message`);
- prompt tokens of debate rounds 1-3 / round 1 (linear growth gives 3.0), and of a whole 3-round
  debate / a whole 1-round debate.

Run from the repository root:  .venv/bin/python bench/roundtable.py [--latency 0.5] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import openai  # noqa: E402

from tests.support.scripted_llm import spawn  # noqa: E402

ROLES = ["Finance", "Sales", "Legal", "Operations", "HR"]
QUESTION = "We have 3 letters of intent in Lyon and 5 months of cash. Open an office now, wait, or hire remotely?"
TITLE = "Should we open a second office in Lyon?"


def script_split_table(base_url: str) -> None:
    """Agent 1 is against, the rest for: the table never reaches the threshold, so all rounds run."""
    root = base_url.removesuffix("/v1")
    rule = {"match": f"Agent1 ({ROLES[0]}) said:", "json": {"stance": "against", "confidence": 0.9,
                                                             "keyPoint": "Five months of cash is too thin."}}
    httpx.post(root + "/_script", json=rule).raise_for_status()
    httpx.post(root + "/_script", json={"model": "fast", "latency": 0.0}).raise_for_status()


def agents() -> list[dict]:
    return [{"id": f"a{i}", "name": f"Agent{i + 1}", "role": role, "persona": f"You defend the {role} view.",
             "isDevilsAdvocate": False, "memories": [], "documents": []} for i, role in enumerate(ROLES)]


async def raw_floor(client: openai.AsyncOpenAI, rounds: int) -> float:
    """The same call pattern with the bare SDK: per round six seats at once, two calls each; then the synthesis."""
    messages = [{"role": "user", "content": QUESTION}]

    async def turn() -> None:
        await client.chat.completions.create(model="scripted", messages=messages)
        await client.chat.completions.create(model="scripted", messages=messages)

    started = time.perf_counter()
    for _ in range(rounds + 1):
        await asyncio.gather(*[turn() for _ in range(6)])
    await client.chat.completions.create(model="scripted", messages=messages)
    return time.perf_counter() - started


async def sdk_floor(base_url: str) -> float:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench") as client:
        return await raw_floor(client, 3)


async def graph_run(factory, rounds: int, model: str | None = None):
    """One debate through the graph; return its wall time, result and context (with the run's ledger)."""
    from parley.graphs.roundtable import RoundTableContext, graph

    ctx = RoundTableContext(models=factory, model=model, max_rounds=rounds, convergence_threshold=1.01)
    started = time.perf_counter()
    result = await graph.ainvoke({"question": QUESTION, "topic": TITLE, "agents": agents()}, context=ctx)
    return time.perf_counter() - started, result, ctx


def prompt_tokens(rounds: list[dict], numbers: set[int]) -> int:
    return sum(u["inputTokens"] for r in rounds if r["roundNumber"] in numbers for u in r["usage"].values())


def report(name: str, walls: list[float], floors: list[float]) -> None:
    ratios = [w / f for w, f in zip(walls, floors, strict=True)]
    print(f"{name:<30} wall {statistics.median(walls) * 1000:7.0f} ms   floor {statistics.median(floors) * 1000:6.0f}"
          f" ms   ratio {statistics.median(ratios):.3f} (worst {max(ratios):.3f})", flush=True)


async def bench_graph(base_url: str, latency: float, runs: int) -> None:
    from parley.core.settings import Settings
    from parley.llm.factory import ModelFactory

    factory = ModelFactory(Settings(openai_base_url=base_url, openai_api_key="sk-bench",
                                    openai_model="openai:scripted"))
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench") as client:
        walls, floors = [], []
        for _ in range(runs):
            floors.append(await raw_floor(client, 3))
            wall, result, _ = await graph_run(factory, 3)
            assert result["total_rounds"] == 3, result["total_rounds"]
            walls.append(wall)
    report("graph, in-process", walls, floors)
    print(f"{'':<30} theoretical floor 9 x {latency:.2f} s = {9 * latency * 1000:.0f} ms; "
          f"wall / theoretical {statistics.median(walls) / (9 * latency):.3f}")

    # Token growth, on a zero-latency model so it costs nothing to measure.
    _, three, three_ctx = await graph_run(factory, 3, model="openai:fast")
    _, one, one_ctx = await graph_run(factory, 1, model="openai:fast")
    per_round = [prompt_tokens(three["rounds"], {n}) for n in range(4)]
    debate = prompt_tokens(three["rounds"], {1, 2, 3}) / prompt_tokens(three["rounds"], {1})
    whole = three_ctx.ledger.input_tokens / one_ctx.ledger.input_tokens
    print(f"prompt tokens per round 0..3: {per_round}")
    print(f"prompt tokens, debate rounds 1-3 / round 1: {debate:.3f}   (target <= 3.3)")
    print(f"prompt tokens, whole 3-round debate / whole 1-round debate: {whole:.3f}"
          f"   ({three_ctx.ledger.input_tokens} / {one_ctx.ledger.input_tokens})")


def bench_http(base_url: str, runs: int) -> None:
    """The same debate through Parley: embedded database, real HTTP, the transcript stored and billed."""
    from parley import store
    from parley.api.main import create_app
    from parley.store.keys import create_key
    from parley.core.embedded import database_server
    from parley.core.settings import Settings
    from tests.support.servers import ServerThread, run_sync

    home = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    db_server = database_server(home / "db").start(timeout=90)
    settings = Settings(openai_base_url=base_url, openai_api_key="sk-bench", openai_model="openai:scripted",
                        mongodb_uri=db_server.url, mongodb_db="bench_" + uuid.uuid4().hex[:8], parley_home=home)

    async def make_key() -> str:
        client, db = store.connect(settings.mongodb_uri, settings.mongodb_db)
        try:
            await store.ensure_indexes(db)
            return (await create_key(db, user="bench", workspace="bench", scopes=["conversations"]))[1]
        finally:
            await client.close()

    try:
        key = run_sync(make_key)
        headers = {"Authorization": f"Bearer {key}"}
        with ServerThread(create_app(settings)) as server, httpx.Client(base_url=server.url, timeout=300,
                                                                        headers=headers) as http:
            for agent in agents():
                http.post("/v1/agents", json={k: agent[k] for k in ("name", "role", "persona")}).raise_for_status()
            walls, floors = [], []
            for _ in range(runs):
                floors.append(asyncio.run(sdk_floor(base_url)))
                conversation = http.post("/v1/conversations", json={"title": TITLE}).json()["conversation"]
                started = time.perf_counter()
                resp = http.post(f"/v1/conversations/{conversation['id']}/message", json={"content": QUESTION})
                walls.append(time.perf_counter() - started)
                resp.raise_for_status()
                assert resp.json()["totalRounds"] == 3, resp.json()["totalRounds"]
            report("Parley over HTTP (JSON)", walls, floors)
    finally:
        db_server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    proc, base_url = spawn(latency=args.latency)
    try:
        script_split_table(base_url)
        print(f"scripted model latency {args.latency:.2f} s per call; 5 agents + devil's advocate, 3 debate rounds")
        await bench_graph(base_url, args.latency, args.runs)
        await asyncio.to_thread(bench_http, base_url, args.runs)
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    asyncio.run(main())
