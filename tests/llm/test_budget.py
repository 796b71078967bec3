"""Budgets (`llm.budget`): limits as the API takes them, reserved estimates, and the check every model call passes
(a refused call never reaches the scripted model server)."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage

from parley.graphs.roundtable.steps import StatedPosition, SynthesisDraft
from parley.llm.budget import Budget, BudgetExceeded, BudgetLimits, InvalidBudget, Spend, estimate_call, schema_tokens
from parley.llm.factory import ModelFactory
from parley.llm.prices import Price
from parley.llm.usage import UsageLedger


def test_limits_are_parsed_as_the_api_writes_them_and_refused_naming_the_field():
    limits = BudgetLimits.parse({"maxTokens": 2000.0, "maxCost": 1, "maxSeconds": 30})
    assert limits == BudgetLimits(2000, 1.0, 30.0) and limits.dump() == {"maxTokens": 2000, "maxCost": 1.0,
                                                                          "maxSeconds": 30.0}
    assert not BudgetLimits.parse(None) and not BudgetLimits.parse({})
    for bad, field in (({"maxCost": 0}, "maxCost"), ({"maxTokens": 1.5}, "maxTokens"), ({"maxSeconds": "1"},
                       "maxSeconds"), ({"maxCost": True}, "maxCost"), ({"cost": 1}, "cost"), ([1], "budget")):
        with pytest.raises(InvalidBudget) as refused:
            BudgetLimits.parse(bad)
        assert refused.value.field == field
    assert BudgetLimits(max_cost=1.0).over(BudgetLimits(max_cost=9.0, max_tokens=50)) == BudgetLimits(50, 1.0)
    assert BudgetLimits(max_tokens=10, max_cost=1.0).short_of(Spend(11, 0.5)) == ["maxTokens"]


def test_a_structured_answer_reserves_what_its_bounded_schema_allows():
    stance, synthesis = schema_tokens(StatedPosition.model_json_schema()), schema_tokens(SynthesisDraft.model_json_schema())
    assert 40 < stance < 150 < 500 < synthesis < 1500  # a stance: tens of tokens; a synthesis: hundreds
    price = Price(1.0, 2.0, True)
    capped = estimate_call(100, 200, price)
    assert (capped.prompt_tokens, capped.output_tokens) == (125, 200)  # a 25 % margin on the prompt
    assert capped.spend.cost == pytest.approx((125 * 1.0 + 200 * 2.0) / 1_000_000)
    assert estimate_call(100, None, price, StatedPosition).output_tokens == stance


def test_calls_under_way_count_at_their_reservation_until_they_end():
    budget = Budget(BudgetLimits(max_tokens=1000), UsageLedger())
    call = estimate_call(200, 200, Price(0.0, 0.0, True))  # 450 tokens reserved
    budget.admit(call, "first", key=1)
    budget.admit(call, "second", key=2)
    with pytest.raises(BudgetExceeded) as refused:
        budget.admit(call, "third", key=3)  # two under way hold 900 of the 1000
    assert "maxTokens" in str(refused.value) and refused.value.figures["limits"] == {"maxTokens": 1000}
    budget.release(1)
    budget.admit(call, "third", key=3)
    assert budget.reserved == Spend(1350, 0.0)


async def test_the_factory_refuses_a_call_past_the_budget_before_it_is_sent(parley_env, llm):
    ledger = UsageLedger()
    budget = Budget(BudgetLimits(max_tokens=300), ledger)
    factory = ModelFactory(parley_env)
    answer = await factory.chat("openai:gpt-5", max_tokens=50, ledger=ledger, budget=budget).ainvoke(
        [HumanMessage("Say one word.")])
    assert answer.content and len(llm.requests) == 1 and not budget.in_flight
    with pytest.raises(BudgetExceeded):
        await factory.chat("openai:gpt-5", max_tokens=295, ledger=ledger, budget=budget).ainvoke(
            [HumanMessage("Say one word.")])
    assert len(llm.requests) == 1  # the refused call was never sent
    assert ledger.total_tokens <= 300
