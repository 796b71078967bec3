"""What Parley accepts at its door: sizes, depths and counts every request is held to, in one place.

The HTTP layer checks them once, where every request enters (`api/entry.py`), so no route can forget one;
the values MongoDB itself imposes (64-bit integers, UTF-8 strings, NUL-free keys) are checked here too, so
a body Parley accepts is a body it can store.
"""

from __future__ import annotations

from dataclasses import dataclass

# The largest request body any route reads (the duel's own, smaller limit is its seed's). A setting may lower or
# raise it: PARLEY_MAX_BODY_BYTES.
MAX_BODY_BYTES = 4 * 1024 * 1024
# Routes held to less: path → bytes. The duel seed caps its body at 24 KB.
ROUTE_BODY_BYTES = {"/api/debate": 24 * 1024}
# Nesting of objects and arrays in a JSON body. A workflow or a response_format schema nests a dozen levels;
# Python's own parser gives up near a thousand, and walking deeper documents costs the whole server.
MAX_JSON_DEPTH = 64
# Bodies from this size up are parsed and checked on a worker thread, so one large request does not hold up the
# event loop that serves every other.
OFF_LOOP_BYTES = 64 * 1024
# Conversations from this many messages up are turned into LangChain messages, counted and made into each model
# request on a worker thread: that is Python work per message (5-20 µs a step), long enough to hold the loop.
OFF_LOOP_MESSAGES = 128
# Messages in one chat completion (OpenAI sets none; 60,000 one-word messages froze the server) and characters of
# all their text together.
MAX_CHAT_MESSAGES = 2048
# Lists a route's body may hold, checked where the body enters (before any model of it is built): path → field →
# most items.
ROUTE_LIST_ITEMS = {"/v1/chat/completions": {"messages": MAX_CHAT_MESSAGES}}
# Integers MongoDB can hold (BSON int64), and so the largest page number, event id or count a request may name.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# An event id is a non-negative integer below 2**63: at most 19 digits (checked before converting).
MAX_EVENT_ID_DIGITS = 19
# The highest 1-based page number a listing accepts (its offset must stay a 64-bit integer).
MAX_PAGE = 10**9


@dataclass(frozen=True)
class Refusal:
    """Why a value cannot be accepted: a machine `code` and a sentence naming where (`at`) and what."""

    code: str
    message: str


def _where(path: list[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path)) or "body"


def _bad_text(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone UTF-16 surrogate (not a character; MongoDB stores only valid UTF-8)"
    return None


def refuse_unstorable(value: object, *, max_depth: int = MAX_JSON_DEPTH) -> Refusal | None:
    """Why MongoDB could not hold `value` (data a client sent that Parley may keep), or None when it can.

    Walks the value without recursion (a hostile document may nest thousands of levels) and stops at the
    first fault: nesting deeper than `max_depth`, a NUL character in a key, a lone surrogate in a key or a
    string, an integer outside 64 bits.
    """
    stack: list[tuple[object, list[str | int]]] = [(value, [])]
    while stack:
        item, path = stack.pop()
        if len(path) > max_depth:
            return Refusal("too_deep", f"The JSON nests deeper than {max_depth} levels (at {_where(path[:8])}…)")
        if isinstance(item, dict):
            for key, child in item.items():
                key = str(key)
                if "\x00" in key:
                    return Refusal("unstorable_value", f"{_where(path)}: a key holds a NUL character")
                if (fault := _bad_text(key)) is not None:
                    return Refusal("unstorable_value", f"{_where(path)}: a key holds {fault}")
                stack.append((child, [*path, key]))
        elif isinstance(item, list):
            stack.extend((child, [*path, i]) for i, child in enumerate(item))
        elif isinstance(item, str):
            if (fault := _bad_text(item)) is not None:
                return Refusal("unstorable_value", f"{_where(path)}: the text holds {fault}")
        elif isinstance(item, int) and not isinstance(item, bool) and not INT64_MIN <= item <= INT64_MAX:
            return Refusal("unstorable_value", f"{_where(path)}: the integer is beyond 64 bits")
    return None
