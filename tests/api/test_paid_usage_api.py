"""What a debate paid, over HTTP with the official openai SDK against the scripted model server: the cached and
reasoning tokens its models reported, and what they cost, in `usage`, `_meta` (per panelist and in total), the
Responses API's `usage`, the run's usage (`GET /v1/runs/{id}`) and its usage rows."""

from __future__ import annotations

import pytest

from tests.api.test_panel_api import ARBITRATOR, PANEL, api, client, key, server  # noqa: F401

QUESTION = [{"role": "user", "content": "Explain the CAP theorem and when a team should trade consistency. " * 8}]
CACHED, REASONING = 64, 500  # gpt-5's: 64 prompt tokens read from the cache, 500 spent reasoning


def meta(response) -> dict:
    return response.model_extra["_meta"]


def script_debate(llm) -> None:
    llm.script(model="gpt-5", reply="Pick two, under partition.", reasoning_tokens=REASONING, cached_tokens=CACHED)
    llm.script(model="claude-sonnet-4-5", reply="Trade-offs.", cached_tokens=CACHED)
    llm.script(model="gemini-2.5-pro", reply="Partitions happen.")
    llm.script(model="claude-opus-4-5", reply="The synthesis.")


def expected_costs() -> tuple[float, float]:
    """(cached, reasoning) USD at the built-in prices: gpt-5 and claude-sonnet-4-5 cached, gpt-5 reasoning."""
    return (CACHED * 0.125 + CACHED * 0.30) / 1e6, REASONING * 10.0 / 1e6


def test_a_debate_shows_its_cached_and_reasoning_tokens_in_usage_meta_and_the_run(client, api, llm, sync_db):
    script_debate(llm)
    raw = client.chat.completions.with_raw_response.create(model="router/debate", messages=QUESTION)
    resp = raw.parse()
    assert resp.usage.prompt_tokens_details.cached_tokens == 2 * CACHED
    assert resp.usage.completion_tokens_details.reasoning_tokens == REASONING
    assert resp.usage.completion_tokens > REASONING
    m = meta(resp)
    cached_cost, reasoning_cost = expected_costs()
    assert (m["cachedTokens"], m["reasoningTokens"]) == (2 * CACHED, REASONING)
    assert m["cachedCostUsd"] == pytest.approx(cached_cost) and m["reasoningCostUsd"] == pytest.approx(reasoning_cost)
    assert m["cost"] > m["reasoningCostUsd"] + m["cachedCostUsd"]
    debate = m["debate"]
    assert (debate["cachedTokens"], debate["reasoningTokens"]) == (2 * CACHED, REASONING)
    seats = {p["model"]: p for p in debate["panelists"]}
    assert (seats["openai:gpt-5"]["cachedTokens"], seats["openai:gpt-5"]["reasoningTokens"]) == (CACHED, REASONING)
    assert (seats["anthropic:claude-sonnet-4-5"]["cachedTokens"],
            seats["anthropic:claude-sonnet-4-5"]["reasoningTokens"]) == (CACHED, 0)
    assert seats["google:gemini-2.5-pro"]["cachedTokens"] == 0
    # gpt-5's seat costs its reasoning as output and its cached prompt at the cached price.
    gpt5 = seats["openai:gpt-5"]
    assert gpt5["tokens"] > REASONING and gpt5["cost"] > REASONING * 10.0 / 1e6

    run = api.get(f"/v1/runs/{raw.headers['x-run-id']}").json()
    assert (run["usage"]["cachedTokens"], run["usage"]["reasoningTokens"]) == (2 * CACHED, REASONING)
    assert run["usage"]["costUsd"] == pytest.approx(m["cost"])
    assert run["usage"]["reasoningCostUsd"] == pytest.approx(reasoning_cost)
    rows = {r["model"]: r for r in sync_db.usage.find({"requestId": resp.id})}
    assert rows["openai:gpt-5"]["cachedTokens"] == CACHED and rows["openai:gpt-5"]["reasoningTokens"] == REASONING
    assert rows[ARBITRATOR]["cachedTokens"] == 0
    assert sum(r["costUsd"] for r in rows.values()) == pytest.approx(m["cost"])


def test_a_streamed_debate_ends_with_the_same_figures(client, llm):
    script_debate(llm)
    chunks = list(client.chat.completions.create(model="router/debate", messages=QUESTION, stream=True))
    last = chunks[-1]
    assert last.usage.prompt_tokens_details.cached_tokens == 2 * CACHED
    assert last.usage.completion_tokens_details.reasoning_tokens == REASONING
    m = last.model_extra["_meta"]
    assert (m["cachedTokens"], m["reasoningTokens"]) == (2 * CACHED, REASONING)
    assert {p["model"]: p["reasoningTokens"] for p in m["debate"]["panelists"]}["openai:gpt-5"] == REASONING


def test_a_response_reports_them_in_the_responses_names(client, llm):
    script_debate(llm)
    resp = client.responses.create(model="router/debate", input=QUESTION[0]["content"])
    assert resp.usage.input_tokens_details.cached_tokens == 2 * CACHED
    assert resp.usage.output_tokens_details.reasoning_tokens == REASONING
    assert meta(resp)["reasoningTokens"] == REASONING
    llm.reset()
    llm.script(model="gpt-4o", reply="Yes.", reasoning_tokens=40, cached_tokens=16)
    single = client.responses.create(model="openai:gpt-4o", input=QUESTION[0]["content"])
    assert single.usage.input_tokens_details.cached_tokens == 16
    assert single.usage.output_tokens_details.reasoning_tokens == 40
