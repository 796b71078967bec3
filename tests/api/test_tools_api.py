"""Tools and structured output through `POST /v1/chat/completions`, in every mode, driven by the official openai SDK
(and LangChain's ChatOpenAI) against Parley backed by the scripted model server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

# The panel API's fixtures: the debate preset on PANEL with ARBITRATOR, a key with credit, the openai SDK and httpx.
from tests.api.test_panel_api import ARBITRATOR, PANEL, api, client, key, server  # noqa: F401

QUESTION = [{"role": "user", "content": "Should I take an umbrella in Paris today?"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_paris"}
RESULT = "rain, 18 degrees"


def sent_to(llm, model: str) -> list[dict]:
    return [r for r in llm.requests if r["model"] == model]


def followup() -> list[dict]:
    """The question, the assistant's call of the tool, and the tool's result: what a client sends next."""
    call = {"id": "call_paris", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}
    return [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_paris", "content": RESULT}]


# --- single model and router -----------------------------------------------------------------


def test_a_single_model_is_offered_the_tools_and_answers_with_a_call(client, llm):
    llm.script(model="gpt-4o", tool_calls=[CALL], with_tools=True)
    resp = client.chat.completions.create(model="openai:gpt-4o", messages=QUESTION, tools=[WEATHER],
                                          tool_choice="auto", parallel_tool_calls=False)
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls
    assert (call.id, call.type, call.function.name) == ("call_paris", "function", "get_weather")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    [sent] = sent_to(llm, "gpt-4o")
    assert sent["tools"] == [WEATHER] and sent["tool_choice"] == "auto" and sent["parallel_tool_calls"] is False


def test_the_tools_result_goes_back_to_the_model_as_openai_messages(client, llm):
    llm.script(model="gpt-4o", match=RESULT, reply="Yes: it is raining.")
    resp = client.chat.completions.create(model="openai:gpt-4o", messages=followup(), tools=[WEATHER])
    assert resp.choices[0].message.content == "Yes: it is raining." and resp.choices[0].finish_reason == "stop"
    assert resp.choices[0].message.tool_calls is None
    [sent] = sent_to(llm, "gpt-4o")
    assistant, tool = sent["messages"][1:]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["id"] == "call_paris"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert tool == {"role": "tool", "tool_call_id": "call_paris", "content": RESULT}


def test_a_model_offered_no_tools_reads_the_calls_and_results_as_text(client, llm):
    llm.script(model="gpt-4o", reply="It rains.")
    client.chat.completions.create(model="openai:gpt-4o", messages=followup())
    [sent] = sent_to(llm, "gpt-4o")
    assert "tools" not in sent and [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][1]["content"] == '[tool call call_paris: get_weather({"city": "Paris"})]'
    assert sent["messages"][2]["content"] == f"[result of tool call call_paris (get_weather)]\n{RESULT}"


def test_a_streamed_tool_call_arrives_as_openai_streams_it(client, api, llm):
    llm.script(model="gpt-4o", tool_calls=[CALL, {"name": "get_weather", "arguments": {"city": "Lyon"}}])
    chunks = list(client.chat.completions.create(model="openai:gpt-4o", messages=QUESTION, tools=[WEATHER],
                                                 stream=True))
    deltas = [c.choices[0].delta for c in chunks]
    assert deltas[0].role == "assistant" and deltas[0].content is None
    opening = [d.tool_calls[0] for d in deltas if d.tool_calls and d.tool_calls[0].id]
    assert [(c.index, c.id, c.type, c.function.name) for c in opening] == [
        (0, "call_paris", "function", "get_weather"), (1, opening[1].id, "function", "get_weather")]
    arguments = {0: "", 1: ""}
    for d in deltas:
        for piece in d.tool_calls or []:
            if not piece.id:
                assert piece.function.name is None  # only the first piece names the call
            arguments[piece.index] += piece.function.arguments or ""
    assert [json.loads(a) for a in arguments.values()] == [{"city": "Paris"}, {"city": "Lyon"}]
    assert len([d for d in deltas if d.tool_calls]) > 4  # piece by piece, not one blob
    last = chunks[-1]
    assert last.choices[0].finish_reason == "tool_calls" and last.usage.total_tokens > 0
    assert last.model_extra["_meta"]["routerMode"] == "direct"
    # The SDK's own accumulator puts the calls together as the JSON answer has them.
    llm.script(model="gpt-4o", tool_calls=[CALL])
    with client.chat.completions.stream(model="openai:gpt-4o", messages=QUESTION, tools=[WEATHER]) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert final.choices[0].finish_reason == "tool_calls"


def test_a_router_falls_back_with_the_tools(client, api, llm):
    api.post("/v1/routers", json={"id": "agents", "models": ["openai:gpt-4o", "anthropic:claude-haiku-4-5"]}
             ).raise_for_status()
    llm.script(model="gpt-4o", status=500)
    llm.script(model="claude-haiku-4-5", tool_calls=[CALL], with_tools=True)
    resp = client.chat.completions.create(model="router/agents", messages=QUESTION, tools=[WEATHER],
                                          tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert resp.model == "anthropic:claude-haiku-4-5" and resp.choices[0].finish_reason == "tool_calls"
    assert resp.model_extra["_meta"]["routerMode"] == "fallback"
    assert resp.model_extra["_meta"]["fallbacks"] == [{"model": "openai:gpt-4o", "error": "server"}]
    for model in ("gpt-4o", "claude-haiku-4-5"):
        assert all(r["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
                   for r in sent_to(llm, model))


def test_a_call_cut_off_mid_stream_ends_the_stream_and_falls_back_without_one(client, api, llm):
    api.post("/v1/routers", json={"id": "agents", "models": ["openai:gpt-4o", "anthropic:claude-haiku-4-5"]}
             ).raise_for_status()
    llm.script(model="gpt-4o", tool_calls=[CALL], drop_after=1)
    llm.script(model="claude-haiku-4-5", tool_calls=[CALL])
    stream = client.chat.completions.create(model="router/agents", messages=QUESTION, tools=[WEATHER], stream=True)
    with pytest.raises(openai.APIError, match="failed after part of its answer was streamed") as caught:
        for _ in stream:
            pass
    assert caught.value.body["code"] == "answer_interrupted"
    # Not streamed, nothing went out yet: the next model of the list answers with its whole call.
    resp = client.chat.completions.create(model="router/agents", messages=QUESTION, tools=[WEATHER])
    assert resp.model == "anthropic:claude-haiku-4-5" and json.loads(
        resp.choices[0].message.tool_calls[0].function.arguments) == {"city": "Paris"}


# --- debate ----------------------------------------------------------------------------------


def script_debate(llm) -> None:
    llm.script(model="gpt-5", reply="Call get_weather for Paris first.")
    llm.script(model="claude-sonnet-4-5", reply="Check the weather in Paris with the tool.")
    llm.script(model="gemini-2.5-pro", reply="Look up Paris's weather before answering.")


def test_the_arbitrator_calls_the_tool_the_panelists_proposed(client, llm):
    script_debate(llm)
    llm.script(model="claude-opus-4-5", tool_calls=[CALL], with_tools=True)
    resp = client.chat.completions.create(model="router/debate", messages=QUESTION, tools=[WEATHER])
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert choice.message.tool_calls[0].function.name == "get_weather" and resp.model == ARBITRATOR
    meta = resp.model_extra["_meta"]
    assert meta["routerMode"] == "debate" and meta["debate"]["arbitrator"] == ARBITRATOR
    panelists = meta["debate"]["panelists"]
    assert [p["proposal"] for p in panelists] == ["Call get_weather for Paris first.",
                                                 "Check the weather in Paris with the tool.",
                                                 "Look up Paris's weather before answering."]
    assert all({"model", "tokens", "cost", "latencyMs", "success"} <= set(p) for p in panelists)
    # Panelists are offered no tools: they read them described and answer in prose.
    for model in ("gpt-5", "claude-sonnet-4-5", "gemini-2.5-pro"):
        [sent] = sent_to(llm, model)
        assert "tools" not in sent
        assert "get_weather: The weather in a city now." in sent["messages"][0]["content"]
    [arbitration] = sent_to(llm, "claude-opus-4-5")
    assert arbitration["tools"] == [WEATHER] and "Call get_weather for Paris first." in json.dumps(
        arbitration["messages"])
    assert "You are offered the tools" in arbitration["messages"][0]["content"]


def test_a_debate_goes_on_from_the_tools_result(client, llm):
    script_debate(llm)
    llm.script(model="claude-opus-4-5", match=RESULT, reply="Take an umbrella: rain, 18 degrees.")
    resp = client.chat.completions.create(model="router/debate", messages=followup(), tools=[WEATHER])
    assert resp.choices[0].message.content == "Take an umbrella: rain, 18 degrees."
    assert resp.choices[0].finish_reason == "stop" and resp.choices[0].message.tool_calls is None
    for model in ("gpt-5", "claude-sonnet-4-5", "gemini-2.5-pro"):
        [sent] = sent_to(llm, model)
        assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "user"]
        assert RESULT in sent["messages"][3]["content"] and "get_weather" in sent["messages"][2]["content"]
    [arbitration] = sent_to(llm, "claude-opus-4-5")
    conversation = arbitration["messages"][1]["content"]
    assert "[tool call call_paris: get_weather" in conversation and RESULT in conversation


def test_a_streamed_debate_streams_the_arbitrators_call(client, llm):
    script_debate(llm)
    llm.script(model="claude-opus-4-5", tool_calls=[CALL])
    chunks = list(client.chat.completions.create(model="router/debate", messages=QUESTION, tools=[WEATHER],
                                                 stream=True))
    calls = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices[0].delta.tool_calls]
    assert calls[0].id == "call_paris" and calls[0].function.name == "get_weather"
    assert json.loads("".join(c.function.arguments or "" for c in calls)) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls" and all(c.model == ARBITRATOR for c in chunks)
    assert len(chunks[-1].model_extra["_meta"]["debate"]["panelists"]) == 3


def test_a_raw_panel_reads_the_tools_and_answers_in_text(client, api, llm):
    script_debate(llm)
    resp = client.chat.completions.create(model="router/debate", messages=QUESTION, tools=[WEATHER],
                                          extra_body={"panel": True})
    assert resp.choices[0].finish_reason == "stop" and resp.choices[0].message.tool_calls is None
    assert "**openai:gpt-5**\n\nCall get_weather for Paris first." in resp.choices[0].message.content
    assert all("tools" not in r for r in llm.requests) and len(llm.requests) == 3
    assert "proposal" not in resp.model_extra["_meta"]["panel"]["models"][0]  # the content has them all
    refused = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION,
                                                     "tools": [WEATHER], "tool_choice": "required", "panel": True})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "unsupported_in_panel_mode"
    assert "never calls a tool" in refused.json()["error"]["message"] and len(llm.requests) == 3


# --- bad bodies ------------------------------------------------------------------------------


def _call(call_id: str = "call_1") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


@pytest.mark.parametrize("extra, code, words", [
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "invalid_tools", "only function tools"),
    ({"tools": [{"type": "function", "function": {"name": "get weather"}}]}, "invalid_tools", "tools[0].function.name"),
    ({"tools": [WEATHER, WEATHER]}, "invalid_tools", "get_weather appear more than once"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]}, "invalid_tools",
     "not a valid JSON Schema"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "search"}}}, "invalid_tools",
     "'search', which is not among the tools"),
    ({"tool_choice": "required"}, "invalid_tools", "'required' needs tools"),
    ({"tools": [WEATHER], "tool_choice": "always"}, "invalid_tools", "tool_choice must be"),
    ({"tools": [WEATHER] * 129}, "invalid_request", "at most 128 items"),
    ({"functions": [{"name": "f"}]}, "legacy_functions", "send 'tools'"),
    ({"function_call": "auto"}, "legacy_functions", "'function_call'"),
    ({"response_format": {"type": "xml"}}, "invalid_response_format", "'text', 'json_object' or 'json_schema'"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}},
     "invalid_response_format", "json_schema.name"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "thing"}}}},
     "invalid_response_format", "not a valid JSON Schema"),
    ({"messages": [*QUESTION, {"role": "tool", "content": "x"}]}, "invalid_tool_messages", "tool_call_id"),
    ({"messages": [*QUESTION, {"role": "tool", "tool_call_id": "call_1", "content": "x"}]}, "invalid_tool_messages",
     "no call 'call_1' is waiting"),
    ({"messages": [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [_call()]}, *QUESTION]},
     "invalid_tool_messages", "no result for call_1"),
    ({"messages": [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [_call()]}]},
     "invalid_tool_messages", "no result for call_1"),
    ({"messages": [{"role": "user", "content": "hi", "tool_calls": [_call()]}]}, "invalid_tool_messages",
     "only an assistant's"),
    ({"messages": [{"role": "assistant", "content": None}]}, "invalid_request", "needs non-empty content"),
])
def test_bad_tools_formats_and_tool_messages_are_400_with_their_code(api, llm, extra, code, words):
    body = {"model": "openai:gpt-4o", "messages": QUESTION, **extra}
    resp = api.post("/v1/chat/completions", json=body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == code and words in error["message"], error
    assert error["type"] == "invalid_request_error" and llm.requests == []


def test_harmless_tool_fields_without_tools_are_accepted(client, llm):
    # Clients that always send these (empty tools, "auto" or "none", a parallel flag) are not refused.
    llm.script(model="gpt-4o", reply="Fine.")
    resp = client.chat.completions.create(model="openai:gpt-4o", messages=QUESTION, tools=[], tool_choice="none",
                                          parallel_tool_calls=True)
    assert resp.choices[0].message.content == "Fine." and "tools" not in llm.requests[-1]
    # A tool's result may be empty, and an assistant's call needs no text.
    messages = [*QUESTION, {"role": "assistant", "content": "", "tool_calls": [_call()]},
                {"role": "tool", "tool_call_id": "call_1", "content": ""}]
    assert client.chat.completions.create(model="openai:gpt-4o", messages=messages, tools=[WEATHER]).choices


# --- agent loops -----------------------------------------------------------------------------


def get_weather_tool():
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        return RESULT if city == "Paris" else "sunny"

    return get_weather


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
@pytest.mark.parametrize("mode", ["single", "router", "debate"])
def test_a_langchain_agent_loop_runs_through_parley(server, key, api, llm, mode, stream):
    """LangChain's ChatOpenAI with one bound tool, against Parley: it calls the tool, gets its result back, and ends
    with a final answer."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    answering = {"single": "gpt-4o", "router": "gpt-4o", "debate": "claude-opus-4-5"}[mode]
    model = {"single": "openai:gpt-4o", "router": "router/agents", "debate": "router/debate"}[mode]
    if mode == "router":
        api.post("/v1/routers", json={"id": "agents", "models": ["openai:gpt-4o", "openai:gpt-4o-mini"]}
                 ).raise_for_status()
    script_debate(llm)
    llm.script(model=answering, match=RESULT, reply="Take an umbrella: it is raining in Paris.")
    llm.script(model=answering, tool_calls=[CALL], with_tools=True)
    weather = get_weather_tool()
    agent = ChatOpenAI(base_url=server.url + "/v1", api_key=key, model=model, streaming=stream,
                       max_retries=0).bind_tools([weather])

    messages = [HumanMessage("Should I take an umbrella in Paris today?")]
    for _ in range(3):
        reply = agent.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            break
        messages += [ToolMessage(weather.invoke(call["args"]), tool_call_id=call["id"]) for call in reply.tool_calls]

    assert [type(m).__name__ for m in messages] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert messages[1].tool_calls[0]["name"] == "get_weather" and messages[1].tool_calls[0]["args"] == {"city": "Paris"}
    assert messages[2].content == RESULT
    assert messages[3].content == "Take an umbrella: it is raining in Paris."
    offered = [r for r in sent_to(llm, answering) if r.get("tools")]
    assert len(offered) == 2 and offered[0]["tools"][0]["function"]["name"] == "get_weather"
    if mode == "debate":
        assert len(sent_to(llm, "gpt-5")) == 2  # the panel debated both turns


# --- structured output -----------------------------------------------------------------------


class Event(BaseModel):
    title: str = Field(description="What happens.")
    day: str = Field(description="The day of the week.")
    people: list[str] = Field(description="Who takes part.")


def test_parse_returns_an_object_from_a_single_model(client, llm):
    resp = client.chat.completions.parse(model="openai:gpt-4o", messages=QUESTION, response_format=Event)
    event = resp.choices[0].message.parsed
    assert isinstance(event, Event) and event.people
    [sent] = sent_to(llm, "gpt-4o")
    assert sent["response_format"]["type"] == "json_schema" and sent["response_format"]["json_schema"]["strict"] is True
    assert sent["response_format"]["json_schema"]["schema"]["required"] == ["title", "day", "people"]


def test_parse_returns_an_object_from_a_router_and_a_debate(client, api, llm):
    api.post("/v1/routers", json={"id": "extract", "models": ["openai:gpt-4o"]}).raise_for_status()
    assert isinstance(client.chat.completions.parse(model="router/extract", messages=QUESTION,
                                                    response_format=Event).choices[0].message.parsed, Event)
    script_debate(llm)
    resp = client.chat.completions.parse(model="router/debate", messages=QUESTION, response_format=Event)
    assert isinstance(resp.choices[0].message.parsed, Event) and resp.model == ARBITRATOR
    [arbitration] = sent_to(llm, "claude-opus-4-5")
    assert arbitration["response_format"]["json_schema"]["name"] == "Event"
    assert "Write the final answer as JSON only" in arbitration["messages"][0]["content"]
    panelist = sent_to(llm, "gpt-5")[0]
    assert "response_format" not in panelist and '"people"' in panelist["messages"][0]["content"]


def test_an_answer_not_in_the_format_is_repaired_once(client, llm):
    llm.script(model="gpt-4o", json={"title": "Fair", "day": 5}, times=1)  # `day` must be a string
    resp = client.chat.completions.parse(model="openai:gpt-4o", messages=QUESTION, response_format=Event)
    assert isinstance(resp.choices[0].message.parsed, Event)
    first, repair = sent_to(llm, "gpt-4o")
    shown = repair["messages"][-2:]
    assert shown[0] == {"role": "assistant", "content": '{"title": "Fair", "day": 5}'}
    assert "Your answer is not the JSON required" in shown[1]["content"] and "5 is not of type \"string\"" in shown[1][
        "content"]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
def test_an_answer_still_not_in_the_format_fails_with_a_clear_502(client, api, llm, stream):
    llm.script(model="gpt-4o", json={"title": "Fair"})
    body = {"model": "openai:gpt-4o", "messages": QUESTION, "stream": stream, "response_format": {
        "type": "json_schema", "json_schema": {"name": "Event", "schema": Event.model_json_schema()}}}
    resp = api.post("/v1/chat/completions", json=body)
    if stream:
        error = json.loads(next(line for line in resp.text.splitlines() if '"error"' in line)[5:])["error"]
        assert "data: {\"id\"" not in resp.text  # nothing of the wrong answer went out
    else:
        assert resp.status_code == 502
        error = resp.json()["error"]
    assert error["code"] == "invalid_structured_answer" and error["detail"] == (
        'at $: "day" is a required property; at $: "people" is a required property')
    assert "even after one repair" in error["message"] and len(sent_to(llm, "gpt-4o")) == 2


def test_a_streamed_structured_answer_arrives_whole_once_checked(client, llm):
    chunks = list(client.chat.completions.create(model="openai:gpt-4o", messages=QUESTION, stream=True,
                                                 response_format={"type": "json_object"}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert isinstance(json.loads(text), dict) and chunks[-1].choices[0].finish_reason == "stop"
    assert sent_to(llm, "gpt-4o")[0]["response_format"] == {"type": "json_object"}


def test_a_raw_panel_refuses_a_json_format(api, llm):
    resp = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION, "panel": True,
                                                  "response_format": {"type": "json_object"}})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "unsupported_in_panel_mode"
    assert "cannot be the JSON response_format asks for" in resp.json()["error"]["message"] and not llm.requests
    ok = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION, "panel": True,
                                                "response_format": {"type": "text"}})
    assert ok.status_code == 200, ok.text


# --- docs/agent-frameworks.md ----------------------------------------------------------------

PAGE = Path(__file__).resolve().parents[2] / "docs" / "agent-frameworks.md"
SNIPPET = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
# What each of the page's Python snippets prints, in order: the agent loops' final answer, the streamed call.
SNIPPET_PRINTS = ["Take an umbrella: rain, 18 °C.", "'name': 'get_weather'", "Take an umbrella: rain, 18 °C.",
                  "Take an umbrella: rain, 18 °C.\nanthropic:claude-opus-4-5", "Take an umbrella: rain, 18 °C.",
                  "title='The title is a scripted example.'"]


def test_the_agent_frameworks_page_runs_against_parley(server, key, llm, monkeypatch, capsys):
    """Every Python snippet of docs/agent-frameworks.md (the openai SDK with tools, streamed, LangChain, the Responses
    API, the OpenAI Agents SDK, parse()), run as written against Parley on the scripted model server."""
    snippets = SNIPPET.findall(PAGE.read_text(encoding="utf-8"))
    assert len(snippets) == len(SNIPPET_PRINTS), "a snippet was added or removed: say what it prints here"
    monkeypatch.setenv("PARLEY_URL", server.url + "/v1")
    monkeypatch.setenv("PARLEY_KEY", key)
    llm.script(match="rain, 18 °C in Paris", reply="Take an umbrella: rain, 18 °C.")
    llm.script(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}], with_tools=True)
    for number, (snippet, prints) in enumerate(zip(snippets, SNIPPET_PRINTS), 1):
        exec(compile(snippet, f"{PAGE.name}, Python snippet {number}", "exec"), {"__name__": "snippet"})
        printed = capsys.readouterr().out
        assert prints in printed, f"snippet {number} printed {printed!r}"
    assert {r["model"] for r in llm.requests} == {"gpt-5", "claude-sonnet-4-5", "gemini-2.5-pro", "claude-opus-4-5"}
