"""Tests for the scripted OpenAI-compatible server, driven through the real clients."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from enum import Enum
from pathlib import Path
from typing import Literal

import httpx
import jsonschema
import openai
import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from tests.support.scripted_llm import Rule, ScriptedLLM, default_reply, sample_from_schema, split_chunks

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server():
    with ScriptedLLM() as llm:
        yield llm


@pytest.fixture
def llm(server):
    server.reset()
    yield server
    server.reset()


@pytest.fixture
def client(llm):
    # No retries: error tests must see the first failure, and 429 would wait on Retry-After.
    return openai.OpenAI(base_url=llm.base_url, api_key="x", max_retries=0)


def ask(client, content="Is tea better than coffee?", model="pro", **kw):
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}], **kw)


class Stance(str, Enum):
    pro = "pro"
    con = "con"


class Point(BaseModel):
    claim: str = Field(min_length=5, max_length=40)
    weight: int = Field(ge=1, le=5)


class Verdict(BaseModel):
    winner: Stance
    score: float = Field(gt=0, lt=10)
    points: list[Point]
    note: str | None = None
    tags: list[Literal["logic", "evidence"]] = Field(min_length=2)


def test_plain_completion_is_deterministic_and_per_request(client):
    first = ask(client)
    again = ask(client)
    other_model = ask(client, model="con")
    other_prompt = ask(client, content="Should cities ban cars?")

    text = first.choices[0].message.content
    assert text == again.choices[0].message.content
    assert text.startswith("pro answer: Is tea better than coffee.")
    assert text.endswith(".") and 100 <= len(text) <= 150
    assert len({text, other_model.choices[0].message.content, other_prompt.choices[0].message.content}) == 3
    assert first.choices[0].finish_reason == "stop"
    assert first.usage.completion_tokens == len(split_chunks(text))
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens


def test_default_reply_length_is_configurable():
    long = default_reply("m", "topic words", chars=1000)
    assert 900 < len(long) <= 1000 and long.endswith(".")


def test_stream_concatenation_equals_full_text(client):
    full = ask(client).choices[0].message.content
    chunks = list(ask(client, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len(chunks) > 10
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == full
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_stream_usage_chunk_when_requested(client):
    chunks = list(ask(client, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == []
    usage = chunks[-1].usage
    assert usage.completion_tokens == len(chunks) - 2  # minus the finish chunk and the usage chunk
    assert all(c.usage is None for c in chunks[:-1])
    assert all(c.usage is None for c in ask(client, stream=True))


def test_a_repeated_prefix_is_reported_cached_as_openai_counts_it(client, llm):
    system = {"role": "system", "content": "rules " * 1000}  # 6,000 characters: 1,500 tokens

    def chat(*messages, model="pro", **kw):
        return client.chat.completions.create(model=model, messages=[system, *messages], **kw)

    first = chat({"role": "user", "content": "round one"})
    assert first.usage.prompt_tokens_details.cached_tokens == 0  # nothing before it
    second = chat({"role": "user", "content": "round one"}, {"role": "user", "content": "round two"})
    assert second.usage.prompt_tokens_details.cached_tokens == 1408  # 1,502 tokens shared, in 128-token steps
    streamed = list(chat({"role": "user", "content": "round one, again"}, stream=True,
                         stream_options={"include_usage": True}))
    assert streamed[-1].usage.prompt_tokens_details.cached_tokens == 1408
    assert chat({"role": "assistant", "content": "round one"}).usage.prompt_tokens_details.cached_tokens == 1408
    assert chat({"role": "user", "content": "x"}, model="con").usage.prompt_tokens_details.cached_tokens == 0
    short = client.chat.completions.create(model="pro", messages=[{"role": "user", "content": "rules " * 100}])
    assert short.usage.prompt_tokens_details.cached_tokens == 0  # under 1,024 tokens nothing is cached
    assert llm.cached_tokens == [0, 1408, 1408, 1408, 0, 0]
    llm.reset()
    assert chat({"role": "user", "content": "round one"}).usage.prompt_tokens_details.cached_tokens == 0


def test_the_cache_minimum_and_step_are_settable():
    with ScriptedLLM(cache_min=0, cache_step=1) as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="x", max_retries=0)
        ask(client, content="Is tea better than coffee? " * 3)
        again = ask(client, content="Is tea better than coffee? " * 3 + "And cocoa?")
        assert again.usage.prompt_tokens_details.cached_tokens == len("Is tea better than coffee? " * 3) // 4
        assert httpx.get(f"{llm.url}/_cached").json() == [0, 20]


def test_rules_by_model_and_match(llm, client):
    llm.script(model="judge", reply="Pro wins.")
    llm.script(match="cities", reply="Cars out.")
    assert ask(client, model="judge", content="Should cities ban cars?").choices[0].message.content == "Pro wins."
    assert ask(client, model="pro", content="Should cities ban cars?").choices[0].message.content == "Cars out."
    assert ask(client, model="pro").choices[0].message.content.startswith("pro answer:")
    assert [r["model"] for r in llm.requests] == ["judge", "pro", "pro"]


def test_times_consumes_rules_and_replies_cycle(llm, client):
    llm.script(reply="once", times=1)
    llm.script(replies=["a", "b"])
    got = [ask(client).choices[0].message.content for _ in range(4)]
    assert got == ["once", "a", "b", "a"]
    assert [r.uses for r in llm.state.rules] == [3]


@pytest.mark.parametrize(("status", "error"), [
    (500, openai.InternalServerError), (429, openai.RateLimitError),
    (401, openai.AuthenticationError), (503, openai.InternalServerError),
])
def test_status_rules_raise_openai_errors(llm, client, status, error):
    llm.script(status=status, reply="scripted failure", times=1)
    with pytest.raises(error) as caught:
        ask(client)
    assert caught.value.status_code == status
    assert caught.value.body["message"] == "scripted failure"
    assert (caught.value.response.headers.get("retry-after") == "1") == (status == 429)
    assert ask(client).choices[0].message.content.startswith("pro answer:")  # consumed after one use


def test_langchain_text_and_stream(llm):
    model = ChatOpenAI(base_url=llm.base_url, api_key="x", model="pro", stream_usage=True)
    full = model.invoke("Is tea better than coffee?")
    parts = list(model.stream("Is tea better than coffee?"))
    merged = parts[0]
    for part in parts[1:]:
        merged += part
    assert merged.content == full.content
    assert merged.usage_metadata["output_tokens"] == full.usage_metadata["output_tokens"]


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_structured_output_parses(llm, method):
    model = ChatOpenAI(base_url=llm.base_url, api_key="x", model="judge")
    verdict = model.with_structured_output(Verdict, method=method).invoke("Who won?")
    assert isinstance(verdict, Verdict)
    assert verdict.winner is Stance.pro and len(verdict.tags) == 2
    sent = llm.requests[-1]
    assert ("response_format" in sent) == (method == "json_schema")
    assert ("tools" in sent) == (method == "function_calling")


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_rule_json_is_returned_as_is(llm, method):
    scripted = {"winner": "con", "score": 7.5, "points": [], "note": "close", "tags": ["logic", "evidence"]}
    llm.script(json=scripted)
    model = ChatOpenAI(base_url=llm.base_url, api_key="x", model="judge")
    verdict = model.with_structured_output(Verdict, method=method).invoke("Who won?")
    assert verdict.model_dump(mode="json") == scripted


def test_generated_json_validates_against_schemas():
    schema = Verdict.model_json_schema()
    assert "$defs" in schema
    jsonschema.validate(sample_from_schema(schema), schema)

    class Node(BaseModel):  # recursive models must terminate
        name: str
        children: list[Node] = []

    jsonschema.validate(sample_from_schema(Node.model_json_schema()), Node.model_json_schema())
    odd = {
        "type": "object",
        "properties": {
            "kind": {"const": "x"},
            "short": {"type": "string", "maxLength": 3},
            "long": {"type": "string", "minLength": 60},
            "n": {"type": "integer", "exclusiveMinimum": 10, "maximum": 11},
            "f": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.1},
            "maybe": {"type": ["null", "boolean"]},
            "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]},
            "unique": {"type": "array", "items": {"type": "string"}, "minItems": 3, "uniqueItems": True},
            "merged": {"allOf": [{"$ref": "#/$defs/A"}, {"properties": {"b": {"type": "boolean"}}}]},
        },
        "$defs": {"A": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}},
    }
    jsonschema.validate(sample_from_schema(odd), odd)


def test_response_format_json_schema_and_json_object(llm, client):
    schema = Verdict.model_json_schema()
    response = ask(client, response_format={"type": "json_schema",
                                            "json_schema": {"name": "Verdict", "schema": schema}})
    jsonschema.validate(json.loads(response.choices[0].message.content), schema)
    plain = ask(client, response_format={"type": "json_object"}, max_tokens=2)
    assert json.loads(plain.choices[0].message.content)["answer"].startswith("pro answer:")


def test_streamed_tool_call_arguments(client):
    tool = {"type": "function", "function": {"name": "Verdict", "parameters": Verdict.model_json_schema()}}
    chunks = list(ask(client, stream=True, tools=[tool], tool_choice="required"))
    first = chunks[0].choices[0].delta.tool_calls[0]
    assert first.function.name == "Verdict" and first.id
    args = "".join(c.choices[0].delta.tool_calls[0].function.arguments for c in chunks[:-1])
    assert Verdict.model_validate_json(args)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


def test_scripted_tool_calls_answer_as_openai_does(llm, client):
    llm.script(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_a"},
                           {"name": "get_weather", "arguments": '{"city": "Lyon"}'}])
    message = ask(client, tools=[WEATHER]).choices[0].message
    assert message.content is None
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [
        ("call_a", "get_weather", {"city": "Paris"}), (message.tool_calls[1].id, "get_weather", {"city": "Lyon"})]
    assert message.tool_calls[1].id.startswith("call_chatcmpl-scripted-")
    # Recorded as sent: a test reads what the model was offered.
    assert llm.requests[-1]["tools"] == [WEATHER]


def test_scripted_tool_calls_stream_each_call_under_its_index(llm, client):
    llm.script(reply="Checking.", tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}},
                                              {"name": "get_weather", "arguments": {"city": "Lyon"}}])
    chunks = list(ask(client, tools=[WEATHER], stream=True))
    deltas = [c.choices[0].delta for c in chunks]
    assert deltas[0].role == "assistant" and "".join(d.content or "" for d in deltas) == "Checking."
    openings = [d.tool_calls[0] for d in deltas if d.tool_calls and d.tool_calls[0].id]
    assert [(o.index, o.function.name) for o in openings] == [(0, "get_weather"), (1, "get_weather")]
    arguments = ["", ""]
    for d in deltas:
        for piece in d.tool_calls or []:
            arguments[piece.index] += piece.function.arguments or ""
    assert [json.loads(a) for a in arguments] == [{"city": "Paris"}, {"city": "Lyon"}]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_with_tools_matches_requests_by_whether_they_offer_tools(llm, client):
    llm.script(with_tools=True, reply="offered")
    llm.script(with_tools=False, reply="none offered")
    assert ask(client, tools=[WEATHER]).choices[0].message.content == "offered"
    assert ask(client).choices[0].message.content == "none offered"
    with pytest.raises(ValueError, match="unknown rule fields"):
        Rule.from_dict({"with_tool": True})


def test_max_tokens_truncates(client):
    response = ask(client, max_tokens=3)
    assert response.choices[0].finish_reason == "length"
    assert len(split_chunks(response.choices[0].message.content)) == 3
    streamed = list(ask(client, stream=True, max_completion_tokens=4))
    assert len([c for c in streamed if c.choices[0].delta.content]) == 4
    assert streamed[-1].choices[0].finish_reason == "length"


def test_drop_after_breaks_the_stream(llm, client):
    llm.script(drop_after=3)
    received = []
    with pytest.raises((httpx.RemoteProtocolError, openai.APIConnectionError)):
        for chunk in ask(client, stream=True):
            received.append(chunk.choices[0].delta.content)
    assert len(received) == 3


def test_end_after_ends_the_body_cleanly_without_finish_reason_or_done(llm):
    llm.script(reply="one two three four five", end_after=2)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    resp = httpx.post(llm.base_url + "/chat/completions", json=body, timeout=10)
    events = [line.removeprefix("data: ") for line in resp.text.splitlines() if line.startswith("data: ")]
    assert resp.headers["connection"] == "close" and "[DONE]" not in events
    chunks = [json.loads(e)["choices"][0] for e in events]
    assert "".join(c["delta"].get("content") or "" for c in chunks) == "one two "
    assert all(c["finish_reason"] is None for c in chunks)


def test_a_request_not_streamed_gets_half_a_body_dropped_or_ended(llm):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    llm.script(reply="one two three four five", drop_after=2, times=1)
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(llm.base_url + "/chat/completions", json=body, timeout=10)
    llm.script(reply="one two three four five", end_after=2, times=1)
    resp = httpx.post(llm.base_url + "/chat/completions", json=body, timeout=10)
    assert resp.status_code == 200 and resp.headers["connection"] == "close"
    assert resp.text.startswith('{"id": "chatcmpl-')
    with pytest.raises(json.JSONDecodeError):
        resp.json()
    assert httpx.post(llm.base_url + "/chat/completions", json=body, timeout=10).json()["object"] == "chat.completion"


@pytest.mark.parametrize("endless, stream, piece", [
    ("empty", True, 'data: {'), ("drip", True, '"content": "drip "'), ("comments", True, ": keep-alive"),
    ("empty", False, " "),
])
def test_endless_answers_keep_sending_and_never_finish(llm, endless, stream, piece):
    llm.script(endless=endless, token_delay=0.01)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    received = ""
    with httpx.stream("POST", llm.base_url + "/chat/completions", json=body, timeout=10) as resp:
        for text in resp.iter_text():
            received += text
            if received.count(piece) >= 20:  # far more than any answer's worth of pieces, and still going
                break
    assert "[DONE]" not in received and "finish_reason\": \"stop" not in received
    if endless == "empty":
        assert '"content": ""' in received or not stream


def test_an_unknown_endless_kind_is_refused():
    with pytest.raises(ValueError, match="endless must be one of"):
        Rule.from_dict({"endless": "forever"})


def test_hang_lets_the_client_time_out(llm, client):
    llm.script(hang=True, times=1)
    with pytest.raises(openai.APITimeoutError):
        ask(client, timeout=0.3)
    assert ask(client).choices[0].message.content  # the hang was that request's only


def test_latency_and_token_delay(llm, client):
    llm.script(latency=0.2, token_delay=0.01, reply="one two three four five six")
    started = time.monotonic()
    ask(client)
    # Only the lower bound: it is what the server guarantees; an upper one would measure the machine's load.
    assert time.monotonic() - started >= 0.25


def test_a_held_answer_waits_until_released(llm, client):
    llm.script(match="tea", reply="Coffee.", hold="kettle")
    box: dict[str, str] = {}
    asker = threading.Thread(target=lambda: box.update(answer=ask(client).choices[0].message.content))
    asker.start()
    llm.wait_held("kettle")
    assert asker.is_alive() and "answer" not in box  # held: the request arrived, no answer left
    llm.release("kettle")
    asker.join()
    assert box["answer"] == "Coffee."
    assert ask(client).choices[0].message.content == "Coffee."  # an open gate stays open
    with pytest.raises(TimeoutError, match="'other'"):
        llm.wait_held("other", timeout=0.01)


def test_a_stream_can_pause_mid_answer_until_released(llm, client):
    llm.script(reply="one two three four", hold="mid", pause_after=2)
    stream = ask(client, stream=True)
    received = [next(stream).choices[0].delta.content for _ in range(2)]
    llm.wait_held("mid")  # two chunks out, the rest held back
    llm.release("mid")
    received += [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert received == ["one ", "two ", "three ", "four"]


def test_reset_releases_held_answers(llm, client):
    llm.script(hold="never-released")
    asker = threading.Thread(target=lambda: ask(client))
    asker.start()
    llm.wait_held("never-released")
    llm.reset()
    asker.join()  # returns: a later test is never left with a request stuck from this one


async def test_many_concurrent_streams():
    with ScriptedLLM(token_delay=0.01) as llm:
        llm.script(hold="together")
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="x", max_retries=0)

        async def one(i: int) -> str:
            stream = await client.chat.completions.create(
                model="pro", stream=True, messages=[{"role": "user", "content": f"topic {i}"}])
            return "".join([c.choices[0].delta.content or "" async for c in stream])

        streams = asyncio.gather(*(one(i) for i in range(120)))
        # All 120 are held at once: the server takes requests side by side instead of queueing them.
        await asyncio.to_thread(llm.wait_held, "together", 120)
        llm.release("together")
        texts = await streams
        await client.close()
    assert len(set(texts)) == 120


def test_models_health_and_control_endpoints(llm):
    with httpx.Client(base_url=llm.url) as http:
        assert http.get("/health").json() == {"status": "ok"}
        http.post("/_script", json=[{"model": "judge", "reply": "ok"}, {"match": "x", "times": 2}])
        assert [m["id"] for m in http.get("/v1/models").json()["data"]] == ["scripted", "judge"]
        assert http.post("/_script", json={"bogus": 1}).status_code == 400
        assert http.post("/_release", json={"name": "g"}).json() == {"status": "ok"}
        assert llm.state.gate("g").opened.is_set()
        assert http.post("/_release", json={}).status_code == 400
        assert [r.model for r in llm.state.rules] == ["judge", None]
        assert http.post("/_reset").json() == {"status": "ok"}
        assert llm.state.rules == [] and http.get("/_requests").json() == []


def test_rule_round_trips_as_json():
    rule = Rule(model="m", json={"a": 1}, times=2)
    assert Rule.from_dict(json.loads(json.dumps(rule.to_dict()))) == rule


def test_subprocess_mode():
    with subprocess.Popen([sys.executable, "-m", "tests.support.scripted_llm", "--port", "0"],
                          cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True) as proc:
        try:
            line = proc.stdout.readline().strip()
            assert line.startswith("READY http://127.0.0.1:") and line.endswith("/v1")
            base_url = line.split()[1]
            control = base_url.removesuffix("/v1")
            httpx.post(control + "/_script", json={"match": "tea", "reply": "Coffee."}).raise_for_status()
            client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
            assert ask(client).choices[0].message.content == "Coffee."
            assert httpx.get(control + "/_requests").json()[0]["model"] == "pro"
        finally:
            proc.terminate()  # SIGTERM is the documented way to stop it; it exits 0
        assert proc.wait(timeout=5) == 0
