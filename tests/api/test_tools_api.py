"""Tools and structured output through `POST /v1/chat/completions`, in every mode, driven by the official openai SDK
(and LangChain's ChatOpenAI) against Parley backed by the scripted model server."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

from api.main import create_app
from tests.support.servers import ServerThread

PANEL = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]
ARBITRATOR = "anthropic:claude-opus-4-5"
QUESTION = [{"role": "user", "content": "Should I take an umbrella in Paris today?"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_paris"}
RESULT = "rain, 18 degrees"


@pytest.fixture
def server(parley_env):
    parley_env.parley_debate_models = list(PANEL)
    parley_env.parley_arbitrator_model = ARBITRATOR
    with ServerThread(create_app(parley_env)) as running:
        yield running


@pytest.fixture
def key(server, make_key, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    return make_key(["chat", "admin"])


@pytest.fixture
def client(server, key):
    with openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=30) as sdk:
        yield sdk


@pytest.fixture
def api(server, key):
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        yield http


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
