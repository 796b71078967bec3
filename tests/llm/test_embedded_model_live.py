"""One live check of the real embedded model (SmolLM2-135M on llama.cpp), started as Parley starts it.

Structure only: a tiny model's words are not asserted, just that streaming, usage and structured
output work end to end, and that a structured step's JSON is well formed inside as well as out.
"""

from __future__ import annotations

import operator
import re
from typing import Annotated, TypedDict

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel, Field

from parley.graphs.duel import JUDGE_RETRY, DuelContext, judge_debate
from parley.graphs.duel.prompts import UNREADABLE_VERDICT
from parley.llm.factory import ModelFactory
from parley.llm.tools import ToolSet
from parley.llm.usage import UsageLedger

pytestmark = pytest.mark.live


class Colour(BaseModel):
    colour: str = Field(description="A colour name.")


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


class Verdicts(TypedDict, total=False):
    topic: str
    user_profile: dict
    opponent_profile: dict
    messages: list
    swapped: bool
    verdicts: Annotated[list, operator.add]


DEBATE = [
    {"role": "user", "content": "Cars pollute the air and make streets dangerous; cities should ban them from their centres."},
    {"role": "opponent", "content": "Cars give people freedom, and bans hurt workers who live far from transit."},
]


async def test_the_duels_verdict_is_well_formed_on_the_embedded_model(parley_env, greedy_embedded_model):
    """The duel's judge (a structured step) on the real embedded model: each verdict parses, and its text holds no
    JSON punctuation. Grammar-constrained, the JSON was always valid; sampled with the prose's repetition penalty
    and without its fields explained, 9 verdicts in 10 had strings like `]}` or `[6]` in them."""
    builder = StateGraph(Verdicts, context_schema=DuelContext)
    builder.add_node("judge", judge_debate, retry_policy=JUDGE_RETRY)
    builder.add_edge(START, "judge")
    builder.add_edge("judge", END)
    graph = builder.compile()
    # Greedy (temperature 0) and no prompt cache: the same verdicts every run, so the check cannot pass or fail by
    # chance.
    context = DuelContext(models=ModelFactory(parley_env, local_base_url=greedy_embedded_model.url),
                          model="local:smollm2", synthesis_temperature=0.0)
    verdicts = []
    for swapped in (False, True, False):
        out = await graph.ainvoke({"topic": "Should cities ban cars?", "user_profile": {"name": "Ada"},
                                   "opponent_profile": {"name": "Bo"}, "messages": DEBATE, "swapped": swapped},
                                  context=context)
        verdicts += out["verdicts"]
    assert all(v["winnerReason"] != UNREADABLE_VERDICT for v in verdicts)  # read, not counted as an abstention
    assert all(v["winner"] in ("user", "opponent", "tie") for v in verdicts)
    texts = [[v["winnerReason"], v["conclusion"], *v["consensus"], *v["disagreements"], *v["recommendations"]]
             for v in verdicts]
    punctuated = [t for strings in texts for t in strings if re.search(r"[\[\]{}]", t)]
    assert punctuated == []


WEATHER = ToolSet.from_request([{"type": "function", "function": {
    "name": "get_weather", "description": "The current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    tool_choice="required")


async def test_the_embedded_model_calls_a_tool_and_reads_its_result(parley_env, embedded_model):
    """A fresh install's model answers `tools` with a tool call in OpenAI's shape (its server's chat format), a
    required call included (the provider's quirk names the one tool), streamed too; and the conversation that carries
    the call and its result is taken (an assistant message with `content: null`, sent as empty text)."""
    factory = ModelFactory(parley_env, local_base_url=embedded_model.url)
    chat = factory.chat("local:smollm2", max_tokens=60, temperature=0.0, tools=WEATHER)
    question = [HumanMessage("What is the weather in Paris?")]
    called = await chat.ainvoke(question)
    assert [call["name"] for call in called.tool_calls] == ["get_weather"]
    assert isinstance(called.tool_calls[0]["args"].get("city"), str)
    streamed = None
    async for chunk in chat.astream(question):
        streamed = chunk if streamed is None else streamed + chunk
    assert [call["name"] for call in streamed.tool_calls] == ["get_weather"]
    result = ToolMessage("Sunny, 21 C", tool_call_id=called.tool_calls[0]["id"])
    follow_up = factory.chat("local:smollm2", max_tokens=40, temperature=0.0, tools=ToolSet.from_request(
        list(WEATHER.tools), tool_choice="none"))
    answer = await follow_up.ainvoke([*question, called, result])
    assert answer.content.strip() and not answer.tool_calls
