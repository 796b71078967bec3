"""The model layer's tools and answer formats: what a request may name, what each endpoint is sent, how an answer is
held to its format."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGenerationChunk
from pydantic import BaseModel

from parley.llm.client import _named_once
from parley.llm.factory import ModelFactory
from parley.llm.formats import AnswerFormat, cap_strings, schema_note
from parley.llm.providers import BUILTIN_PROVIDERS, Provider
from parley.llm.tools import ToolSet, check_tool_messages

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "tags": {"type": "array", "items": {
    "type": "string"}}}, "required": ["n"], "additionalProperties": False}


class Verdict(BaseModel):
    winner: str


def test_a_tool_set_keeps_what_the_request_said_and_its_dump_round_trips():
    tools = ToolSet.from_request([WEATHER], {"type": "function", "function": {"name": "get_weather"}}, False)
    assert tools.names == ["get_weather"] and tools.must_call and tools.may_call
    assert tools.bind_kwargs() == {"tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                                   "parallel_tool_calls": False}
    assert ToolSet.load(tools.dump()) == tools and ToolSet.load(None) is None
    assert not ToolSet.from_request([WEATHER], "none").may_call
    assert ToolSet.from_request(None, "auto") is None and ToolSet.from_request([], "none", True) is None
    assert "- get_weather (arguments: {\"type\":\"object\"" in tools.describe()


def test_a_conversation_keeps_each_call_with_its_result():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    good = [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"}, {"role": "assistant", "content": "a"}]
    check_tool_messages(good)
    with pytest.raises(ValueError, match=r"messages\[1\].*no result for c1"):
        check_tool_messages(good[:2] + good[3:])
    with pytest.raises(ValueError, match=r"messages\[2\].*no call 'c1'"):
        check_tool_messages([good[0], {"role": "assistant", "content": "x"}, good[2]])
    with pytest.raises(ValueError, match="its own id"):
        check_tool_messages([good[0], {"role": "assistant", "tool_calls": [call, call]}])


def test_an_answer_format_says_what_is_wrong_with_an_answer():
    fmt = AnswerFormat.from_request({"type": "json_schema", "json_schema": {"name": "count", "schema": SCHEMA,
                                                                            "strict": True}})
    assert fmt.problem('{"n": 3, "tags": ["a"]}') is None
    assert fmt.problem('{"n": "3", "extra": 1}') == (
        "at $.n: \"3\" is not of type \"integer\"; at $: Additional properties are not allowed ('extra' was unexpected)")
    assert fmt.problem("n = 3").startswith("the answer is not valid JSON")
    assert AnswerFormat.load(fmt.dump()) == fmt and fmt.dump()["json_schema"]["strict"] is True
    anything = AnswerFormat.from_request({"type": "json_object"})
    assert anything.problem("[1]").startswith("the answer is JSON but not an object") and anything.problem("{}") is None
    assert AnswerFormat.from_request({"type": "text"}) is None and AnswerFormat.from_request(None) is None


def test_a_grammars_schema_bounds_every_string_and_a_model_reads_the_fields():
    capped = cap_strings({"type": "object", "properties": {
        "a": {"type": "string"}, "b": {"type": "string", "maxLength": 9}, "c": {"enum": ["x"], "type": "string"},
        "d": {"type": "array", "items": {"type": ["string", "null"]}}, "type": {"type": "integer"}}}, 50)
    props = capped["properties"]
    assert props["a"]["maxLength"] == 50 and props["b"]["maxLength"] == 9 and "maxLength" not in props["c"]
    assert props["d"]["items"]["maxLength"] == 50 and props["type"] == {"type": "integer"}
    note = schema_note({"type": "object", "$defs": {"Mood": {"enum": ["calm", "angry"]}}, "properties": {
        "mood": {"$ref": "#/$defs/Mood", "description": "How it sounds."},
        "tags": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 20}}}})
    assert note.splitlines()[1:] == ['- "mood": one of "calm", "angry". How it sounds.',
                                     '- "tags": a list (at most 3) of text of at most 20 characters']


def test_each_endpoint_is_asked_for_json_in_its_own_dialect():
    fmt = AnswerFormat.from_request({"type": "json_schema", "json_schema": {"name": "count", "schema": SCHEMA}})
    assert fmt.request_field("json_schema") == fmt.dump()
    # llama.cpp's server constrains its sampling by a grammar made from the schema only in this shape.
    assert fmt.request_field("json_object_schema") == {"type": "json_object", "schema": SCHEMA}
    assert AnswerFormat("json_object").request_field("json_object_schema") == {"type": "json_object"}


async def test_the_factory_offers_tools_and_asks_for_the_format(parley_env, llm):
    llm.script(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}], with_tools=True)
    factory = ModelFactory(parley_env)
    tools = ToolSet.from_request([WEATHER], "required", True)
    reply = await factory.chat("openai:gpt-4o", tools=tools).ainvoke([HumanMessage("Weather in Paris?")])
    assert reply.tool_calls[0]["name"] == "get_weather" and reply.tool_calls[0]["args"] == {"city": "Paris"}
    sent = llm.requests[-1]
    assert sent["tools"] == [WEATHER] and sent["tool_choice"] == "required" and sent["parallel_tool_calls"] is True
    fmt = AnswerFormat.from_request({"type": "json_schema", "json_schema": {"name": "count", "schema": SCHEMA}})
    answer = await factory.chat("openai:gpt-4o", answer_format=fmt).ainvoke([HumanMessage("Count.")])
    assert fmt.problem(answer.text) is None and llm.requests[-1]["response_format"] == fmt.dump()


async def test_json_answers_are_sampled_as_the_provider_wants_json_sampled(parley_env, llm):
    # The embedded model's repetition penalty keeps its prose from looping; on JSON, whose every answer repeats
    # quotes and brackets, it made a grammar-constrained model write them inside its strings instead.
    local = BUILTIN_PROVIDERS["local"]
    assert local.extra_body["repeat_penalty"] > 1 and local.json_extra_body == {"repeat_penalty": 1.0}
    factory = ModelFactory(parley_env, providers={"local": local.model_copy(update={"base_url": llm.base_url})})
    llm.script(json={"winner": "A"})
    await factory.chat("local:smollm2").ainvoke([HumanMessage("Talk.")])
    assert llm.requests[-1]["repeat_penalty"] == 1.3
    assert await factory.structured(Verdict, "local:smollm2").ainvoke([HumanMessage("Judge.")]) == Verdict(winner="A")
    structured = llm.requests[-1]
    assert structured["repeat_penalty"] == 1.0 and structured["response_format"]["type"] == "json_object"
    # The grammar holds every string to a length (a looping model ends), and the model is told what the fields hold.
    assert structured["response_format"]["schema"]["properties"]["winner"]["maxLength"] == local.json_string_cap
    assert structured["messages"][0] == {"role": "system", "content": schema_note(Verdict.model_json_schema())}
    assert '- "winner": text' in structured["messages"][0]["content"]
    fmt = AnswerFormat.from_request({"type": "json_schema", "json_schema": {"name": "count", "schema": SCHEMA}})
    await factory.chat("local:smollm2", answer_format=fmt).ainvoke([SystemMessage("Count well."), HumanMessage("Go.")])
    sent = llm.requests[-1]
    assert sent["repeat_penalty"] == 1.0 and sent["response_format"] == {"type": "json_object", "schema": cap_strings(
        SCHEMA, local.json_string_cap)}
    assert sent["messages"][0]["content"].startswith("Count well.\n\nAnswer with one JSON object with these fields:")
    # A provider without the quirk sends its extra body unchanged either way.
    plain = ModelFactory(parley_env, providers={"openai": Provider(extra_body={"top_k": 5})})
    await plain.structured(Verdict, "openai:gpt-4o").ainvoke([HumanMessage("Judge.")])
    assert llm.requests[-1]["top_k"] == 5 and llm.requests[-1]["messages"] == [{"role": "user", "content": "Judge."}]
    assert json.loads(json.dumps(llm.requests[-1]["response_format"]))["type"] == "json_schema"


def test_a_required_call_goes_to_a_server_without_it_as_the_one_tool_or_auto():
    one = ToolSet.from_request([WEATHER], tool_choice="required")
    assert one.bind_kwargs() == {"tool_choice": "required"}
    assert one.bind_kwargs(required=False) == {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    second = {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}
    assert ToolSet.from_request([WEATHER, second], tool_choice="required").bind_kwargs(required=False) == {
        "tool_choice": "auto"}


async def test_a_call_streamed_with_its_name_in_every_piece_is_named_once():
    """llama-cpp-python's function calling repeats the name and id in every piece, and adds `function_call`."""
    def piece(args: str) -> ChatGenerationChunk:
        return ChatGenerationChunk(message=AIMessageChunk(
            content="", additional_kwargs={"function_call": {"name": "lookup", "arguments": args}},
            tool_call_chunks=[{"index": 0, "id": "call_1", "name": "lookup", "args": args}]))

    async def stream():
        for args in ('{"q"', ': "x"', "}"):
            yield piece(args)

    merged = None
    async for chunk in _named_once(stream()):
        merged = chunk.message if merged is None else merged + chunk.message
    assert merged.tool_calls == [{"name": "lookup", "args": {"q": "x"}, "id": "call_1", "type": "tool_call"}]
    assert "function_call" not in merged.additional_kwargs
