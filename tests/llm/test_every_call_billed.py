"""Every call a provider answered is billed, whatever happened to its answer: one Parley could not read (a structured
answer off its schema, bad JSON), one cut off mid-answer, one that went quiet or ran past its deadline. A call the
endpoint refused (an HTTP error status) was not paid for, and is not billed. At the one place every call passes
(`llm.usage.CallRecorder`, bound by `ModelFactory`), against the scripted server."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from pydantic import BaseModel

from parley.llm.budget import Budget, BudgetExceeded, BudgetLimits
from parley.llm.factory import ModelFactory
from parley.llm.failures import was_paid
from parley.llm.providers import BUILTIN_PROVIDERS
from parley.llm.usage import UsageLedger

PRICES = {"gpt-4o": (2.5, 10.0)}
PROMPT = [HumanMessage("Pick a number and say why. " * 20)]


class Pick(BaseModel):
    number: int


def factory(settings, *, deadline: float = 30.0, request_timeout: float = 30.0) -> ModelFactory:
    settings.parley_model_call_deadline = deadline
    settings.parley_request_timeout = request_timeout
    return ModelFactory(settings, providers=dict(BUILTIN_PROVIDERS), prices=PRICES)


async def structured(settings, ledger: UsageLedger, model: str = "openai:gpt-4o") -> Any:
    return await factory(settings).structured(Pick, model, ledger=ledger).ainvoke(PROMPT)


async def streamed(settings, ledger: UsageLedger, **knobs: float) -> str:
    chat = factory(settings, **knobs).chat("openai:gpt-4o", ledger=ledger)
    return "".join([chunk.content async for chunk in chat.astream(PROMPT)])


async def whole(settings, ledger: UsageLedger, **knobs: float) -> str:
    return (await factory(settings, **knobs).chat("openai:gpt-4o", ledger=ledger).ainvoke(PROMPT)).content


# (rule, call, paid): the scripted answer, how Parley asks for it, and whether the provider was paid for the call.
CASES = {
    "structured answer off its schema": (dict(json={"number": "many"}), structured, True),
    "streamed answer cut off": (dict(reply="Seven, because it is prime and", drop_after=3), streamed, True),
    "streamed answer that just stops": (dict(reply="Seven, because it is prime and", end_after=3), streamed, True),
    "streamed answer gone quiet": (dict(endless="comments", token_delay=0.05),
                                   lambda s, ledger: streamed(s, ledger, request_timeout=0.5), True),
    "answer past its deadline": (dict(endless="drip", token_delay=0.05),
                                 lambda s, ledger: streamed(s, ledger, deadline=1.0), True),
    "whole answer whose body breaks off": (dict(reply="Seven, because it is prime.", drop_after=1), whole, True),
    "refused: 500": (dict(status=500), whole, False),
    "refused: 401": (dict(status=401), streamed, False),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_call_is_billed_when_it_was_paid_for_whatever_became_of_its_answer(parley_env, llm, case):
    rule, ask, paid = CASES[case]
    llm.script(**rule)
    ledger = UsageLedger()
    with pytest.raises(Exception) as failed:
        await ask(parley_env, ledger)

    assert len(llm.requests) == 1
    if not paid:
        assert ledger.records == [] and not was_paid(failed.value)
        return
    [record] = ledger.records
    assert record.input_tokens > 100 and record.cost > 0  # the prompt, priced
    if case.startswith("structured"):  # the call ended well, as the server counted it; its answer was unreadable
        assert not record.estimated and not record.failed and record.output_tokens > 0
    else:  # the call failed: estimated from its prompt and what it streamed
        assert record.estimated and record.failed and was_paid(failed.value)


async def test_a_call_refused_by_the_budget_was_never_sent_and_is_not_billed(parley_env, llm):
    ledger = UsageLedger()
    budget = Budget(BudgetLimits(max_tokens=10), ledger)
    chat = factory(parley_env).chat("openai:gpt-4o", ledger=ledger, budget=budget)
    with pytest.raises(BudgetExceeded):
        await chat.ainvoke(PROMPT)
    assert llm.requests == [] and ledger.records == []


async def test_what_a_failed_call_cost_counts_against_the_budget(parley_env, llm):
    """The next call of a run sees what the failed one spent: a budget reads the ledger."""
    llm.script(json={"number": "many"}, times=1)
    ledger = UsageLedger()
    budget = Budget(BudgetLimits(max_tokens=100_000), ledger)
    model = factory(parley_env).structured(Pick, "openai:gpt-4o", ledger=ledger, budget=budget)
    with pytest.raises(Exception):
        await model.ainvoke(PROMPT)
    assert budget.spent().tokens == ledger.total_tokens > 100
