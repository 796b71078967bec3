"""Token estimates and the context-size guard: what a prompt costs before any server counts it, and how it is
cut to fit a model's window."""

from __future__ import annotations

import json
from collections.abc import Sequence

from langchain_core.messages import BaseMessage, trim_messages
from langchain_core.runnables import Runnable

def approx_text_tokens(text: str) -> int:
    """Estimate the tokens of a text: ~4 ASCII characters a token, one token per other character (CJK)."""
    ascii_chars = len(text.encode("ascii", "ignore"))  # counted in C: a long transcript costs microseconds
    return ascii_chars // 4 + (len(text) - ascii_chars)


def approx_tokens(messages: Sequence[BaseMessage]) -> int:
    """Estimate prompt tokens: each message's text (see `approx_text_tokens`), its tool calls, and 4 for its framing."""
    total = 0
    for message in messages:
        text = message.content if isinstance(message.content, str) else json.dumps(message.content)
        if calls := getattr(message, "tool_calls", None):
            text += json.dumps(calls)
        total += 4 + approx_text_tokens(text)
    return total



def clip_text(text: str, max_tokens: int, marker: str = " [...]") -> str:
    """Cut `text` to about `max_tokens` (by `approx_text_tokens`), at a word boundary, ending in `marker`."""
    if approx_text_tokens(text) <= max_tokens:
        return text
    budget = max(0, max_tokens - approx_text_tokens(marker)) * 4  # in quarter tokens: an ASCII char costs 1
    spent, end = 0, 0
    for end, ch in enumerate(text):
        spent += 1 if ord(ch) < 128 else 4
        if spent > budget:
            break
    head = text[:end]
    cut = head.rstrip()
    if (space := cut.rfind(" ")) > len(cut) // 2:  # keep whole words unless that loses too much
        cut = cut[:space]
    return cut.rstrip() + marker


def answer_reserve(max_tokens: int | None) -> int:
    """Tokens of the context window kept free for an answer capped at `max_tokens` (plus its framing)."""
    return (max_tokens or 256) + 32


def prompt_limit(window: int, reserve: int) -> int:
    """Tokens a prompt may take in a `window`-token context that keeps `reserve` tokens for the answer."""
    return max(64, window - reserve)


def context_guard(window: int, reserve: int) -> Runnable:
    """Trim a prompt to `window - reserve` tokens, keeping the system message and the latest turns."""
    return trim_messages(
        max_tokens=prompt_limit(window, reserve),
        token_counter=approx_tokens,
        strategy="last",
        include_system=True,
        allow_partial=True,
    )
