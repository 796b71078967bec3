"""The entry guard holds for any body a client sends: it accepts (and then MongoDB can store what it accepted) or
refuses with a code and a message that can itself be sent, never raising (api/entry.py, core/limits.py)."""

from __future__ import annotations

import asyncio
import json

import bson
from hypothesis import given
from hypothesis import strategies as st

from parley.api.entry import EntryGuard, check_json
from parley.core.limits import INT64_MAX, INT64_MIN, MAX_CHAT_MESSAGES, MAX_JSON_DEPTH, Refusal, refuse_unstorable
from tests.support.strategies import PROPERTY, TIMES, deep_json, json_values, long_runs, text

CODES = {"too_deep", "invalid_json", "invalid_request", "unstorable_value"}
PATHS = ["/api/debate", "/v1/chat/completions", "/v1/workflows", "/v1/runs"]


def faults(value: object, max_depth: int) -> set[str]:
    """The codes `value` deserves, found by a plain recursive walk (the guard's own walk is iterative)."""
    found: set[str] = set()

    def walk(item: object, depth: int) -> None:
        if depth > max_depth:
            found.add("too_deep")
            return
        if isinstance(item, dict):
            for key, child in item.items():
                if "\x00" in key or any(0xD800 <= ord(c) <= 0xDFFF for c in key):
                    found.add("unstorable_value")
                walk(child, depth + 1)
        elif isinstance(item, list):
            for child in item:
                walk(child, depth + 1)
        elif isinstance(item, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in item):
            found.add("unstorable_value")
        elif isinstance(item, int) and not isinstance(item, bool) and not INT64_MIN <= item <= INT64_MAX:
            found.add("unstorable_value")

    walk(value, 0)
    return found


def sendable(refusal: Refusal) -> bool:
    """A refusal the error body can carry: a code, and a message that is UTF-8 (no lone surrogate of the body's)."""
    return refusal.code in CODES and bool(refusal.message) and bool(refusal.message.encode("utf-8"))


bodies = st.one_of(
    st.binary(max_size=200),
    text.map(lambda t: t.encode("utf-8", "surrogatepass")),
    long_runs.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.builds(lambda v, ascii_only: json.dumps(v, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"),
              json_values, st.booleans()),
    st.builds(deep_json, json_values, TIMES, as_object=st.booleans()).map(lambda t: t.encode("utf-8",
                                                                                             "surrogatepass")),
    st.sampled_from([b"\xef\xbb\xbf{}", "{}".encode("utf-16"), '{"a": 1}'.encode("utf-32"), b'{"a": NaN}',
                     b'{"a": 1e999}', b"  \n", b'{"a\\u0000": 1}', b'"\\ud800"', b'"\\ud83d\\ude00"', b"-0"]),
)


@PROPERTY
@given(raw=bodies, path=st.sampled_from(PATHS))
def test_any_body_is_accepted_or_refused_with_a_code_never_raising(raw, path):
    refusal = check_json(raw, path)
    assert refusal is None or sendable(refusal)
    assert check_json(raw, path) == refusal
    if refusal is not None or not raw.strip():
        return
    value = json.loads(raw)
    assert not faults(value, MAX_JSON_DEPTH)
    bson.encode({"body": value})  # what was accepted can be stored


@PROPERTY
@given(value=json_values, depth=st.integers(0, 8), max_depth=st.integers(0, 8), as_object=st.booleans(),
       ascii_only=st.booleans())
def test_a_body_is_refused_exactly_when_mongodb_could_not_hold_it(value, depth, max_depth, as_object, ascii_only):
    raw = deep_json(value, depth, as_object=as_object).encode("utf-8", "surrogatepass")
    if ascii_only:
        raw = json.dumps(json.loads(raw)).encode()
    parsed = json.loads(raw)  # escaped surrogate pairs are one character once read: the guard judges what it reads
    expected = faults(parsed, max_depth)
    refusal = check_json(raw, "/v1/runs", max_depth=max_depth)
    assert refusal == refuse_unstorable(parsed, max_depth=max_depth)
    if expected:
        assert refusal is not None and sendable(refusal) and refusal.code in expected
    else:
        assert refusal is None
        bson.encode({"body": parsed})


@PROPERTY
@given(count=st.sampled_from([0, 1, MAX_CHAT_MESSAGES, MAX_CHAT_MESSAGES + 1]), field=st.sampled_from(
    ["messages", "tools", "other"]))
def test_a_route_list_is_held_to_its_items(count, field):
    refusal = check_json(json.dumps({field: [0] * count}).encode(), "/v1/chat/completions")
    most = {"messages": MAX_CHAT_MESSAGES, "tools": 128}.get(field)
    if most is not None and count > most:
        assert refusal is not None and refusal.code == "invalid_request" and field in refusal.message
    else:
        assert refusal is None


async def ok(scope, receive, send):
    """The app behind the guard: reads the body it was given, answers 200."""
    message = await receive()
    assert message["type"] == "http.request" and not message.get("more_body")
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": message["body"]})


def call(guard: EntryGuard, path: str, body: bytes, chunks: int) -> tuple[int, bytes]:
    """One request through `guard`, its body in `chunks` pieces: the status and body answered."""
    size = max(1, -(-len(body) // chunks))
    pieces = [body[i:i + size] for i in range(0, len(body), size)] or [b""]
    messages = [{"type": "http.request", "body": p, "more_body": i < len(pieces) - 1} for i, p in enumerate(pieces)]
    sent: list[dict] = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path,
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
    asyncio.run(guard(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@PROPERTY
@given(raw=bodies, path=st.sampled_from(PATHS), chunks=st.integers(1, 4))
def test_the_guard_answers_every_body_with_the_app_or_a_json_refusal(raw, path, chunks):
    status, body = call(EntryGuard(ok, max_body_bytes=4096), path, raw, chunks)
    if status == 200:
        assert body == raw and (check_json(raw, path) is None and len(raw) <= 4096)
        return
    assert status in (400, 413, 422)
    answer = json.loads(body)
    error = answer["error"]
    code = error["code"] if isinstance(error, dict) else answer.get("code")
    assert code in CODES | {"body_too_large"}


@PROPERTY
@given(digits=st.one_of(st.integers(20, 4300), st.integers(4301, 6000)), sign=st.sampled_from(["", "-"]))
def test_an_integer_past_64_bits_is_unstorable_and_past_4300_digits_invalid_json(digits, sign):
    refusal = check_json(f'{{"n": {sign}{"9" * digits}}}'.encode(), "/v1/runs")
    assert refusal is not None and refusal.code == ("unstorable_value" if digits <= 4300 else "invalid_json")
