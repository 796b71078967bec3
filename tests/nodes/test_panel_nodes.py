"""Panel nodes' pure parts: choosing panelists by family, anonymising answers, classifying failures."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from langgraph.errors import NodeTimeoutError

from nodes.failures import classify_failure, describe_failure, is_transient
from nodes.models import ModelError
from nodes.panel import (
    AllModelsFailedError,
    TooFewFamiliesError,
    TooFewPanelistsError,
    arbitration_messages,
    pick_panelists,
    redact_names,
)

GPT5, GPT5_MINI, O3 = "openai:gpt-5", "openai:gpt-5-mini", "openai:o3"
SONNET, OPUS = "anthropic:claude-sonnet-4-5", "anthropic:claude-opus-4-5"
GEMINI, FLASH = "google:gemini-2.5-pro", "google:gemini-2.5-flash"
LLAMA, MISTRAL = "meta:llama-4-maverick", "mistral:mistral-large-latest"


@pytest.mark.parametrize("models, size, expected", [
    # distinct families, in list order
    ([GPT5, SONNET, GEMINI], 3, [GPT5, SONNET, GEMINI]),
    # variants of one family count once
    ([GPT5, GPT5_MINI, SONNET, OPUS, GEMINI], 3, [GPT5, SONNET, GEMINI]),
    # a second family of a provider already seated waits until other providers are used up
    ([GPT5, O3, SONNET, GEMINI], 3, [GPT5, SONNET, GEMINI]),
    ([GPT5, O3, SONNET], 3, [GPT5, O3, SONNET]),
    # the panel keeps the fallback list's order even when the second pass fills a seat
    ([O3, GPT5, LLAMA], 3, [O3, GPT5, LLAMA]),
    # smaller and larger panels
    ([GPT5, SONNET, GEMINI, LLAMA], 2, [GPT5, SONNET]),
    ([GPT5, SONNET, GEMINI, LLAMA, MISTRAL], 5, [GPT5, SONNET, GEMINI, LLAMA, MISTRAL]),
    # duplicates and gateway-style ids
    ([GPT5, GPT5, "openrouter:anthropic/claude-sonnet-4-5", GEMINI], 3,
     [GPT5, "openrouter:anthropic/claude-sonnet-4-5", GEMINI]),
])
def test_family_selection(models, size, expected):
    assert pick_panelists(models, size) == expected


@pytest.mark.parametrize("models, size", [
    ([GPT5, GPT5_MINI, SONNET], 3),
    ([SONNET, OPUS, GEMINI, FLASH], 3),
    ([GPT5, SONNET], 3),
    ([], 2),
])
def test_too_few_families_names_the_models_and_families(models, size):
    with pytest.raises(TooFewFamiliesError) as caught:
        pick_panelists(models, size)
    for model in models:
        assert model in str(caught.value)
    assert caught.value.families == {m: caught.value.families[m] for m in dict.fromkeys(models)}
    if models:
        assert "(family claude-4-5)" in str(caught.value) or "(family gpt-5)" in str(caught.value)


@pytest.mark.parametrize("size", [1, 8])
def test_panel_size_is_two_to_seven(size):
    with pytest.raises(ValueError, match="between 2 and 7"):
        pick_panelists([GPT5, SONNET, GEMINI], size)


def test_answer_text_loses_its_authors_names():
    text = "As gpt-5 (openai:gpt-5) I think GPT-5 is right; gpt-5-mini disagrees. Claude-Sonnet-4-5 too."
    redacted = redact_names(text, [GPT5, SONNET])
    assert "gpt-5 " not in redacted.lower() and "claude" not in redacted.lower()
    assert "gpt-5-mini" in redacted  # another model's name is not this panel's business


def test_arbitration_prompt_is_anonymous_and_carries_both_prompts():
    messages = [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "What is CAP?"}]
    answers = [{"model": GPT5, "answer": "Réponse un."}, {"model": SONNET, "answer": "Réponse deux."}]
    system, human = arbitration_messages(messages, answers, system_prompt="Be brief.", arbitrator_prompt="Pick one.")
    assert system.content.startswith("Pick one.") and "Answer A" in system.content
    assert "Be brief." in system.content and "Answer in French." in system.content
    assert "### Answer A\nRéponse un." in human.content and "### Answer B\nRéponse deux." in human.content
    assert "[user]\nWhat is CAP?" in human.content
    assert "gpt" not in human.content and "claude" not in human.content
    default_system, _ = arbitration_messages(messages[1:], answers)
    assert "arbitrator" in default_system.content and "Answer in French" not in default_system.content


def _status_error(status: int) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://x/v1/chat/completions")
    response = httpx.Response(status, request=request, json={"error": {"message": f"boom {status}"}})
    return openai.OpenAI(api_key="x", base_url="http://x/v1")._make_status_error(
        f"boom {status}", body={"message": f"boom {status}"}, response=response)


@pytest.mark.parametrize("exc, kind, transient", [
    (openai.APITimeoutError(request=httpx.Request("POST", "http://x")), "timeout", False),
    (NodeTimeoutError("panelist", 1.0, kind="run", run_timeout=1.0), "timeout", False),
    (asyncio.TimeoutError(), "timeout", False),
    (_status_error(429), "rate_limit", True),
    (_status_error(401), "auth", False),
    (_status_error(403), "auth", False),
    (_status_error(500), "server", True),
    (_status_error(503), "server", True),
    (openai.APIConnectionError(request=httpx.Request("POST", "http://x")), "server", True),
    (_status_error(404), "other", False),
    (ModelError("no API key"), "other", False),
])
def test_failures_are_classified(exc, kind, transient):
    assert classify_failure(exc) == kind
    assert is_transient(exc) is transient


def test_failure_descriptions_are_short_and_specific():
    assert describe_failure(_status_error(429)) == "HTTP 429: boom 429"
    assert describe_failure(openai.APITimeoutError(request=httpx.Request("POST", "http://x"))) == \
        "no answer before the time limit"
    assert describe_failure(ModelError("x: no API key")) == "x: no API key"


def test_error_messages_name_each_model_and_why():
    panel = [{"model": GPT5, "success": True}, {"model": SONNET, "success": False, "error": "timeout",
                                                "detail": "no answer before the time limit"}]
    assert str(TooFewPanelistsError(panel, 2)) == (
        "Only 1 of 2 panelists answered (2 needed). openai:gpt-5: answered; "
        "anthropic:claude-sonnet-4-5: timeout (no answer before the time limit)")
    failed = AllModelsFailedError("arbitrator", [{"model": OPUS, "error": "server", "detail": "HTTP 500: x"}])
    assert str(failed) == "Every arbitrator candidate failed. anthropic:claude-opus-4-5: server (HTTP 500: x)"
