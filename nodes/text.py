"""Text shaping for spoken turns: which language a topic is in, sentence ends (Latin and CJK), and length limits.

The one text cutter is `soft_cut` (and `clip`, `first_sentence` and `LengthGate` built on it); the one bounded
history of a prompt is `newest_within`.

`LengthGate` keeps a streamed turn within [min, max] characters without ever taking back text
already sent: what is certain to survive the final cut streams at once, the rest waits for its
sentence to end.
"""

from __future__ import annotations

import re

ELLIPSIS = "…"
_CLOSERS = "\"'”’)\\]}»」』）】"
# CJK sentence marks end a sentence wherever they stand; Latin ones only before a space or the end,
# so "3.5" or "e.g.x" mid-stream are not taken for sentence ends.
_SENTENCE_END = re.compile(rf"(?:[。！？]+|{ELLIPSIS}+|[.!?]+(?=[{_CLOSERS}]*(?:\s|$)))[{_CLOSERS}]*")
_CLAUSE_BREAK = re.compile(r"[,;:，；：、]")
_SPACE = re.compile(r"\s")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af]")


def topic_language(topic: str) -> str:
    """Name the language replies about `topic` should be written in, for a prompt."""
    if _KANA.search(topic):
        return "Japanese"
    if _HANGUL.search(topic):
        return "Korean"
    if _HAN.search(topic):
        return "Chinese (the same script as the topic)"
    return "the language the topic is written in"


def is_cjk(text: str) -> bool:
    """True when `text` is written in Chinese, Japanese or Korean (no spaces between words, ~1 token a character)."""
    return bool(_HAN.search(text) or _KANA.search(text) or _HANGUL.search(text))


def sentence_ends(text: str, *, start: int = 0, final: bool = True) -> list[int]:
    """Offsets just past each sentence end in `text` at or after `start`.

    With `final=False` the text may still grow, so a Latin mark at its very end is not yet a
    sentence end (the next piece could be "5" of "3.5").
    """
    ends = []
    for m in _SENTENCE_END.finditer(text, start):
        if not final and m.end() == len(text) and re.search(r"[.!?]", m.group()):
            continue
        ends.append(m.end())
    return ends


def soft_cut(text: str, lo: int, hi: int) -> str:
    """Cut `text` to between `lo` and `hi` characters at the best break there.

    A sentence end is preferred; failing that a clause or word break, marked with an ellipsis;
    failing that a hard cut, also marked. Text already within `hi` is returned unchanged; a `hi` below 1 leaves
    nothing of a longer text.
    """
    if len(text) <= hi:
        return text
    if hi < 1:  # no room even for the ellipsis marking the cut (text[:hi - 1] would keep all but one character)
        return ""
    lo = min(lo, hi - 1)
    ends = [end for end in sentence_ends(text) if lo <= end <= hi]
    if ends:
        return text[: ends[-1]]
    for pattern in (_CLAUSE_BREAK, _SPACE):
        breaks = [m.start() for m in pattern.finditer(text, 0, hi) if lo <= m.start() <= hi - 1]
        if breaks:
            cut = text[: breaks[-1]]
            stripped = cut.rstrip()
            return (stripped if len(stripped) >= lo else cut) + ELLIPSIS
    return text[: hi - 1] + ELLIPSIS


def clip(text: str, limit: int) -> str:
    """Shorten `text` to at most `limit` characters, ending at a sentence end when one falls in its second half."""
    text = text.strip()
    return soft_cut(text, limit // 2, limit)


def first_sentence(text: str, limit: int = 120) -> str:
    """The first sentence of `text`, clipped to `limit` characters."""
    ends = sentence_ends(text)
    return clip(text[: ends[0]] if ends else text, limit)


def newest_within(pieces: list[str], max_chars: int, *, sep: str = "\n") -> list[str]:
    """A prompt's bounded history: the newest of `pieces` (the list's end) that fit in `max_chars` characters
    once joined with `sep`, in their order, the oldest dropped first; when not even the newest fits, it alone,
    clipped to `max_chars` (`clip`)."""
    kept: list[str] = []
    size = 0
    for piece in reversed(pieces):
        grown = size + len(piece) + (len(sep) if kept else 0)
        if grown > max_chars:
            break
        kept.append(piece)
        size = grown
    if not kept and pieces:
        kept = [clip(pieces[-1], max_chars)]
    return kept[::-1]


class LengthGate:
    """Release a streamed reply so that the whole lands within `min_chars`..`max_chars` characters.

    Feed it model chunks; it returns the text that may be sent now. Text up to `min_chars`, and
    text up to the latest complete sentence that fits in `max_chars`, is always kept, so it goes
    out at once; anything past that waits until its sentence ends. `finish()` settles the rest:
    kept whole when the reply ended naturally within bounds, otherwise cut at the last sentence
    end (or, lacking one, a marked softer break). What was released, concatenated, is `emitted`.
    """

    def __init__(self, min_chars: int, max_chars: int) -> None:
        if not 0 < min_chars < max_chars:
            raise ValueError(f"need 0 < min_chars < max_chars, got {min_chars} and {max_chars}")
        self.min_chars, self.max_chars = min_chars, max_chars
        self.emitted = ""
        self.pending = ""

    @property
    def full(self) -> bool:
        """True once the reply has run past `max_chars`: stop reading, it will be cut."""
        return len(self.emitted) + len(self.pending) > self.max_chars

    def feed(self, piece: str) -> str:
        """Take the next streamed piece; return the text safe to send now (possibly empty)."""
        if not self.emitted and not self.pending:
            piece = piece.lstrip()
        self.pending += piece
        return self._release(final=False)

    def finish(self, *, truncated: bool = False) -> str:
        """Settle the reply once its stream ended (`truncated`: cut off by the token cap or by us)."""
        text = self.emitted + self.pending
        if len(text) < self.min_chars or (not truncated and len(text) <= self.max_chars):
            settled = text.rstrip() if len(text.rstrip()) >= len(self.emitted) else text
        else:
            settled = soft_cut(text, max(self.min_chars, len(self.emitted)), self.max_chars)
            if truncated and len(text) <= self.max_chars and settled == text:
                # Cut off mid-sentence by the token cap: end at the last sentence end past the minimum.
                ends = [e for e in sentence_ends(text) if e >= max(self.min_chars, len(self.emitted))]
                if ends:
                    settled = text[: ends[-1]]
                elif len(text) < self.max_chars:
                    settled = text + ELLIPSIS
        out = settled[len(self.emitted):]
        self.emitted, self.pending = settled, ""
        return out

    def _release(self, *, final: bool) -> str:
        text = self.emitted + self.pending
        base = len(self.emitted)
        if len(text) <= self.min_chars:
            cut = len(text)
        else:
            cut = max(base, self.min_chars)
            for end in sentence_ends(text, start=max(0, base - 1), final=final):
                if cut < end <= self.max_chars:
                    cut = end
        out = text[base:cut]
        self.emitted, self.pending = text[:cut], text[cut:]
        return out
