"""The model layer records every call in the process metrics: calls, tokens, cost, latency, time to first token."""

from __future__ import annotations

import openai
import pytest
from langchain_core.messages import HumanMessage
from prometheus_client import REGISTRY
from pydantic import BaseModel

from parley.llm.factory import ModelFactory
from parley.llm.providers import BUILTIN_PROVIDERS
from parley.llm.usage import UsageLedger

# Price-table names are configured models: /metrics labels them by name (any other id is `other`).
PRICES = {"metered": (1.0, 2.0), "metered-json": (1.0, 2.0), "metered-down": (1.0, 2.0)}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def tokens(model: str, direction: str) -> float:
    """A model's tokens one way: the sum of their kinds (input or cached in, output or reasoning out)."""
    kinds = ("input", "cached") if direction == "input" else ("output", "reasoning")
    return sum(sample("parley_model_tokens_total", model=model, direction=direction, kind=k) for k in kinds)


class Answer(BaseModel):
    answer: str


def factory(settings) -> ModelFactory:
    return ModelFactory(settings, providers=dict(BUILTIN_PROVIDERS), prices=PRICES)


async def test_a_streamed_call_counts_tokens_cost_latency_and_its_first_token(parley_env, llm):
    model = "openai:metered"
    # Delays between tokens put the first token strictly before the last.
    llm.script(model="metered", reply="one two three four five", token_delay=0.02)
    ledger = UsageLedger()
    calls, latency_n, latency_sum, ttft_sum = (
        sample("parley_model_calls_total", model=model, outcome="ok"),
        sample("parley_model_latency_seconds_count", model=model),
        sample("parley_model_latency_seconds_sum", model=model),
        sample("parley_model_time_to_first_token_seconds_sum", model=model),
    )
    tokens_in = tokens(model, "input")
    tokens_out = tokens(model, "output")
    cost = sample("parley_model_cost_usd_total", model=model)

    chunks = [c async for c in factory(parley_env).chat(model, ledger=ledger).astream([HumanMessage("Count")])]

    assert "".join(c.content for c in chunks) == "one two three four five"
    record = ledger.records[-1]
    assert sample("parley_model_calls_total", model=model, outcome="ok") - calls == 1
    assert tokens(model, "input") - tokens_in == record.input_tokens
    assert tokens(model, "output") - tokens_out == record.output_tokens
    assert sample("parley_model_cost_usd_total", model=model) - cost == pytest.approx(record.cost) and record.cost > 0
    assert sample("parley_model_latency_seconds_count", model=model) - latency_n == 1
    took = sample("parley_model_latency_seconds_sum", model=model) - latency_sum
    first = sample("parley_model_time_to_first_token_seconds_sum", model=model) - ttft_sum
    assert 0 < first < took


async def test_a_call_that_is_not_streamed_has_its_latency_as_first_token_time(parley_env, llm):
    model = "openai:metered-json"
    llm.script(model="metered-json", json={"answer": "yes"}, token_delay=0.01)
    latency_sum = sample("parley_model_latency_seconds_sum", model=model)
    ttft_sum = sample("parley_model_time_to_first_token_seconds_sum", model=model)
    # No ledger: the metrics count the call all the same.
    result = await factory(parley_env).structured(Answer, model).ainvoke([HumanMessage("Yes?")])
    assert result.answer == "yes"
    took = sample("parley_model_latency_seconds_sum", model=model) - latency_sum
    assert took > 0
    assert sample("parley_model_time_to_first_token_seconds_sum", model=model) - ttft_sum == pytest.approx(took)
    assert sample("parley_model_calls_total", model=model, outcome="ok") >= 1


async def test_a_failed_call_counts_as_an_error_without_tokens(parley_env, llm):
    model = "openai:metered-down"
    llm.script(model="metered-down", status=500)
    errors = sample("parley_model_calls_total", model=model, outcome="error")
    latency_n = sample("parley_model_latency_seconds_count", model=model)
    with pytest.raises(openai.InternalServerError):
        await factory(parley_env).chat(model).ainvoke([HumanMessage("Hello")])
    assert sample("parley_model_calls_total", model=model, outcome="error") - errors == 1
    assert sample("parley_model_latency_seconds_count", model=model) - latency_n == 1
    assert sample("parley_model_time_to_first_token_seconds_count", model=model) == 0  # no token ever came
    assert tokens(model, "output") == 0
