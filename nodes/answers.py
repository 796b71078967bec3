"""Answer rules: how a model's free-text answer is reduced to a comparable value, and majority voting over them
(the evaluation's methods and the designer's `vote` node).

A rule is named on the command line: `number`, `choice`, `exact` or `regex:<pattern>`. Each rule gives
the instruction added to every question (so all methods are asked for the same format), extracts the
answer from a response, and says whether it equals the gold answer. Extracted answers are canonical
strings (`"18"`, `"B"`, `"paris"`), so equal answers compare equal and can be counted as votes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from parley.core.patterns import Pattern, PatternError, user_pattern
from parley.nodes.prompts import answers as prompts

__all__ = ["AnswerRule", "Ballot", "Vote", "majority_answer", "majority_vote", "parse_rule", "vote_record"]

# "Answer: 42", "answer is 42", "final answer: (B)": the explicit marker the instructions ask for. "is" is a whole
# word: "the answer isn't 5" or "answer island" holds no marker.
_MARKER = re.compile(r"\banswer\s*(?:is\b|:|=)\s*", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
# A number as people write it: signs, thousands separators, decimals, a leading currency sign.
_NUMBER = re.compile(r"-?\$?\s?\d[\d,]*(?:\.\d+)?|-?\$?\s?\.\d+")
_LETTER = re.compile(r"\(?\b([A-J])\b\)?")


@dataclass(frozen=True)
class AnswerRule:
    """One way of reading answers: `kind` is number, choice, exact or regex (then `pattern` is set)."""

    kind: str
    pattern: Pattern | None = None  # RE2's, matched without backtracking (`core.patterns`)

    @property
    def name(self) -> str:
        return f"regex:{self.pattern.pattern}" if self.pattern is not None else self.kind

    @property
    def instruction(self) -> str:
        """What every method's prompt adds to the question, so the answer can be read back."""
        return {
            "number": prompts.NUMBER_FORMAT,
            "choice": prompts.CHOICE_FORMAT,
            "exact": prompts.EXACT_FORMAT,
            "regex": prompts.EXACT_FORMAT,
        }[self.kind]

    def extract(self, text: str | None) -> str | None:
        """The canonical answer in `text`, or None when it holds none this rule can read.

        A reading read again gives itself, except an exact reading that holds answer syntax of its own once
        case-folded ("İANSWER:0" reads "i̇answer:0", where folding put a word edge before "answer"; that reads "0").
        """
        if not text:
            return None
        if self.kind == "regex":
            return self._extract_regex(text)
        candidates = [m.group(1) for m in _BOXED.finditer(text)] + _after_markers(text)
        # The last explicit answer wins (a model often restates it at the end); the whole text is the fallback.
        for candidate in reversed(candidates):
            if (value := self._read(candidate, whole=False)) is not None:
                return value
        return self._read(text, whole=True)

    def canonical_gold(self, gold: str) -> str | None:
        """The gold answer in canonical form (None when it cannot be read by this rule)."""
        if self.kind == "number":
            return canonical_number(gold)
        if self.kind == "choice":
            letter = gold.strip().strip("()").upper()
            return letter if re.fullmatch(r"[A-J]", letter) else None
        return normalise_text(gold)

    def is_correct(self, answer: str | None, gold: str) -> bool:
        return answer is not None and answer == self.canonical_gold(gold)

    def _read(self, text: str, *, whole: bool) -> str | None:
        if self.kind == "number":
            numbers = [canonical_number(m.group(0)) for m in _NUMBER.finditer(text)]
            numbers = [n for n in numbers if n is not None]
            # After a marker the first number is the answer ("Answer: 18 dollars, i.e. 9 * 2"); in free text the last.
            if not numbers:
                return None
            return numbers[-1] if whole else numbers[0]
        if self.kind == "choice":
            return _read_choice(text, whole=whole)
        # exact: a marker's line, else the response's last non-empty line.
        line = text.strip().splitlines()[-1 if whole else 0] if text.strip() else ""
        if whole and _MARKER.search(line):
            # The last line is a marker left empty ("Answer: ."): read whole it would give the marker's own words
            # ("answer"), and blank answers would vote together for them.
            return None
        return normalise_text(line) or None

    def _extract_regex(self, text: str) -> str | None:
        matches = list(self.pattern.finditer(text))
        if not matches:
            return None
        last = matches[-1]
        value = next((g for g in last.groups() if g is not None), None) if last.groups() else last.group(0)
        return normalise_text(value) if value is not None else None


def parse_rule(spec: str) -> AnswerRule:
    """Parse a rule name (`number`, `choice`, `exact`, `regex:<pattern>`); raise ValueError naming the problem."""
    spec = (spec or "").strip()
    if spec in ("number", "choice", "exact"):
        return AnswerRule(spec)
    if spec.startswith("regex:"):
        source = spec.removeprefix("regex:")
        if not source:
            raise ValueError("regex: needs a pattern after the colon, e.g. regex:ANSWER=(\\w+)")
        try:
            return AnswerRule("regex", user_pattern(source))
        except PatternError as exc:
            raise ValueError(f"regex:{source}: {exc}") from None
    raise ValueError(f"unknown answer rule {spec!r}: use number, choice, exact or regex:<pattern>")


def _after_markers(text: str) -> list[str]:
    """What follows each answer marker, up to the next marker or the end of its line."""
    marks = list(_MARKER.finditer(text))
    ends = [m.start() for m in marks[1:]] + [len(text)]
    return [text[m.end():end].split("\n", 1)[0] for m, end in zip(marks, ends)]


# The most digits a number spells out on either side of its point: Python's own limit on reading an int from text.
# Past it a number ("1e999999", or a model repeating a digit to its token cap) is no answer anyone means.
MAX_NUMBER_DIGITS = 4300


def canonical_number(text: str) -> str | None:
    """`"$1,234.50"` → `"1234.5"`, `"18."` → `"18"`, `"-0.0"` → `"0"`; None when `text` is no number (or one of more
    than `MAX_NUMBER_DIGITS` digits before or after its point).

    The value is kept exactly, every digit written (not rounded to Decimal's 28 digits), so a canonical number
    reads back as itself.
    """
    cleaned = text.replace(",", "").replace("$", "").replace(" ", "").rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    # Spelled out, an exponent ("1e999999") is that many digits; and str(int(value)) raised past 4300 of them.
    if value.adjusted() >= MAX_NUMBER_DIGITS or -value.as_tuple().exponent > MAX_NUMBER_DIGITS:
        return None
    digits = format(value, "f")
    if "." in digits:
        digits = digits.rstrip("0").rstrip(".")
    return "0" if digits == "-0" else digits


def normalise_text(text: str) -> str:
    """Case-folded, whitespace collapsed, surrounding quotes, brackets and end punctuation removed."""
    return " ".join(text.split()).casefold().strip(" \"'`*_()[]{}.!?;:,")


def _read_choice(text: str, *, whole: bool) -> str | None:
    stripped = text.strip().strip("().*").strip()
    if re.fullmatch(r"[A-Ja-j]", stripped):
        return stripped.upper()
    if not whole:  # after a marker: the first capital letter standing alone ("Answer: (C) because ...")
        found = _LETTER.search(text)
        return found.group(1) if found else None
    # In free text only capital letters count: a lone "a" is far more often the article than option A.
    letters = [m.group(1) for m in _LETTER.finditer(text) if m.group(0).startswith("(") or m.group(1) != "I"]
    return letters[-1] if letters else None


@dataclass(frozen=True)
class Vote:
    """The outcome of a majority vote: the winner, how many voted for it, and whether it won on the tie rule."""

    answer: str | None
    count: int
    tied: bool


def majority_vote(answers: Sequence[str | None]) -> Vote:
    """The most common readable answer; a tie goes to the tied answer given first.

    Unreadable answers (None) do not vote. "Given first" is by position in `answers`: sample order
    for self-consistency, agent order for a debate, so a tie is broken the same way on every run
    (and, as in Du et al.'s evaluation, by the earliest answer rather than at random).
    """
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return Vote(None, 0, False)
    top = max(counts.values())
    leaders = [a for a in counts if counts[a] == top]  # Counter keeps first-seen order
    return Vote(leaders[0], top, len(leaders) > 1)


@dataclass(frozen=True)
class Ballot:
    """A majority vote over free-text answers: the text shown for the winner, the vote, and each answer's reading."""

    text: str
    vote: Vote
    votes: list[str | None]

    @property
    def winner_index(self) -> int | None:
        """The position of the answer shown for the winner (the first that voted for it); None without a winner."""
        if self.vote.answer is None:
            return None
        return self.votes.index(self.vote.answer)

    def tally(self) -> list[tuple[str, list[int]]]:
        """Each readable answer with the positions that gave it: most votes first, the first given first on ties.

        >>> majority_answer(["Answer: 2", "Answer: 3", "none", "Answer: 3"], parse_rule("number")).tally()
        [('3', [1, 3]), ('2', [0])]
        """
        positions: dict[str, list[int]] = {}
        for i, answer in enumerate(self.votes):
            if answer is not None:
                positions.setdefault(answer, []).append(i)
        return sorted(positions.items(), key=lambda item: -len(item[1]))  # a stable sort keeps first-seen order


def majority_answer(texts: Sequence[str], rule: AnswerRule) -> Ballot:
    """Read every answer by `rule` and take the majority (`majority_vote`); the text shown is the first answer
    read as the winner (the first answer when none could be read, "" when there are none)."""
    votes = [rule.extract(text) for text in texts]
    vote = majority_vote(votes)
    shown = next((t for t, v in zip(texts, votes) if v == vote.answer), texts[0] if texts else "")
    return Ballot(shown, vote, votes)


def vote_record(texts: Sequence[str], rule: AnswerRule) -> dict[str, object]:
    """The majority of `texts` under `rule` as a run records it (the round-0 vote of a debate, say): the rule's
    name, the winning answer (None when none could be read), its votes, whether it won on the tie rule, and
    each text's reading in order."""
    ballot = majority_answer(texts, rule)
    return {"rule": rule.name, "answer": ballot.vote.answer, "count": ballot.vote.count, "tied": ballot.vote.tied,
            "votes": ballot.votes}
