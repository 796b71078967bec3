"""CPU of one model call: the bare openai SDK against Parley's model layer (`ModelFactory.chat`), plain and streamed.

The scripted model answers at once (0 ms latency), so the figures are the client side's CPU per call (this
process's, `time.process_time`), with the server in a process of its own.

Run from the repository root:  .venv/bin/python bench/calls.py [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402

from tests.support.scripted_llm import spawn  # noqa: E402

QUESTION = "Explain the CAP theorem in two sentences."


async def measure(base_url: str, calls: int) -> None:
    from parley.core.settings import Settings
    from parley.llm.factory import ModelFactory
    from parley.llm.usage import UsageLedger

    factory = ModelFactory(Settings(_env_file=None, openai_base_url=base_url, openai_api_key="sk-bench"))
    raw = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
    messages = [{"role": "user", "content": QUESTION}]

    async def raw_stream() -> None:
        async for _ in await raw.chat.completions.create(model="gpt-5", messages=messages, stream=True,
                                                         stream_options={"include_usage": True}):
            pass

    async def parley_stream() -> None:
        async for _ in factory.chat("openai:gpt-5", ledger=UsageLedger(), label="x").astream([HumanMessage(QUESTION)]):
            pass

    variants = {
        "bare SDK, JSON": lambda: raw.chat.completions.create(model="gpt-5", messages=messages),
        "bare SDK, streamed": raw_stream,
        "Parley chat().ainvoke": lambda: factory.chat("openai:gpt-5", ledger=UsageLedger(), label="x").ainvoke(
            [HumanMessage(QUESTION)]),
        "Parley chat().astream": parley_stream,
    }
    for name, call in variants.items():
        for _ in range(5):  # warm-up: connections, clients
            await call()
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(calls):
            await call()
        print(f"{name:<24} CPU {(time.process_time() - cpu) * 1000 / calls:5.2f} ms a call   "
              f"wall {(time.perf_counter() - wall) * 1000 / calls:5.2f} ms", flush=True)
    await raw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    server, base_url = spawn(latency=0.0)
    try:
        asyncio.run(measure(base_url, args.calls))
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
