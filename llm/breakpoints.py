"""Prompt-cache breakpoints: where a request to a model that caches only marked prefixes (Anthropic's, through an
OpenAI-compatible gateway) says "cache up to here" (`cache_control: {type: ephemeral}` on a content part).

Which models need them, and the shortest prefix worth one, are the provider table's (`Provider.marks_cache`,
`Provider.cache_min_tokens`); models that cache repeated prefixes by themselves (OpenAI, DeepSeek, Gemini) get none.
"""

from __future__ import annotations

import json
from typing import Any

from parley.core.limits import MAX_CACHE_BREAKPOINTS
from parley.llm.tokens import approx_text_tokens

EPHEMERAL = {"type": "ephemeral"}


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return json.dumps(message.get("tool_calls") or "")


def _marked(message: dict[str, Any]) -> dict[str, Any] | None:
    """`message` with a breakpoint on its last text part (None when it has no text to mark)."""
    content = message.get("content")
    if isinstance(content, str) and content:
        return {**message, "content": [{"type": "text", "text": content, "cache_control": EPHEMERAL}]}
    if isinstance(content, list):
        last = max((i for i, p in enumerate(content) if isinstance(p, dict) and p.get("type") == "text"), default=None)
        if last is not None:
            parts = list(content)
            parts[last] = {**parts[last], "cache_control": EPHEMERAL}
            return {**message, "content": parts}
    return None


def mark_stable_prefix(messages: list[dict[str, Any]], min_tokens: int) -> list[dict[str, Any]]:
    """`messages` (OpenAI chat messages) with `cache_control` breakpoints on their stable prefix: the end of the
    system messages (the instructions every call of a seat repeats) and the end of the message before the last (the
    conversation so far; the last message is the new ask). A breakpoint goes only where the prefix up to it holds
    `min_tokens` or more (estimated), and never more than `core.limits.MAX_CACHE_BREAKPOINTS`; the messages given
    are not changed.

    >>> long = "x" * 8000
    >>> out = mark_stable_prefix([{"role": "system", "content": long}, {"role": "user", "content": "Hi"}], 1024)
    >>> out[0]["content"][0]["cache_control"], out[1]["content"]
    ({'type': 'ephemeral'}, 'Hi')
    """
    if len(messages) < 2:
        return messages
    prefix = [approx_text_tokens(_text_of(m)) + 4 for m in messages]
    for i in range(1, len(prefix)):
        prefix[i] += prefix[i - 1]
    systems = [i for i, m in enumerate(messages[:-1]) if m.get("role") in ("system", "developer")]
    candidates = dict.fromkeys([*([systems[-1]] if systems else []), len(messages) - 2])
    out = list(messages)
    placed = 0
    for index in candidates:
        if placed >= MAX_CACHE_BREAKPOINTS or prefix[index] < min_tokens:
            continue
        if (marked := _marked(out[index])) is not None:
            out[index] = marked
            placed += 1
    return out
