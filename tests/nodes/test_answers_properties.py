"""Answer rules hold for any text a model writes: a reading is canonical (reading it again gives itself), a vote's
winner is one of the readings, and nothing but a rule's own ValueError is ever raised (nodes/answers.py)."""

from __future__ import annotations

import re
from collections import Counter
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from parley.nodes.answers import canonical_number, majority_answer, majority_vote, normalise_text, parse_rule
from tests.support.strategies import PROPERTY, strings, text

RULES = [parse_rule(spec) for spec in ("number", "choice", "exact", r"regex:ANSWER=(\w+)", r"regex:(\d+)|(x)",
                                       r"regex:[A-J]")]
rules = st.sampled_from(RULES)


@PROPERTY
@given(spec=st.one_of(text, strings(max_size=20).map(lambda s: "regex:" + s)))
def test_parse_rule_gives_a_rule_or_a_value_error(spec):
    try:
        rule = parse_rule(spec)
    except ValueError as exc:
        assert str(exc)
    else:
        assert rule.kind in ("number", "choice", "exact", "regex")
        assert parse_rule(rule.name) == rule


@PROPERTY
@given(rule=rules, response=text)
def test_a_reading_is_canonical_and_reads_back_as_itself(rule, response):
    answer = rule.extract(response)
    assert answer == rule.extract(response)  # the same text, the same reading
    if answer is None:
        return
    assert isinstance(answer, str) and answer
    if rule.kind == "number":
        assert canonical_number(answer) == answer
    elif rule.kind == "choice":
        assert answer in "ABCDEFGHIJ" and len(answer) == 1
    else:
        assert normalise_text(answer) == answer
    # A pattern need not match what it captured; and an exact reading holding answer syntax of its own may parse
    # differently once case-folded ("\\BOXED{}0" is no box, "\\boxed{}0" is an empty one).
    if rule.kind in ("number", "choice") or (rule.kind == "exact" and not re.search("answer|boxed", answer)):
        assert rule.extract(answer) == answer


@PROPERTY
@given(number=st.one_of(text, st.decimals(allow_nan=True, allow_infinity=True).map(str),
                        st.integers(-(10**30), 10**30).map(lambda n: f"{n:,}"),
                        st.from_regex(r"-?\$?\d{1,40}(\.\d{1,40})?", fullmatch=True)))
def test_canonical_number_is_exact_and_idempotent(number):
    canonical = canonical_number(number)
    if canonical is None:
        return
    assert canonical_number(canonical) == canonical
    assert re.fullmatch(r"-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?", canonical) and canonical != "-0"
    # Exact: the value written, not one rounded to the 28 digits of Decimal's default context.
    assert Decimal(canonical) == Decimal(number.replace(",", "").replace("$", "").replace(" ", "").rstrip("."))


@PROPERTY
@given(answers=st.lists(st.one_of(st.none(), st.sampled_from(["18", "B", "paris", "٣", "😀", ""])), max_size=12))
def test_majority_vote_picks_a_most_common_answer_first_given_on_ties(answers):
    vote = majority_vote(answers)
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        assert (vote.answer, vote.count, vote.tied) == (None, 0, False)
        return
    top = max(counts.values())
    leaders = [a for a in answers if a is not None and counts[a] == top]
    assert vote.answer == leaders[0] and vote.count == top
    assert vote.tied == (len(set(leaders)) > 1)


@PROPERTY
@given(texts=st.lists(text, max_size=6), rule=rules)
def test_majority_answer_shows_an_answer_read_as_the_winner(texts, rule):
    ballot = majority_answer(texts, rule)
    assert ballot.votes == [rule.extract(t) for t in texts]
    assert ballot.vote == majority_vote(ballot.votes)
    if not texts:
        assert ballot.text == "" and ballot.winner_index is None
        return
    assert ballot.text in texts
    if ballot.vote.answer is None:
        assert ballot.text == texts[0] and ballot.winner_index is None
    else:
        assert texts[ballot.winner_index] == ballot.text and ballot.votes[ballot.winner_index] == ballot.vote.answer
    tally = ballot.tally()
    assert sorted(i for _, positions in tally for i in positions) == [i for i, v in enumerate(ballot.votes)
                                                                      if v is not None]
    if tally:
        assert tally[0] == (ballot.vote.answer, [i for i, v in enumerate(ballot.votes) if v == ballot.vote.answer])
