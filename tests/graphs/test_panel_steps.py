"""Panel nodes' pure parts: choosing panelists by family, anonymising answers, classifying failures."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from langgraph.errors import NodeTimeoutError

from parley.graphs.panel.steps import (
    AllModelsFailedError,
    TooFewFamiliesError,
    TooFewPanelistsError,
    arbitration_messages,
    mixes_families,
    panel_seats,
    pick_panelists,
    redact_names,
    sample_temperatures,
    to_messages,
)
from parley.llm.failures import ModelError, classify_failure, describe_failure, is_transient
from parley.llm.tokens import approx_tokens

GPT5, GPT5_MINI, O3 = "openai:gpt-5", "openai:gpt-5-mini", "openai:o3"
SONNET, OPUS = "anthropic:claude-sonnet-4-5", "anthropic:claude-opus-4-5"
GEMINI, FLASH = "google:gemini-2.5-pro", "google:gemini-2.5-flash"
LLAMA, MISTRAL = "meta:llama-4-maverick", "mistral:mistral-large-latest"
SMOL = "local:smollm2"


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


@pytest.mark.parametrize("models, size, expected", [
    # one model: every seat is a sample of it
    ([SMOL], 3, [SMOL, SMOL, SMOL]),
    # distinct families first, in list order; then another listed model of a seated family; then resamples
    ([GPT5, GPT5_MINI, SONNET], 3, [GPT5, GPT5_MINI, SONNET]),
    ([GPT5, GPT5_MINI, SONNET], 5, [GPT5, GPT5_MINI, SONNET, GPT5, GPT5_MINI]),
    ([GPT5, SONNET], 3, [GPT5, SONNET, GPT5]),
    ([SMOL, GPT5, O3, GPT5_MINI, SONNET, GEMINI], 4, [SMOL, GPT5, SONNET, GEMINI]),
    # enough families: the flag changes nothing
    ([GPT5, GPT5_MINI, SONNET, OPUS, GEMINI], 3, [GPT5, SONNET, GEMINI]),
])
def test_same_family_panels_fill_remaining_seats_by_resampling(models, size, expected):
    assert pick_panelists(models, size, allow_same_family=True) == expected


def test_same_family_still_needs_a_model_and_a_valid_size():
    with pytest.raises(TooFewFamiliesError):
        pick_panelists([], 3, allow_same_family=True)
    with pytest.raises(ValueError, match="between 2 and 8"):
        pick_panelists([SMOL], 9, allow_same_family=True)


def test_seats_have_unique_labels_and_resamples_differ_in_temperature():
    seats = panel_seats(pick_panelists([SMOL], 3, allow_same_family=True))
    assert [s["label"] for s in seats] == [SMOL, f"{SMOL} #2", f"{SMOL} #3"]
    assert [s["model"] for s in seats] == [SMOL] * 3  # the real id is what gets called and priced
    assert len({s["temperature"] for s in seats}) == 3
    mixed = panel_seats([GPT5, SONNET, GPT5], temperature=0.2)
    assert [s["label"] for s in mixed] == [GPT5, SONNET, f"{GPT5} #2"]
    assert mixed[1]["temperature"] == 0.2  # a model seated once keeps the caller's temperature
    assert mixed[0]["temperature"] != mixed[2]["temperature"]
    assert panel_seats([GPT5, SONNET, GEMINI]) == [
        {"model": m, "label": m, "temperature": None} for m in (GPT5, SONNET, GEMINI)]
    assert mixes_families([GPT5, GPT5_MINI, SONNET]) and mixes_families([SMOL] * 3)
    assert not mixes_families([GPT5, SONNET, GEMINI])


@pytest.mark.parametrize("count, base, ceiling", [(3, None, None), (7, None, 1.0), (7, 0.0, None), (7, 1.0, 1.0),
                                                  (3, 1.5, 1.0), (7, 2.0, None)])
def test_sample_temperatures_are_distinct_and_in_range(count, base, ceiling):
    temperatures = sample_temperatures(count, base, ceiling)
    top = min(max(1.0, base or 0.0), ceiling if ceiling is not None else 2.0)
    assert len(temperatures) == count == len(set(temperatures))
    assert all(0.0 <= t <= top for t in temperatures)
    if base is not None and base <= top:
        assert temperatures[0] == base  # the first sample keeps the caller's temperature


@pytest.mark.parametrize("size", [1, 9])
def test_panel_size_is_two_to_eight(size):
    with pytest.raises(ValueError, match="between 2 and 8"):
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


def test_arbitration_prompt_fits_a_small_window_with_every_answer():
    question = [{"role": "user", "content": "Should cities ban cars?"}]
    answers = [{"model": SMOL if i == 0 else f"{SMOL} #{i + 1}", "model_id": SMOL,
                "answer": f"START-{i} " + "because traffic " * 600 + f" END-{i}"} for i in range(3)]
    system, human = arbitration_messages(question, answers, prompt_budget=1600)
    assert approx_tokens([system, human]) <= 1600
    for i, letter in enumerate("ABC"):
        assert f"### Answer {letter}\nSTART-{i} because traffic" in human.content
        assert f"END-{i}" not in human.content
    assert human.content.count(" [...]") == 3
    assert "[user]\nShould cities ban cars?" in human.content
    unbounded = arbitration_messages(question, answers)[1].content
    assert all(f"END-{i}" in unbounded for i in range(3))  # no window, no cut
    short = [{"model": GPT5, "answer": "Yes."}, {"model": SONNET, "answer": "No."}]
    assert arbitration_messages(question, short, prompt_budget=1600) == arbitration_messages(question, short)
    # A short answer keeps all of its text; the long ones share what it leaves.
    mixed = [answers[0], {"model": SONNET, "answer": "Short and whole. END-short"}, answers[2]]
    _, human = arbitration_messages(question, mixed, prompt_budget=1600)
    assert "### Answer B\nShort and whole. END-short" in human.content and human.content.count(" [...]") == 2
    assert approx_tokens(arbitration_messages(question, mixed, prompt_budget=1600)) <= 1600


def test_resampled_answers_stay_anonymous():
    answers = [{"model": f"{SMOL} #2", "model_id": SMOL, "answer": "As smollm2 I say yes."},
               {"model": SMOL, "model_id": SMOL, "answer": "No."}]
    _, human = arbitration_messages([{"role": "user", "content": "Q?"}], answers)
    assert "smollm2" not in human.content and "#2" not in human.content


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


def test_a_panels_conversation_is_converted_once_for_all_its_panelists():
    from parley.graphs.panel.steps import _PANEL_PROMPTS

    messages = [{"role": "user", "content": "Why is the sky blue?"}, {"role": "assistant", "content": "Rayleigh."},
                {"role": "user", "content": "Say more."}]
    first = _PANEL_PROMPTS.prompt(messages, "Be brief.")
    again = _PANEL_PROMPTS.prompt(messages, "Be brief.")
    assert first == to_messages(messages, "Be brief.")
    assert first is not again and all(a is b for a, b in zip(first, again, strict=True))  # the same messages
    other = _PANEL_PROMPTS.prompt([dict(m) for m in messages], "Be brief.")  # another panel's list
    assert other == first and other[1] is not first[1]
    assert _PANEL_PROMPTS.prompt(messages, None) == to_messages(messages)
