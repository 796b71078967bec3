"""The embedded model server's memory stays bounded with its prompt cache on (the real model, started as Parley
starts it): llama-cpp-python's RAM cache counted a saved state without the logits it held, and the server grew some
75 MB with each distinct debate-sized prompt, to 2.4 GB after 30 (bench/embedded_memory.py)."""

from __future__ import annotations

import httpx
import pytest

from tests.support.model_memory import ask, distinct_prompts, rss_bytes

pytestmark = pytest.mark.live

# Far below what 30 prompts grew it to; above the cache's capacity (core.limits.EMBEDDED_PROMPT_CACHE_BYTES) and
# the model's own needs.
BOUND = 1024 ** 3


def test_thirty_distinct_prompts_leave_the_embedded_model_server_under_a_gigabyte(embedded_model):
    peak = 0
    with httpx.Client() as client:
        for messages in distinct_prompts(30, start=1000):
            assert ask(client, embedded_model.url, messages)["usage"]["prompt_tokens"] > 300
            peak = max(peak, rss_bytes(embedded_model.process.pid))
    assert peak < BOUND, f"the embedded model server reached {peak / 2**20:.0f} MiB"
