"""Every model call ends, and says why when it fails: the total deadline, the gap between streamed chunks, a
stream cut off mid-answer, and upstream error text capped and redacted. Against the scripted server's broken
endpoints (tests/support/scripted_llm.py: `endless`, `end_after`, `status`)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import httpx
import openai
import pytest
from langchain_core.messages import HumanMessage
from pydantic import BaseModel

from parley.llm.endpoints import retry_after
from parley.llm.factory import ModelFactory
from parley.llm.failures import (
    REDACTED,
    UPSTREAM_TEXT_LIMIT,
    IncompleteAnswerError,
    ModelDeadlineError,
    ModelError,
    ModelIdleError,
    classify_failure,
    describe_failure,
    failure_message,
    is_transient,
    register_secret,
    upstream_text,
)
from parley.llm.providers import BUILTIN_PROVIDERS

MODEL = "openai:gpt-4o-mini"
KEY = "sk-proj-Zq8TESTKEYabcdef0123456789"


class Answer(BaseModel):
    answer: str


def factory(settings, *, deadline: float = 30.0, request_timeout: float = 30.0) -> ModelFactory:
    settings.parley_model_call_deadline = deadline
    settings.parley_request_timeout = request_timeout
    return ModelFactory(settings, providers=dict(BUILTIN_PROVIDERS), prices={})


async def call(model, how: str):
    prompt = [HumanMessage("Hello")]
    if how == "astream":
        return "".join([chunk.content async for chunk in model.astream(prompt)])
    return (await model.ainvoke(prompt)).content


# --- the total deadline ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["astream", "ainvoke"])
@pytest.mark.parametrize("endless", ["empty", "drip"])
async def test_an_endpoint_that_never_finishes_fails_at_the_call_deadline(parley_env, llm, endless, how):
    # Each piece comes well within the per-read timeout, so only a total deadline can end the call.
    llm.script(endless=endless, token_delay=0.05)
    model = factory(parley_env, deadline=1.0, request_timeout=30.0).chat(MODEL)
    started = time.monotonic()
    with pytest.raises(ModelDeadlineError) as caught:
        await call(model, how)
    assert time.monotonic() - started >= 1.0
    assert classify_failure(caught.value) == "timeout" and not is_transient(caught.value)
    assert describe_failure(caught.value) == (
        f"{MODEL} did not finish its answer within the 1 s deadline of one model call (PARLEY_MODEL_CALL_DEADLINE)")


async def test_a_structured_call_keeps_the_deadline_too(parley_env, llm):
    llm.script(endless="empty")
    with pytest.raises(ModelDeadlineError):
        await factory(parley_env, deadline=1.0).structured(Answer, MODEL).ainvoke([HumanMessage("Yes?")])


# --- the gap between chunks -----------------------------------------------------------------


async def test_a_stream_of_comments_only_fails_after_the_request_timeout(parley_env, llm):
    # langchain-openai's own gap limit is 120 s whatever the setting said; now it is the setting.
    llm.script(endless="comments", token_delay=0.05)
    model = factory(parley_env, deadline=60.0, request_timeout=0.5).chat(MODEL)
    with pytest.raises(ModelIdleError) as caught:
        await call(model, "astream")
    message = describe_failure(caught.value)
    assert message.startswith(f"{MODEL} sent no data for 0.5 s") and "PARLEY_REQUEST_TIMEOUT" in message
    assert "keep-alive comments do not count" in message
    assert classify_failure(caught.value) == "timeout"


# --- streams cut off ------------------------------------------------------------------------


async def test_a_stream_that_stops_without_finish_reason_is_an_incomplete_answer(parley_env, llm):
    llm.script(reply="Half of an answer that goes on", end_after=2)
    with pytest.raises(IncompleteAnswerError) as caught:
        await call(factory(parley_env).chat(MODEL), "astream")
    assert "without a finish_reason or [DONE]" in describe_failure(caught.value)
    assert classify_failure(caught.value) == "server" and is_transient(caught.value)  # worth another attempt


async def test_a_complete_stream_and_a_stream_its_reader_leaves_are_not_failures(parley_env, llm):
    llm.script(reply="one two three four five")
    model = factory(parley_env).chat(MODEL)
    assert await call(model, "astream") == "one two three four five"
    llm.script(reply="one two three four five")
    stream = model.astream([HumanMessage("Hello")])
    first = await anext(stream)  # a reader that has enough stops early, as the duel's length gate does
    await stream.aclose()
    assert first.content == "one "


# --- upstream error text --------------------------------------------------------------------


@pytest.mark.parametrize("how", ["astream", "ainvoke"])
async def test_upstream_error_text_is_capped_and_redacted_in_the_exception_itself(parley_env, llm, monkeypatch, how):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    parley_env.openai_api_key = KEY
    body = f"bad request from key {KEY}, header Authorization: Bearer abc.def.ghi; " + "x" * 2_000_000
    llm.script(status=500, reply=body)
    with pytest.raises(openai.APIStatusError) as caught:
        await call(factory(parley_env).chat(MODEL), how)
    exc = caught.value
    chain = [exc, exc.__cause__] if exc.__cause__ is not None else [exc]
    for raised in chain:  # langchain-openai re-raises the SDK's error; a log's traceback shows both
        assert len(str(raised)) <= UPSTREAM_TEXT_LIMIT and KEY not in str(raised) and "abc.def" not in str(raised)
        assert KEY not in repr(raised.body) and len(repr(raised.body)) < 2 * UPSTREAM_TEXT_LIMIT
    message = describe_failure(exc)
    assert message.startswith("HTTP 500: bad request from key [redacted]") and message.endswith("[cut]")
    assert len(message) <= UPSTREAM_TEXT_LIMIT + len("HTTP 500: ")


def test_upstream_text_redacts_key_shapes_and_configured_keys_and_cuts_long_text():
    register_secret("plain-configured-key-42")
    text = "keys: sk-abcdef123456 sk-proj-XYZ_987-abc Bearer eyJhbGciOi.payload api_key=hunter22 plain-configured-key-42"
    cleaned = upstream_text(text)
    for secret in ("sk-abcdef123456", "sk-proj-XYZ", "eyJhbGciOi", "hunter22", "plain-configured-key-42"):
        assert secret not in cleaned
    assert cleaned.count(REDACTED) == 5 and cleaned.startswith("keys: ")
    assert upstream_text("line one\nline   two") == "line one line two"
    long = upstream_text("word " * 1000)
    assert len(long) == UPSTREAM_TEXT_LIMIT and long.endswith(" [cut]")
    assert upstream_text("short and harmless") == "short and harmless"



def test_failure_message_words_model_failures_unusable_answers_and_the_rest_by_the_callers_templates():
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    upstream = openai.InternalServerError("boom sk-abcdef123456", response=httpx.Response(500, request=request),
                                          body={"message": "boom sk-abcdef123456"})
    templates = {"model": "the model failed ({detail})", "unreadable": "unusable", "other": "internal: {kind}"}
    assert failure_message(upstream, **templates) == f"the model failed (HTTP 500: boom {REDACTED})"
    assert failure_message(TimeoutError(), **templates).startswith("the model failed (")
    assert failure_message(ValueError("bad json"), **templates) == "unusable"
    assert failure_message(ValueError("bad json"), other="{text}") == "bad json"
    assert failure_message(KeyError("seat"), **templates) == "internal: KeyError"
    assert failure_message(RuntimeError(), other="{text}") == "RuntimeError"
    assert failure_message(ModelError("no API key {x}")) == "no API key {x}"  # braces in the detail stay as they are

# --- /metrics labels ------------------------------------------------------------------------


def test_metrics_label_only_configured_model_ids(parley_env):
    parley_env.parley_debate_models = ["openai:gpt-5", "anthropic:claude-sonnet-4-5"]
    parley_env.parley_arbitrator_model = "acme:house-model"
    models = ModelFactory(parley_env, providers=dict(BUILTIN_PROVIDERS), prices={"gpt-5": (1, 2), "gpt-4o": (1, 2),
                                                                                   "claude-haiku-4-5": (1, 2)})
    for configured in ("openai:gpt-5", "anthropic:claude-sonnet-4-5", "acme:house-model", parley_env.default_model,
                       "gpt-4o", "openai:gpt-4o", "local:gpt-4o", "anthropic:claude-haiku-4-5"):
        assert models.metric_label(configured) == configured
    for made_up in ("openai:" + "x" * 100_000, "openai:gpt-5-" + "x" * 50, "zzz:gpt-5", "openai:GPT-5",
                    "acme:other-model"):
        assert models.metric_label(made_up) == "other"


# --- an answer asked for whole that trickles; a rate limit that says when ------------------


async def test_an_answer_asked_for_whole_that_trickles_fails_after_the_request_timeout(parley_env, llm):
    """A JSON body sent a space at a time once kept a call open until its deadline (each read came within the
    per-read timeout): the whole body must arrive within the request timeout of its headers."""
    llm.script(endless="drip", token_delay=0.05)
    model = factory(parley_env, deadline=60.0, request_timeout=1.0).chat(MODEL)
    started = time.monotonic()
    with pytest.raises(Exception) as caught:
        await call(model, "ainvoke")
    assert time.monotonic() - started < 15  # the deadline is 60 s
    assert classify_failure(caught.value) == "timeout"


async def test_a_rate_limited_endpoint_is_not_called_again_before_its_retry_after(parley_env, llm):
    """A 429's `Retry-After` holds the worker's next call to that endpoint (its node's retry comes half a second
    later): the retry is sent once the time asked for has passed."""
    llm.script(status=429, retry_after="2", times=1)
    llm.script(reply="Fine now.")
    model = factory(parley_env).chat(MODEL)
    refused_at = time.monotonic()
    with pytest.raises(openai.RateLimitError):
        await call(model, "ainvoke")
    assert await call(model, "ainvoke") == "Fine now."
    assert time.monotonic() - refused_at >= 1.9
    assert retry_after(SimpleNamespace(response=SimpleNamespace(headers={"retry-after-ms": "1500"}))) == 1.5
    assert retry_after(SimpleNamespace(response=SimpleNamespace(headers={"retry-after": "soon"}))) is None
