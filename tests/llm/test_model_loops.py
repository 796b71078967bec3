"""One model factory used from several event loops (each `asyncio.run`, each test server) keeps working."""

from __future__ import annotations

import asyncio

from langchain_core.messages import HumanMessage

from parley.llm.factory import ModelFactory


def test_a_factory_serves_successive_event_loops(parley_env, llm):
    llm.script(reply="Hello there.")
    factory = ModelFactory(parley_env)

    async def ask() -> str:
        return "".join([chunk.text async for chunk in factory.chat("openai:gpt-5").astream([HumanMessage("hi")])])

    # Pooled connections belong to the loop that opened them; a shared pool fails on the second loop.
    assert asyncio.run(ask()) == "Hello there."
    assert asyncio.run(ask()) == "Hello there."
    assert len(llm.requests) == 2
