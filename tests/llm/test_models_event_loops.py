"""One model factory serves several event loops (two `asyncio.run`s, or each test server's own loop)."""

from __future__ import annotations

import asyncio

from langchain_core.messages import HumanMessage

from parley.core.settings import Settings
from parley.llm.factory import ModelFactory


def test_a_factory_works_across_event_loops(llm, tmp_path):
    settings = Settings(openai_base_url=llm.base_url, openai_api_key="sk-test", parley_home=tmp_path, _env_file=None)
    factory = ModelFactory(settings)

    async def ask() -> str:
        return (await factory.chat("openai:gpt-4o-mini").ainvoke([HumanMessage("hello")])).content

    # Before the per-loop client, the second run reused the first loop's connections: "Event loop is closed".
    assert asyncio.run(ask()) == asyncio.run(ask())
