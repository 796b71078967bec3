"""Answer rules read answers the way docs/eval.md says, and majority voting breaks ties by first appearance."""

from __future__ import annotations

import pytest

from parley.nodes.answers import canonical_number, majority_vote, parse_rule

NUMBER = parse_rule("number")
CHOICE = parse_rule("choice")
EXACT = parse_rule("exact")


@pytest.mark.parametrize(("text", "expected"), [
    ("16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\nAnswer: 18", "18"),
    ("Answer: $1,234.50 in total", "1234.5"),
    ("The answer is 42.", "42"),
    ("So we get \\boxed{-7} as the result.", "-7"),
    ("First I thought Answer: 5, but rechecking: Answer: 6", "6"),  # the last explicit answer wins
    ("Answer: 18 dollars, since 9 * 2 = 18 and 3 more would be 21", "18"),  # after a marker, the first number
    ("no marker here, 3 apples and then 12 pears", "12"),  # without one, the last number in the text
    ("Answer: 7.0", "7"),
    ("I do not know.", None),
    ("", None),
])
def test_number_rule(text, expected):
    assert NUMBER.extract(text) == expected


def test_numbers_compare_in_canonical_form():
    assert NUMBER.is_correct(NUMBER.extract("Answer: 1,000"), "1000")
    assert NUMBER.is_correct(NUMBER.extract("Answer: 0.50"), ".5")
    assert not NUMBER.is_correct(NUMBER.extract("Answer: 17"), "18")
    assert not NUMBER.is_correct(None, "18")
    assert canonical_number("-0.0") == "0" and canonical_number("12.") == "12" and canonical_number("x") is None


@pytest.mark.parametrize(("text", "expected"), [
    ("The second option fits best.\nAnswer: (C)", "C"),
    ("answer: b", "B"),
    ("Answer: option D, because the others fail", "D"),
    ("I think (B) is right, not (A).", "A"),  # free text: the last letter option named
    ("B", "B"),
    ("I am not sure", None),  # "I" is a pronoun, not option I
    ("a good question with no letter", None),  # a lowercase "a" is the article, not option A
])
def test_choice_rule(text, expected):
    assert CHOICE.extract(text) == expected


def test_choice_gold_is_a_letter():
    assert CHOICE.is_correct("B", "(b)") and CHOICE.canonical_gold("maybe") is None


@pytest.mark.parametrize(("text", "expected"), [
    ("Paris is the capital.\nAnswer: **Paris**.", "paris"),
    ("Let me think.\nThe  Eiffel   Tower", "the eiffel tower"),  # no marker: the last line
    ("answer: \"New York\"!", "new york"),
])
def test_exact_rule(text, expected):
    assert EXACT.extract(text) == expected
    assert EXACT.is_correct(EXACT.extract(text), expected.upper())


def test_regex_rule_takes_the_last_match_and_its_first_group():
    rule = parse_rule(r"regex:RESULT=(\w+)")
    assert rule.name == r"regex:RESULT=(\w+)"
    assert rule.extract("RESULT=cat ... on reflection RESULT=Dog") == "dog"
    assert rule.is_correct(rule.extract("RESULT=Dog"), "dog")
    assert rule.extract("nothing") is None
    assert parse_rule(r"regex:\d{3}").extract("codes 123 and 456") == "456"  # no group: the whole match


@pytest.mark.parametrize(("spec", "message"), [
    ("numbers", "unknown answer rule 'numbers'"),
    ("regex:", "needs a pattern"),
    ("regex:(unclosed", "not a valid regular expression"),
])
def test_bad_rules_are_named(spec, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        parse_rule(spec)


def test_majority_vote_counts_readable_answers():
    vote = majority_vote(["7", None, "8", "7", None])
    assert (vote.answer, vote.count, vote.tied) == ("7", 2, False)


def test_a_tie_goes_to_the_tied_answer_given_first():
    assert majority_vote(["8", "7", "7", "8", "9"]) == majority_vote(["8", "7", "7", "8", "9"])
    vote = majority_vote(["8", "7", "7", "8", "9"])
    assert (vote.answer, vote.count, vote.tied) == ("8", 2, True)
    assert majority_vote([None, "3", "4"]).answer == "3"  # an unreadable first answer does not count


def test_no_readable_answer_means_no_answer():
    vote = majority_vote([None, None])
    assert (vote.answer, vote.count, vote.tied) == (None, 0, False)
    assert majority_vote([]).answer is None
