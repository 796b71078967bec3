"""Hypothesis strategies for what a model (or a client) may write, and the one settings profile of the property tests.

Text is drawn from every code point (lone surrogates and NULs included), from scripts a debate is held in (CJK,
right-to-left, emoji with joiners), from fragments the parsers look for (answer markers, numbers, sentence marks),
and as long runs of one piece (thousands of digits, deep brackets), within what a test on two shared cores affords.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Reproducible (the same examples every run, no example database), no deadline (two cores shared with others: a
# slow example is no failure), and modest in number so that the whole set stays well under a minute.
PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None, print_blob=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])

# Any code point, surrogates (category Cs) and NUL included: Hypothesis leaves surrogates out unless told.
ANY_CHAR = st.characters(exclude_categories=())
SCRIPTS = list(
    "我认为这是正确的。你呢？好！日本語のテキスト、韓国어문장"  # CJK, kana, hangul, punctuation
    "مرحبا بالعالم שלום עולם\u200f\u200e\u202e"  # right-to-left, direction marks, an override
    "😀👍🏽👨\u200d👩\u200d👧🇫🇷\ufe0f"  # emoji, a skin tone, a joined family, a flag
    "\x00\ud800\udfff\ufeff\u2028\u0085\t\n\r "  # NUL, lone surrogates, BOM, line and paragraph breaks
    "éß\u0301ſKİıﬁ½²١٢٣"  # combining marks, case-folding oddities, other digits
)
# Any code point, with the awkward ones above drawn often enough to meet in a hundred examples.
CHAR = st.one_of(ANY_CHAR, st.sampled_from(SCRIPTS))


def strings(*, min_size: int = 0, max_size: int) -> st.SearchStrategy[str]:
    """Strings of `CHAR`s (joined from a list: `st.text` merges its alphabet into one range, where the awkward
    characters above would be as rare as any other)."""
    return st.lists(CHAR, min_size=min_size, max_size=max_size).map("".join)


FRAGMENTS = [
    "Answer:", "answer is", "ANSWER =", "Final answer: ", "\\boxed{", "}", "(", ")", "(B)", "C", " a ", "I",
    "18", "-7", "$1,234.50", "3.14", ".5", "0.0", "1e5", "NaN", "Infinity", "٣", ",", ".", "!", "?", "…", "。",
    "！", "？", "」", "\"", "'", " ", "\n", "\n\n", ";", ":", "，", "not", "no", "un", "safe", "unsafe", "is",
    "isn't", "never", "Speaker A", "Speaker B", "Answer A", "tie",
]
LONG_PIECES = ["9", "1,", "[", "{\"a\":", "a ", ". ", "。", "😀", "\x00", "\ud800", "Answer: 5\n", "…"]
# How many times a piece is repeated: mostly few, and often just past a limit (JSON depth 64, Python's recursion near
# 1000, its int-string conversion at 4300 digits).
TIMES = st.one_of(st.integers(1, 6000), st.sampled_from([64, 65, 1000, 1001, 4300, 4301, 6000]))
long_runs = st.builds(lambda piece, times: piece * times, st.sampled_from(LONG_PIECES), TIMES)

text = st.one_of(
    strings(max_size=80),
    st.lists(st.sampled_from(FRAGMENTS + SCRIPTS), max_size=30).map("".join),
    long_runs,
)

# JSON as a client or a model sends it: keys with NULs and surrogates, integers past 64 bits, floats past finite.
json_scalars = st.one_of(
    st.none(), st.booleans(), strings(max_size=20),
    st.integers(-(2**70), 2**70), st.sampled_from([2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(strings(max_size=8), children, max_size=4)),
    max_leaves=20,
)


def deep_json(value: object, depth: int, *, as_object: bool) -> str:
    """`value`'s JSON inside `depth` arrays (or objects with key "k"), written out: `json.dumps` itself gives up
    near a thousand levels."""
    opening, closing = ('{"k":', "}") if as_object else ("[", "]")
    return opening * depth + json.dumps(value) + closing * depth
