"""Benchmark the embedded model as Parley serves it: first-token latency, tokens/s and memory.

Run: `.venv/bin/python bench/model.py [--runs N] [--max-tokens N]` (or `make bench`). Prints figures
for the raw server and through Parley's model layer, and the layer's overhead as a ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402

from parley.core.embedded import model_server  # noqa: E402
from parley.core.settings import Settings  # noqa: E402
from parley.llm.factory import ModelFactory  # noqa: E402

PROMPT = "Explain in a few sentences why the sky is blue."


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def raw_stream(base_url: str, max_tokens: int) -> tuple[float, int, float]:
    """First-token seconds, streamed chunks and total seconds, straight from the server."""
    body = {"model": "smollm2", "messages": [{"role": "user", "content": PROMPT}], "stream": True,
            "max_tokens": max_tokens, "temperature": 0, "repeat_penalty": 1.3}
    chunks, first = 0, None
    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=120) as client:
        async with client.stream("POST", base_url + "/chat/completions", json=body) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data: ") and '"content"' in line:
                    first = first or time.perf_counter() - start
                    chunks += 1
    return first or 0.0, chunks, time.perf_counter() - start


async def layer_stream(factory: ModelFactory, max_tokens: int) -> tuple[float, int, float]:
    """The same through Parley's model layer (context guard, quirks, usage accounting)."""
    chat = factory.chat("local:smollm2", max_tokens=max_tokens, temperature=0)
    chunks, first = 0, None
    start = time.perf_counter()
    async for chunk in chat.astream([HumanMessage(PROMPT)]):
        if chunk.content:
            first = first or time.perf_counter() - start
            chunks += 1
    return first or 0.0, chunks, time.perf_counter() - start


def summarise(name: str, runs: list[tuple[float, int, float]]) -> tuple[float, float]:
    ttft = statistics.median(r[0] for r in runs)
    tps = statistics.median(r[1] / (r[2] - r[0]) for r in runs if r[2] > r[0])
    print(f"{name:<22} first token {ttft * 1000:7.1f} ms   {tps:6.1f} tokens/s   "
          f"({statistics.median(r[1] for r in runs):.0f} tokens a run)")
    return ttft, tps


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        started = time.perf_counter()
        server = model_server(Path(home)).start(timeout=120)
        ready = time.perf_counter() - started
        try:
            factory = ModelFactory(Settings(_env_file=None), local_base_url=server.url)
            await raw_stream(server.url, 8)  # warm-up
            raw, layer = [], []
            for _ in range(args.runs):  # interleaved, so load and llama.cpp's prompt cache favour neither
                raw.append(await raw_stream(server.url, args.max_tokens))
                layer.append(await layer_stream(factory, args.max_tokens))
            print(f"embedded model: SmolLM2-135M-Instruct Q4_1 on llama-cpp-python, ready in {ready:.2f} s, "
                  f"RSS {rss_mb(server.process.pid):.0f} MB")
            raw_ttft, raw_tps = summarise("raw server", raw)
            layer_ttft, layer_tps = summarise("Parley model layer", layer)
            print(f"layer / raw: first token x{layer_ttft / raw_ttft:.3f}, throughput x{layer_tps / raw_tps:.3f}")
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
