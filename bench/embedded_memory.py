"""The embedded model server's memory with its prompt cache: resident size after distinct prompts.

Starts the embedded model server as Parley starts it (`core.embedded.model_server`, the prompt cache on at
`EMBEDDED_PROMPT_CACHE_BYTES`, or `--cache-bytes 0` for none), sends it distinct debate-sized prompts
(`tests.support.model_memory`: a ~300-token system message and a line of each prompt's own, 4 tokens answered,
greedy), and prints the server's RSS every `--every` prompts and at the end, with the prompt tokens llama.cpp read.

Run from the repository root:  .venv/bin/python bench/embedded_memory.py [--prompts 200] [--cache-bytes N]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from parley.core.embedded import model_server  # noqa: E402
from parley.core.limits import EMBEDDED_PROMPT_CACHE_BYTES  # noqa: E402
from tests.support.model_memory import ask, distinct_prompts, rss_bytes  # noqa: E402

MB = 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--cache-bytes", type=int, default=EMBEDDED_PROMPT_CACHE_BYTES)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        server = model_server(Path(home), prompt_cache_bytes=args.cache_bytes).start(timeout=120)
        try:
            pid = server.process.pid
            print(f"prompt cache {args.cache_bytes / MB:.0f} MiB; {os.cpu_count()} cores, load average "
                  f"{os.getloadavg()[0]:.2f}; RSS after start {rss_bytes(pid) / MB:.0f} MiB", flush=True)
            started, peak, prompt_tokens = time.perf_counter(), 0, 0
            with httpx.Client() as client:
                for n, messages in enumerate(distinct_prompts(args.prompts), 1):
                    prompt_tokens = ask(client, server.url, messages)["usage"]["prompt_tokens"]
                    peak = max(peak, rss := rss_bytes(pid))
                    if n % args.every == 0 or n == args.prompts:
                        print(f"  after {n:4d} prompts: RSS {rss / MB:6.0f} MiB", flush=True)
            elapsed = time.perf_counter() - started
        finally:
            server.stop()
        log = server.log_path.read_text(errors="replace")
        read = sum(int(t) for t in re.findall(r"remaining (\d+) prompt tokens to eval", log))
        print(f"final RSS {rss / MB:.0f} MiB, peak {peak / MB:.0f} MiB after {args.prompts} prompts of "
              f"{prompt_tokens} tokens each in {elapsed:.0f} s ({read} prompt tokens read past a reused prefix)")


if __name__ == "__main__":
    main()
