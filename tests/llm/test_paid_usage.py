"""Usage counts what was paid: the cached and reasoning tokens a server reports, streamed or not, priced at the
cached rate and as output, in the ledger, the usage view and the process metrics."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from prometheus_client import REGISTRY

from parley.llm.factory import ModelFactory
from parley.llm.prices import Price
from parley.llm.providers import BUILTIN_PROVIDERS
from parley.llm.usage import CallRecorder, UsageLedger, usage_from_message, usage_view

# (input, output, cached input) USD per million tokens; the names are configured models, so /metrics labels them.
PRICES = {"paid": (2.0, 8.0, 0.5), "paid-metrics": (2.0, 8.0, 0.5)}
PROMPT = "Weigh the case for a four-day week. " * 40  # about 360 tokens as the scripted server counts them


def factory(settings) -> ModelFactory:
    return ModelFactory(settings, providers=dict(BUILTIN_PROVIDERS), prices=PRICES)


@pytest.mark.parametrize("streamed", [True, False])
async def test_cached_and_reasoning_tokens_are_read_and_priced(parley_env, llm, streamed):
    llm.script(model="paid", reply="Yes, on balance.", reasoning_tokens=700, cached_tokens=256)
    ledger = UsageLedger()
    chat = factory(parley_env).chat("openai:paid", ledger=ledger, label="seat")
    if streamed:
        text = "".join([c.content async for c in chat.astream([HumanMessage(PROMPT)])])
        assert llm.requests[-1]["stream"] is True
    else:
        text = (await chat.ainvoke([HumanMessage(PROMPT)])).content
    assert text == "Yes, on balance."
    [record] = ledger.records
    assert not record.estimated
    assert record.cached_tokens == 256 and record.input_tokens > 256
    assert record.reasoning_tokens == 700 and record.output_tokens > 700  # reasoning is a part of the output
    fresh = record.input_tokens - 256
    assert record.cost == pytest.approx((fresh * 2.0 + 256 * 0.5 + record.output_tokens * 8.0) / 1e6)
    assert record.cached_cost == pytest.approx(256 * 0.5 / 1e6)
    assert record.reasoning_cost == pytest.approx(700 * 8.0 / 1e6)
    view = usage_view(ledger, per_model=True)
    assert (view["cachedTokens"], view["reasoningTokens"]) == (256, 700)
    assert view["cachedCostUsd"] == pytest.approx(256 * 0.5 / 1e6)
    assert view["reasoningCostUsd"] == pytest.approx(700 * 8.0 / 1e6)
    [row] = view["models"]
    assert (row["cachedTokens"], row["reasoningTokens"]) == (256, 700)


async def test_a_server_that_reports_neither_counts_zero(parley_env, llm):
    llm.script(model="paid", reply="Plain.")
    ledger = UsageLedger()
    await factory(parley_env).chat("openai:paid", ledger=ledger).ainvoke([HumanMessage("hi")])
    [record] = ledger.records
    assert (record.cached_tokens, record.reasoning_tokens, record.cached_cost, record.reasoning_cost) == (0, 0, 0, 0)
    assert usage_view(ledger)["cachedTokens"] == 0


def test_a_priority_tier_answer_counts_its_cached_and_reasoning_tokens():
    """langchain-openai names the details of a priority or flex call `<tier>_cache_read` and `<tier>_reasoning`."""
    message = AIMessage("x", usage_metadata={
        "input_tokens": 100, "output_tokens": 50, "total_tokens": 150,
        "input_token_details": {"priority_cache_read": 60, "priority": 40},
        "output_token_details": {"priority_reasoning": 30, "priority": 20}})
    reported = usage_from_message(message)
    assert (reported.input, reported.output, reported.cached, reported.reasoning) == (100, 50, 60, 30)


async def test_the_raw_token_usage_is_read_when_the_message_has_no_usage_metadata():
    ledger = UsageLedger()
    recorder = CallRecorder(ledger, "openai:paid", Price(2.0, 8.0, True, 0.5), None, "other")
    result = LLMResult(generations=[[ChatGeneration(message=AIMessage("Short."))]], llm_output={"token_usage": {
        "prompt_tokens": 1000, "completion_tokens": 2010, "total_tokens": 3010,
        "prompt_tokens_details": {"cached_tokens": 800}, "completion_tokens_details": {"reasoning_tokens": 2000}}})
    await recorder.on_llm_end(result, run_id="r")
    [record] = ledger.records
    assert (record.input_tokens, record.cached_tokens, record.output_tokens, record.reasoning_tokens) == (
        1000, 800, 2010, 2000)
    assert record.cost == pytest.approx((200 * 2.0 + 800 * 0.5 + 2010 * 8.0) / 1e6)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_metrics_count_tokens_by_kind(parley_env, llm):
    model = "openai:paid-metrics"
    llm.script(model="paid-metrics", reply="Fine.", reasoning_tokens=90, cached_tokens=40)
    kinds = {("input", "input"), ("input", "cached"), ("output", "output"), ("output", "reasoning")}
    before = {k: sample("parley_model_tokens_total", model=model, direction=k[0], kind=k[1]) for k in kinds}
    ledger = UsageLedger()
    await factory(parley_env).chat(model, ledger=ledger).ainvoke([HumanMessage(PROMPT)])
    [record] = ledger.records
    moved = {k: sample("parley_model_tokens_total", model=model, direction=k[0], kind=k[1]) - before[k]
             for k in kinds}
    assert moved == {("input", "input"): record.input_tokens - 40, ("input", "cached"): 40,
                     ("output", "output"): record.output_tokens - 90, ("output", "reasoning"): 90}
