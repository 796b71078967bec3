"""One live check of the real embedded model (SmolLM2-135M on llama.cpp), started as Parley starts it.

Structure only: a tiny model's words are not asserted, just that streaming, usage and structured
output work end to end.
"""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from pydantic import BaseModel, Field

from core.embedded import model_server
from llm.factory import ModelFactory
from llm.usage import UsageLedger

pytestmark = pytest.mark.live


class Colour(BaseModel):
    colour: str = Field(description="A colour name.")


@pytest.fixture(scope="module")
def embedded_model(tmp_path_factory):
    server = model_server(tmp_path_factory.mktemp("live-model")).start(timeout=120)
    yield server
    server.stop()


async def test_embedded_model_streams_and_answers_structured(parley_env, embedded_model):
    factory = ModelFactory(parley_env, local_base_url=embedded_model.url)
    ledger = UsageLedger()
    chat = factory.chat("local:smollm2", max_tokens=32, temperature=0.3, ledger=ledger)
    chunks = [c.content async for c in chat.astream([HumanMessage("Write one sentence about the sea.")])]
    assert len([c for c in chunks if c]) > 1
    assert "".join(chunks).strip()
    assert ledger.records[0].output_tokens > 0

    colour = await factory.structured(Colour, "local:smollm2", max_tokens=40, temperature=0.1).ainvoke(
        [HumanMessage("Name a colour. Reply as JSON.")]
    )
    assert isinstance(colour, Colour) and colour.colour.strip()
