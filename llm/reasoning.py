"""Reasoning text kept out of answers: what a reasoning model writes between `<think>` and `</think>` in its content
(DeepSeek-R1, QwQ and Qwen3 served by vLLM or llama.cpp) is dropped from every answer, streamed or whole, before any
debater, transcript or stored answer sees it. Reasoning a server sends in a field of its own (`reasoning_content`,
`reasoning`) never gets that far: langchain-openai reads only `content`.
"""

from __future__ import annotations

import re

OPEN, CLOSE = "<think>", "</think>"
_BLOCK = re.compile(r"<think>.*?(?:</think>\s*|\Z)", re.DOTALL)


def strip_thinking(text: str) -> str:
    """`text` without its `<think>…</think>` blocks (an unclosed one runs to the end), and the blank space after one.

    >>> strip_thinking("<think>The user wants a number.</think>\\n\\n42")
    '42'
    """
    if OPEN not in text:
        return text
    return _BLOCK.sub("", text)


def _partial_tail(text: str, tag: str) -> int:
    """The length of the longest end of `text` that begins `tag` (a tag cut between two chunks)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


class ThinkingFilter:
    """`strip_thinking` over a streamed answer, a piece at a time: a tag may be cut between two pieces, so the end of
    a piece that could begin one is held back until the next piece says.

    >>> f = ThinkingFilter()
    >>> [f.feed(p) for p in ["<thi", "nk>hmm</th", "ink>\\n", "Yes", " <"]] + [f.flush()]
    ['', '', '', 'Yes', ' ', '<']
    """

    def __init__(self) -> None:
        self.held = ""
        self.inside = False
        self.after = False  # just past a block: the blank space that follows it is dropped too

    def feed(self, piece: str) -> str:
        text, out = self.held + piece, []
        self.held = ""
        while text:
            if self.inside:
                end = text.find(CLOSE)
                if end < 0:
                    keep = _partial_tail(text, CLOSE)
                    self.held = text[len(text) - keep:] if keep else ""
                    return "".join(out)
                text, self.inside, self.after = text[end + len(CLOSE):], False, True
                continue
            if self.after:
                text = text.lstrip()
                if not text:
                    break
                self.after = False
            start = text.find(OPEN)
            if start >= 0:
                out.append(text[:start])
                text, self.inside = text[start + len(OPEN):], True
                continue
            keep = _partial_tail(text, OPEN)
            out.append(text[:len(text) - keep])
            self.held = text[len(text) - keep:] if keep else ""
            break
        return "".join(out)

    def flush(self) -> str:
        """What is still held back once the answer has ended (a block never closed is dropped)."""
        held, self.held = self.held, ""
        return "" if self.inside else held
