"""Reasoning models, prompt-cache breakpoints and the response cache in the model layer (issue 38)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel

from parley.core.limits import MAX_CACHE_BREAKPOINTS
from parley.llm.breakpoints import mark_stable_prefix
from parley.llm.factory import ModelFactory
from parley.llm.failures import ModelError
from parley.llm.providers import BUILTIN_PROVIDERS
from parley.llm.reasoning import ThinkingFilter, strip_thinking
from parley.llm.tools import ToolSet
from parley.nodes.context import RunContext
from parley.store.response_cache import ResponseCache


class Pick(BaseModel):
    choice: str


# --- the provider table ----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "reasons", "marks"), [
    ("o4-mini", True, False), ("gpt-5-mini", True, False), ("gpt-5-chat-latest", False, False),
    ("gpt-4o-mini", False, False), ("deepseek-reasoner", True, False), ("deepseek-chat", False, False),
    ("claude-sonnet-4-5", True, True), ("anthropic/claude-3.5-haiku", False, True), ("gemini-2.5-flash", True, False),
])
def test_the_default_entry_knows_reasoning_and_cache_control_models(name, reasons, marks):
    entry = BUILTIN_PROVIDERS["openai"]
    assert entry.reasons(name) is reasons and entry.marks_cache(name) is marks


def test_the_embedded_model_neither_reasons_nor_takes_breakpoints():
    local = BUILTIN_PROVIDERS["local"]
    assert not local.reasons("smollm2") and not local.marks_cache("claude-imposter")


def test_a_providers_file_names_a_gateway_s_dialect(parley_env):
    parley_env.parley_home.mkdir(parents=True, exist_ok=True)
    parley_env.providers_file.write_text(json.dumps({"openrouter": {"reasoning_param": "reasoning"},
                                                     "plain": {"reasoning_models": None}}))
    factory = ModelFactory(parley_env)
    assert factory.provider("openrouter:anthropic/claude-sonnet-4.5").reasoning_fields("high") == \
        {"reasoning": {"effort": "high"}}
    assert factory.reasoning_problem("plain:o4-mini", "high") is not None
    assert factory.reasoning_problem("openai:o4-mini", "high") is None
    assert "not one of" in factory.reasoning_problem("openai:o4-mini", "extreme")
    with pytest.raises(ModelError, match="takes no reasoning effort"):
        factory.chat("openai:gpt-4o-mini", reasoning_effort="low")


async def test_each_dialect_reaches_the_wire(parley_env, llm):
    parley_env.parley_home.mkdir(parents=True, exist_ok=True)
    parley_env.providers_file.write_text(json.dumps({"openrouter": {"reasoning_param": "reasoning"}}))
    factory = ModelFactory(parley_env)
    await factory.chat("openai:o3", reasoning_effort="minimal").ainvoke([HumanMessage("Hi")])
    await factory.structured(Pick, "openrouter:deepseek-r1", reasoning_effort="high").ainvoke([HumanMessage("Hi")])
    openai_body, openrouter_body = llm.requests
    assert openai_body["reasoning_effort"] == "minimal" and "reasoning" not in openai_body
    assert openrouter_body["reasoning"] == {"effort": "high"} and "reasoning_effort" not in openrouter_body


async def test_a_run_context_asks_each_seat_for_its_effort(parley_env, llm):
    ctx = RunContext(models=ModelFactory(parley_env), reasoning={"agent-1": "high", "openai:o3": "low", "*": "medium"})
    assert ctx.reasoning_effort("openai:o4-mini", "agent-1") == "high"
    assert ctx.reasoning_effort("openai:o3", "agent-2") == "low"
    assert ctx.reasoning_effort("openai:o4-mini") == "medium"
    assert ctx.reasoning_effort("openai:gpt-4o-mini") is None  # "*" skips a model that takes none
    assert RunContext(models=ctx.models).reasoning_effort("openai:o3") is None


# --- reasoning text ------------------------------------------------------------------------------------


def test_think_blocks_are_dropped_whole():
    assert strip_thinking("<think>a\nb</think>\n\nAnswer") == "Answer"
    assert strip_thinking("No thinking here <b>bold</b>") == "No thinking here <b>bold</b>"
    assert strip_thinking("<think>never closed") == ""


@given(st.text(alphabet="ab <>/thinkT\n", max_size=60), st.lists(st.integers(1, 7), max_size=30))
def test_the_streamed_filter_agrees_with_the_whole_one_however_the_text_is_cut(text, cuts):
    pieces, at = [], 0
    for size in cuts:
        pieces.append(text[at:at + size])
        at += size
    pieces.append(text[at:])
    thinking = ThinkingFilter()
    streamed = "".join(thinking.feed(p) for p in pieces) + thinking.flush()
    assert streamed == strip_thinking(text)


async def test_a_model_s_think_block_never_leaves_the_client(parley_env, llm):
    llm.script(reply="<think>I should say 4.</think>\nFour.")
    factory = ModelFactory(parley_env)
    whole = await factory.chat("openai:o4-mini").ainvoke([HumanMessage("2+2?")])
    chunks = [c.content async for c in factory.chat("openai:o4-mini").astream([HumanMessage("2+2?")])]
    assert whole.content == "Four." and "".join(chunks) == "Four."


# --- breakpoints -----------------------------------------------------------------------------------------


def test_breakpoints_go_on_the_instructions_and_the_conversation_so_far_within_limits():
    long = "word " * 2000
    messages = [{"role": "system", "content": long}, {"role": "user", "content": [{"type": "text", "text": long}]},
                {"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]
    marked = mark_stable_prefix(messages, 1024)
    assert marked[0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert marked[2]["content"] == [{"type": "text", "text": "ok", "cache_control": {"type": "ephemeral"}}]
    assert marked[1] == messages[1] and marked[3] == messages[3]
    assert 0 < json.dumps(marked).count("cache_control") <= MAX_CACHE_BREAKPOINTS
    assert messages[0]["content"] == long  # the caller's messages are left as they were
    assert mark_stable_prefix(messages, 10**6) == messages  # too short to be worth caching
    assert mark_stable_prefix(messages[:1], 1) == messages[:1]


async def test_breakpoints_reach_an_anthropic_model_through_a_gateway_only(parley_env, llm):
    factory = ModelFactory(parley_env)
    prompt = [SystemMessage("Stay on topic. " * 500), HumanMessage("Go.")]
    await factory.chat("anthropic:claude-sonnet-4-5").ainvoke(prompt)
    await factory.chat("openai:gpt-4o").ainvoke(prompt)
    claude, gpt = llm.requests
    assert claude["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert isinstance(gpt["messages"][0]["content"], str)


# --- the response cache --------------------------------------------------------------------------------


async def test_the_response_cache_answers_only_identical_calls_at_temperature_0(parley_env, llm, db):
    cache = ResponseCache(db, scope="ws1")
    ctx = RunContext(models=ModelFactory(parley_env), response_cache=cache)
    prompt = [HumanMessage("Name a prime.")]
    first = await ctx.chat("openai:gpt-4o", temperature=0).ainvoke(prompt)
    second = await ctx.chat("openai:gpt-4o", temperature=0).ainvoke(prompt)
    assert second.content == first.content and len(llm.requests) == 1
    hit = ctx.ledger.records[1]
    assert hit.response_cache and hit.cost == 0 and hit.input_tokens == ctx.ledger.records[0].input_tokens
    assert not ctx.ledger.records[0].response_cache and ctx.ledger.records[0].cost > 0
    await ctx.chat("openai:gpt-4o", temperature=0, max_tokens=20).ainvoke(prompt)  # another parameter
    await ctx.chat("openai:gpt-4o", temperature=0).ainvoke([HumanMessage("Name another prime.")])
    await ctx.chat("openai:gpt-4o", temperature=0.5).ainvoke(prompt)
    await ctx.chat("openai:gpt-4o", temperature=0.5).ainvoke(prompt)
    assert len(llm.requests) == 5
    # Another workspace's cache holds none of these answers.
    other = RunContext(models=ctx.models, response_cache=ResponseCache(db, scope="ws2"))
    await other.chat("openai:gpt-4o", temperature=0).ainvoke(prompt)
    assert len(llm.requests) == 6


async def test_a_seed_makes_a_sampled_call_cacheable(parley_env, llm, db):
    factory = ModelFactory(parley_env)
    cache = ResponseCache(db, scope="ws1")
    for _ in range(2):
        await factory.chat("openai:gpt-4o", temperature=0.9, seed=7, cache=cache).ainvoke([HumanMessage("Hi")])
    assert len(llm.requests) == 1 and llm.requests[0]["seed"] == 7


async def test_a_structured_call_is_cached_and_parsed_again(parley_env, llm, db):
    llm.script(json={"choice": "B"})
    ctx = RunContext(models=ModelFactory(parley_env), response_cache=ResponseCache(db, scope="ws1"))
    answers = [await ctx.structured(Pick, "openai:gpt-4o", temperature=0).ainvoke([HumanMessage("A or B?")])
               for _ in range(2)]
    assert answers == [Pick(choice="B")] * 2 and len(llm.requests) == 1


async def test_an_expired_answer_is_not_used(parley_env, llm, db):
    cache = ResponseCache(db, scope="ws1", ttl_seconds=-1)  # stored already expired
    factory = ModelFactory(parley_env)
    for _ in range(2):
        await factory.chat("openai:gpt-4o", temperature=0, cache=cache).ainvoke([HumanMessage("Hi")])
    assert len(llm.requests) == 2


async def test_a_cached_tool_call_streams_back_as_the_same_call(parley_env, llm, db):
    tools = ToolSet.from_request([{"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}],
        "required", None)
    factory = ModelFactory(parley_env)
    cache = ResponseCache(db, scope="ws1")
    calls = []
    for _ in range(2):
        whole = None
        async for chunk in factory.chat("openai:gpt-4o", temperature=0, tools=tools, cache=cache).astream(
                [HumanMessage("What time is it?")]):
            whole = chunk if whole is None else whole + chunk
        calls.append([(c["name"], c["args"]) for c in whole.tool_calls])
    assert calls[0] == calls[1] and calls[0][0][0] == "get_time"
    assert len(llm.requests) == 1


async def test_a_model_behind_the_context_guard_streams_from_the_cache_too(parley_env, llm, db):
    parley_env.parley_home.mkdir(parents=True, exist_ok=True)
    parley_env.providers_file.write_text(json.dumps({"openai": {"context_window": 8192}}))
    factory = ModelFactory(parley_env)
    cache = ResponseCache(db, scope="ws1")
    texts = ["".join([c.content async for c in factory.chat("openai:gpt-4o", temperature=0, cache=cache).astream(
        [HumanMessage("Hello")])]) for _ in range(2)]
    assert texts[0] == texts[1] and len(llm.requests) == 1
