"""Regular expressions a user writes (an answer rule's `regex:<pattern>`, a workflow condition's `matches`), compiled
by RE2 (google-re2): it matches in time linear in the text and never backtracks, so no pattern and no text can hold a
worker, as `^(a+)+$` does Python's `re` on a near-match. RE2 has no backreferences and no lookaround: such a pattern is
refused when it is given, naming it.

(A JSON Schema's `pattern` is matched by the schema validator's own engine, Rust's `regex`, which makes the same
promise: `llm.formats`.)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

from parley.core.limits import MAX_PATTERN_CHARS

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is the caller's error, not a line on the server's stderr
_OPTIONS.max_mem = 8 << 20  # bytes for one compiled pattern (RE2's default); past it, the pattern is refused


def _utf8(text: str) -> str:
    """`text` as RE2 can read it: a lone surrogate (no character, so no UTF-8) becomes `?`, one for one, so every
    position in the text stays where it was."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


class Pattern:
    """A pattern compiled by RE2, matched like `re.Pattern` (`search`, `fullmatch`, `finditer`) on any text."""

    def __init__(self, compiled: Any) -> None:
        self._compiled = compiled
        self.pattern: str = compiled.pattern

    def search(self, text: str) -> Any:
        return self._compiled.search(_utf8(text))

    def fullmatch(self, text: str) -> Any:
        return self._compiled.fullmatch(_utf8(text))

    def finditer(self, text: str) -> Any:
        return self._compiled.finditer(_utf8(text))


class PatternError(ValueError):
    """A pattern that cannot be used: too long, or not one RE2 compiles (the message says why)."""


@lru_cache(maxsize=1024)
def user_pattern(source: str) -> Pattern:
    """`source` compiled by RE2 (cached), for matching text without backtracking.

    Raises:
        PatternError: longer than `MAX_PATTERN_CHARS`, or not a pattern RE2 accepts (backreferences, lookaround).

    Example:
        >>> user_pattern(r"ANSWER=(\\w+)").search("... ANSWER=42").group(1)
        '42'
    """
    if len(source) > MAX_PATTERN_CHARS:
        raise PatternError(f"the pattern is {len(source)} characters long; at most {MAX_PATTERN_CHARS} are accepted")
    try:
        return Pattern(re2.compile(_utf8(source), options=_OPTIONS))
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(f"{source!r} is not a valid regular expression here ({reason}): patterns are matched "
                           "without backtracking (RE2's syntax), so backreferences and lookaround are not "
                           "supported") from None
