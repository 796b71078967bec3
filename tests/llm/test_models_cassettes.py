"""The model layer against the real embedded model, replayed from vcrpy cassettes.

The cassettes were recorded from SmolLM2-135M on llama-cpp-python's server; `make cassettes`
re-records them (it sets PARLEY_RECORD_CASSETTES=1, which starts the embedded model).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import vcr
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from parley.core.embedded import model_server
from parley.llm.factory import ModelFactory
from parley.llm.usage import UsageLedger

RECORDING = os.environ.get("PARLEY_RECORD_CASSETTES") == "1"
CASSETTES = Path(__file__).parent.parent / "cassettes"

recorder = vcr.VCR(
    cassette_library_dir=str(CASSETTES),
    record_mode="all" if RECORDING else "none",
    match_on=["method", "path"],
    filter_headers=["authorization", "x-api-key"],
    decode_compressed_response=True,
)


class Stance(BaseModel):
    stance: str = Field(description="One word: for or against.")
    reason: str = Field(description="One short sentence.")


@pytest.fixture(scope="module")
def local_url(tmp_path_factory):
    """The embedded model's URL when recording; a dead address when replaying (the cassette answers)."""
    if not RECORDING:
        yield "http://127.0.0.1:9/v1"
        return
    server = model_server(tmp_path_factory.mktemp("model")).start(timeout=120)
    yield server.url
    server.stop()


@pytest.fixture
def factory(parley_env, local_url):
    return ModelFactory(parley_env, local_base_url=local_url)


def _bodies(cassette) -> list[dict]:
    return [json.loads(request.body) for request in cassette.requests]


async def test_streamed_completion_from_the_embedded_model(factory):
    ledger = UsageLedger()
    with recorder.use_cassette("embedded_stream.yaml") as cassette:
        chat = factory.chat("local:smollm2", max_tokens=40, temperature=0.2, ledger=ledger)
        chunks = [c.content async for c in chat.astream([HumanMessage("Name three colours.")])]
    assert len([c for c in chunks if c]) > 1
    assert "".join(chunks).strip()
    [body] = _bodies(cassette)
    # llama-cpp-python ignores max_completion_tokens: the quirk table sends max_tokens instead.
    assert body["max_tokens"] == 40 and "max_completion_tokens" not in body
    assert body["repeat_penalty"] == 1.3 and body["stream"] is True
    [record] = ledger.records
    assert record.estimated and record.output_tokens > 0 and record.input_tokens > 0


async def test_non_streamed_completion_reports_server_usage(factory):
    ledger = UsageLedger()
    with recorder.use_cassette("embedded_invoke.yaml"):
        chat = factory.chat("local:smollm2", max_tokens=30, temperature=0.2, ledger=ledger)
        answer = await chat.ainvoke([SystemMessage("Answer briefly."), HumanMessage("What is the capital of France?")])
    assert answer.content.strip()
    [record] = ledger.records
    assert not record.estimated and record.input_tokens > 5 and 0 < record.output_tokens <= 30


async def test_structured_output_through_json_object_schema(factory):
    with recorder.use_cassette("embedded_structured.yaml") as cassette:
        model = factory.structured(Stance, "local:smollm2", max_tokens=80, temperature=0.1)
        stance = await model.ainvoke([HumanMessage("Is remote work good? Reply as JSON with stance and reason.")])
    assert isinstance(stance, Stance) and stance.stance and stance.reason
    [body] = _bodies(cassette)
    assert body["response_format"]["type"] == "json_object"
    assert body["response_format"]["schema"]["required"] == ["stance", "reason"]
