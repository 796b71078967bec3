"""Verdicts, rankings, opponents, structured answers and tool calls hold for anything a model answers: a schema gives
a bounded value or a ValidationError, a winner is one of the candidates, Borda points are conserved, a structured call
answers with its fallback only where documented, and a tool call's arguments run it or are an error the model reads
(nodes/rank.py, judge.py, select_opponent.py, structured.py, anonymise.py, tools.py, speak.py)."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.exceptions import OutputParserException
from pydantic import ValidationError

from parley.llm.budget import BudgetExceeded
from parley.llm.mcp import ToolOutput
from parley.nodes.anonymise import Anonymiser
from parley.nodes.arbitrate import ANSWER_LETTERS
from parley.nodes.judge import Judgement, agreed_winner, pick_schema, verdicts_by_order
from parley.nodes.rank import borda, ranking_schema, review_orders
from parley.nodes.select_opponent import OpponentProfile, usable_opponent
from parley.nodes.speak import _asked
from parley.nodes.structured import ask_structured, is_unreadable, is_unusable
from parley.nodes.tools import AgentTool, Toolbox
from tests.support.strategies import PROPERTY, TIMES, deep_json, json_values, long_runs, strings, text

letter_sets = st.integers(1, len(ANSWER_LETTERS)).map(lambda n: ANSWER_LETTERS[:n])
short_texts = st.one_of(text, strings(max_size=400))
texts_or_values = st.one_of(short_texts, json_values)


def lists_of(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.lists(values, max_size=7), json_values)


# --- rank -------------------------------------------------------------------------------------------------------


@PROPERTY
@given(letters=letter_sets, data=st.data())
def test_a_ranking_is_every_letter_once_or_a_validation_error(letters, data):
    answer = data.draw(st.fixed_dictionaries({
        "ranking": st.one_of(st.permutations(list(letters)), st.lists(st.sampled_from([*letters, "Z", "a", 1, None]),
                                                                       max_size=9), json_values),
        "reason": texts_or_values,
    }) | json_values)
    schema = ranking_schema(letters)
    try:
        ranked = schema.model_validate(answer)
    except ValidationError:
        return
    assert sorted(ranked.ranking) == sorted(letters) and len(ranked.reason) <= 300
    order = data.draw(st.permutations(range(len(letters))))  # the positions the reviewer read, in its order
    positions = [order[letters.index(letter)] for letter in ranked.ranking]  # as the review node maps them back
    assert sorted(positions) == sorted(order)


@PROPERTY
@given(letters=letter_sets, answer=text)
def test_any_text_as_a_ranking_or_a_pick_is_read_or_a_validation_error(letters, answer):
    for schema in (ranking_schema(letters), pick_schema(letters), Judgement, OpponentProfile):
        try:
            schema.model_validate_json(answer)
        except ValidationError:
            pass


@st.composite
def rankings(draw) -> tuple[list[list[int] | None], int]:
    count = draw(st.integers(0, 7))
    ranked = draw(st.lists(st.one_of(st.none(), st.lists(st.integers(0, max(count - 1, 0)), unique=True,
                                                          max_size=count)), max_size=8))
    return ranked, count


@PROPERTY
@given(drawn=rankings())
def test_borda_conserves_points_and_ranks_every_answer_once(drawn):
    ranked, count = drawn
    scores = borda(ranked, count)
    given_rankings = [r for r in ranked if r is not None]
    assert sorted(s["index"] for s in scores) == list(range(count))
    assert sum(s["points"] for s in scores) == sum(len(r) * (len(r) - 1) // 2 for r in given_rankings)
    assert sum(s["reviews"] for s in scores) == sum(len(r) for r in given_rankings)
    assert all(0 <= s["score"] <= max(count - 1, 0) for s in scores)
    assert [(-s["score"], s["index"]) for s in scores] == sorted((-s["score"], s["index"]) for s in scores)
    assert borda([r for r in ranked if r is not None], count) == scores  # an abstention changes nothing


@PROPERTY
@given(count=st.integers(1, 8), seed=st.one_of(strings(max_size=12), st.integers()))
def test_review_orders_are_the_others_in_an_order_fixed_by_the_seed(count, seed):
    assert review_orders(0, seed) == []
    orders = review_orders(count, seed)
    assert [sorted(order) for order in orders] == [[i for i in range(count) if i != r] for r in range(count)]
    assert review_orders(count, seed) == orders


# --- judge ------------------------------------------------------------------------------------------------------


@PROPERTY
@given(answer=st.fixed_dictionaries({
    "consensus": lists_of(texts_or_values), "disagreements": lists_of(texts_or_values),
    "winner": st.one_of(st.sampled_from(["A", "B", "tie", "a", "Tie", "C", ""]), json_values),
    "winnerReason": texts_or_values, "conclusion": texts_or_values, "recommendations": lists_of(texts_or_values),
}) | json_values)
def test_a_verdict_is_bounded_or_a_validation_error(answer):
    try:
        verdict = Judgement.model_validate(answer)
    except ValidationError:
        return
    assert verdict.winner in ("A", "B", "tie") and len(verdict.winnerReason) <= 300
    for items, most in ((verdict.consensus, 4), (verdict.disagreements, 4), (verdict.recommendations, 3)):
        assert len(items) <= most and all(len(item) <= 120 for item in items)


@PROPERTY
@given(letters=letter_sets, answer=st.fixed_dictionaries({
    "best": st.one_of(st.sampled_from([*ANSWER_LETTERS, "Z", "a", ""]), json_values), "reason": texts_or_values,
}) | json_values)
def test_a_pick_is_one_of_the_letters_shown_or_a_validation_error(letters, answer):
    try:
        pick = pick_schema(letters).model_validate(answer)
    except ValidationError:
        return
    assert pick.best in letters and len(pick.reason) <= 300


@PROPERTY
@given(first=short_texts, second=short_texts)
def test_the_agreed_winner_is_the_one_both_named_else_a_tie(first, second):
    winner = agreed_winner(first, second)
    assert winner == agreed_winner(second, first)
    assert winner == (first if first == second else "tie")
    assert agreed_winner(first, first) == first


@PROPERTY
@given(verdicts=st.lists(st.fixed_dictionaries({"winner": short_texts},
                                               optional={"order": st.sampled_from(["as_debated", "swapped", ""])}),
                         max_size=3))
def test_verdicts_by_order_puts_the_verdict_as_debated_first(verdicts):
    if not verdicts:
        with pytest.raises(IndexError):  # documented: a judging gives one verdict at least
            verdicts_by_order(verdicts)
        return
    first, second = verdicts_by_order(verdicts)
    assert any(first is v for v in verdicts) and any(second is v for v in verdicts)
    if any(v.get("order") == "as_debated" for v in verdicts):
        assert first.get("order") == "as_debated"
    if len(verdicts) == 1:
        assert first is second


# --- select_opponent --------------------------------------------------------------------------------------------


@PROPERTY
@given(answer=st.fixed_dictionaries({
    "name": texts_or_values, "title": texts_or_values, "bio": texts_or_values, "stance": texts_or_values,
    "traits": lists_of(texts_or_values),
}) | json_values, user=short_texts, other=st.one_of(st.none(), json_values))
def test_an_opponent_is_usable_bounded_and_never_the_user(answer, user, other):
    assert usable_opponent(other, user) is None  # not a profile at all
    try:
        choice = OpponentProfile.model_validate(answer)
    except ValidationError:
        return
    profile = usable_opponent(choice, user)
    if profile is None:
        assert not choice.name.strip() or not choice.stance.strip() or choice.name.strip() == user.strip()
        return
    assert profile["name"].strip() and profile["name"] != user.strip()
    assert len(profile["name"]) <= 60 and len(profile["title"]) <= 80
    assert len(profile["bio"]) <= 300 and 0 < len(profile["stance"]) <= 300
    assert len(profile["traits"]) <= 5 and all(0 < len(t) <= 40 for t in profile["traits"])


# --- anonymise --------------------------------------------------------------------------------------------------


@PROPERTY
@given(names=st.lists(strings(min_size=1, max_size=10), unique=True, max_size=4), body=text,
       whole_words=st.booleans(), ignore_case=st.booleans())
def test_names_hidden_and_revealed_in_any_text(names, body, whole_words, ignore_case):
    labels = {name: f"Speaker {ANSWER_LETTERS[i]}" for i, name in enumerate(names)}
    anonymiser = Anonymiser(labels, whole_words=whole_words, ignore_case=ignore_case, min_length=0)
    hidden = anonymiser.hide(body)
    assert isinstance(hidden, str) and isinstance(anonymiser.reveal(hidden), str)
    if not any(name in body or label in body for name, label in labels.items()) and not ignore_case:
        assert hidden == body and anonymiser.reveal(body) == body


# --- structured -------------------------------------------------------------------------------------------------


def validation_error() -> ValidationError:
    try:
        Judgement.model_validate({})
    except ValidationError as exc:
        return exc
    raise AssertionError("an empty verdict validated")


FAILURES = {
    "unreadable JSON": lambda: OutputParserException("Invalid json output"),
    "out of range": validation_error,
    "budget": lambda: BudgetExceeded("over budget"),
    "timeout": lambda: openai.APITimeoutError(request=httpx.Request("POST", "http://model.test")),
    "bug": lambda: KeyError("a bug of Parley's own"),
}


class Failing:
    """A structured model whose call fails with `exc`."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def ainvoke(self, messages):
        raise self.exc


@PROPERTY
@given(failure=st.sampled_from(sorted(FAILURES)), attempt=st.integers(1, 3), attempts=st.integers(1, 3),
       with_fallback=st.booleans(), on_unusable=st.booleans())
def test_a_failed_structured_call_gives_the_fallback_only_where_documented(failure, attempt, attempts, with_fallback,
                                                                          on_unusable):
    exc = FAILURES[failure]()
    accepts = is_unusable if on_unusable else is_unreadable
    fallback = (lambda e: ("fallback", e)) if with_fallback else None
    expected = with_fallback and (isinstance(exc, BudgetExceeded) or (accepts(exc) and attempt >= attempts))
    try:
        answer = asyncio.run(ask_structured(Failing(exc), [], fallback=fallback, fallback_on=accepts, attempt=attempt,
                                            attempts=attempts))
    except Exception as raised:  # noqa: BLE001 - the property is which one
        assert not expected and raised is exc
    else:
        assert expected and answer == ("fallback", exc)


# --- tool calls -------------------------------------------------------------------------------------------------

arguments = st.one_of(text, long_runs, json_values.map(json.dumps),
                      st.builds(deep_json, json_values, TIMES, as_object=st.booleans()))


async def echo(args: dict) -> ToolOutput:
    return ToolOutput(text=json.dumps(sorted(args)), is_error=False)


@PROPERTY
@given(args=arguments, most=st.integers(1, 300))
def test_a_tool_call_runs_or_answers_an_error_whatever_its_arguments(args, most):
    box = Toolbox([AgentTool("echo", "", {"type": "object"}, "test/echo", echo)], max_chars=most)
    run = asyncio.run(box.run({"id": "call_1", "function": {"name": "echo", "arguments": args}}))
    assert len(run.result) <= most and run.arguments == args
    try:
        parsed = json.loads(args) if args.strip() else {}
    except (ValueError, RecursionError):
        parsed = None
    assert run.is_error == (not isinstance(parsed, dict))


@PROPERTY
@given(said=text, made=st.lists(arguments, max_size=3))
def test_the_calls_a_model_made_are_read_back_valid_or_invalid(said, made):
    message = _asked(said, [{"id": f"call_{i}", "function": {"name": "echo", "arguments": a}} for i, a in
                            enumerate(made)])
    assert len(message.tool_calls) + len(message.invalid_tool_calls) == len(made)
    assert all(isinstance(call["args"], dict) for call in message.tool_calls)
