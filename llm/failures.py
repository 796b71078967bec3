"""Classify failed model calls and say what went wrong, so callers report why a model failed and retry only
what may pass next time.

This is the one place where a model failure becomes text: `describe_failure` for one line about it,
`failure_message` for what a mode, the designer or the CLI tells its user about any failure, and
`scrub_failure`, which the model layer applies to every exception a call raises, so that upstream error
text (the endpoint's own words, which it may fill with a key or megabytes) is capped and redacted before
anyone (a client, a stored run, a log line) sees it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

import openai
from langchain_core.exceptions import OutputParserException
from langgraph.errors import NodeTimeoutError
from langgraph.types import RetryPolicy
from pydantic import ValidationError

FailureClass = Literal["timeout", "rate_limit", "auth", "server", "other"]

# Characters of upstream text (an endpoint's error message, an exception's text) any message keeps.
UPSTREAM_TEXT_LIMIT = 500
REDACTED = "[redacted]"
_CUT = " [cut]"

# Shapes of secrets an endpoint may echo: OpenAI-style keys (sk-..., sk-proj-...), bearer tokens, and
# `api_key=...`-style assignments.
_SECRET_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_-]{3,}"
    r"|(?i:\bbearer\s+)[A-Za-z0-9._~+/=-]+"
    r"|(?i:\b(?:api[_-]?key|x-api-key|authorization|token)[\"']?\s*[:=]\s*[\"']?(?:bearer\s+)?)[^\s\"',}]+"
)
# Keys Parley was configured with (and sent to an endpoint): redacted wherever they appear. Replaced, never
# changed in place, so a thread reading it never sees it change size.
_SECRETS: frozenset[str] = frozenset()
_PLACEHOLDER_KEYS = {"sk-none", "sk-local"}


class ModelError(RuntimeError):
    """A model id cannot be resolved or a provider is misconfigured."""


class ModelCallError(openai.OpenAIError):
    """A model call failed in a way the model layer itself detected (not the SDK): its message says how."""


class ModelDeadlineError(ModelCallError, TimeoutError):
    """A model call ran past its total deadline (PARLEY_MODEL_CALL_DEADLINE), however steadily it was sending."""

    def __init__(self, model: str, seconds: float) -> None:
        super().__init__(f"{model} did not finish its answer within the {seconds:g} s deadline of one model call "
                         "(PARLEY_MODEL_CALL_DEADLINE)")
        self.seconds = seconds


class ModelIdleError(ModelCallError, TimeoutError):
    """A streamed call received no data for its read timeout (keep-alive comments do not count)."""

    def __init__(self, model: str, seconds: float, chunks: int | None = None) -> None:
        after = "" if chunks is None else f" after {chunks} chunk(s)"
        super().__init__(f"{model} sent no data for {seconds:g} s{after} (PARLEY_REQUEST_TIMEOUT; "
                         "keep-alive comments do not count)")
        self.seconds = seconds


class IncompleteAnswerError(ModelCallError):
    """A stream ended without a finish_reason, or an answer asked for whole came in a body that is not complete
    JSON: the endpoint stopped mid-answer. Worth another attempt."""

    def __init__(self, model: str, chunks: int | None = None, *, body: ValueError | None = None) -> None:
        if body is not None:
            super().__init__(f"{model}'s answer was not a complete JSON body ({body}): the answer is incomplete")
        else:
            super().__init__(f"{model}'s stream ended after {chunks} chunk(s) without a finish_reason or [DONE]: "
                             "the answer is incomplete")


_SENT = "_parley_sent"


def mark_sent(exc: BaseException, *, answered: bool) -> None:
    """Mark `exc` as the failure of a call that was sent to its endpoint, `answered` when the endpoint's answer had
    begun (its 2xx status came): `llm.client.BoundedChatOpenAI` marks every failure after the sending, and
    `was_paid` tells from the mark whether the provider charged for the call."""
    setattr(exc, _SENT, "answered" if answered else "sent")


def was_paid(exc: BaseException) -> bool:
    """True for the failure of a call the provider charged for, so it is billed all the same (`llm.usage.
    CallRecorder`): one whose answer had begun (then cut off, gone quiet, past its deadline, its body broken off,
    cancelled), or one sent and never answered in time (the provider is at work on it). A call refused (an HTTP error
    status), never connected, or never sent (refused by its budget, cancelled in its endpoint's line) was not."""
    mark = getattr(exc, _SENT, None)
    if mark == "answered":
        return True
    refused = isinstance(exc, openai.APIStatusError) or (
        isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError))
    return mark == "sent" and not refused


def register_secret(value: str | None) -> None:
    """Redact `value` (a configured API key) from every model failure's text from now on."""
    global _SECRETS
    if value and len(value) >= 4 and value not in _PLACEHOLDER_KEYS and value not in _SECRETS:
        _SECRETS = _SECRETS | {value}


def upstream_text(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` from outside Parley, fit to show: secrets redacted, cut to `UPSTREAM_TEXT_LIMIT` characters.

    Redaction comes first, so a key cut in half by the limit cannot leak its head.

    >>> upstream_text("bad key sk-abc123def456")
    'bad key [redacted]'
    """
    # A 2 MB text is cut before the patterns run: only what could survive the cut needs redacting.
    head = text[: UPSTREAM_TEXT_LIMIT * 4]
    for secret in sorted({*_SECRETS, *(s for s in secrets if s and s not in _PLACEHOLDER_KEYS)}, key=len,
                         reverse=True):
        head = head.replace(secret, REDACTED)
    head = _SECRET_SHAPES.sub(REDACTED, head)
    head = " ".join(head.split())  # newlines and runs of blanks would break log lines and SSE comments
    if len(head) > UPSTREAM_TEXT_LIMIT or len(text) > UPSTREAM_TEXT_LIMIT * 4:
        return head[: UPSTREAM_TEXT_LIMIT - len(_CUT)].rstrip() + _CUT
    return head


def scrub_failure(exc: BaseException, secrets: Iterable[str] = ()) -> None:
    """Cap and redact the upstream text an SDK exception carries (message, args, body), in place, for `exc`
    and every exception it was raised from; the model layer calls this on every failure of a call."""
    secrets = tuple(secrets)
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, openai.APIError):
            current.message = upstream_text(current.message or "", secrets)
            current.args = (current.message,)
            if current.body is not None:
                detail = _body_message(current.body)
                current.body = {"message": upstream_text(detail, secrets)} if detail else None
        current = current.__cause__ or current.__context__


def _body_message(body: object) -> str:
    """The message an error body carries: `{"message"}`, `{"error": {"message"}}`, `{"error": "..."}` or text."""
    if isinstance(body, str):
        return body
    if not isinstance(body, dict):
        return ""
    nested = body.get("error")
    for candidate in (body.get("message"), nested.get("message") if isinstance(nested, dict) else nested):
        if isinstance(candidate, str) and candidate:
            return candidate
    return ""


def classify_failure(exc: BaseException) -> FailureClass:
    """Name the kind of failure: timeout, rate_limit, auth, server (5xx, unreachable, cut off) or other.

    Every endpoint speaks the OpenAI protocol through one client, so the `openai` exceptions are the
    vocabulary here whatever provider answered, with the model layer's own (`ModelCallError`) beside them.
    """
    if isinstance(exc, openai.APITimeoutError | NodeTimeoutError | TimeoutError):
        return "timeout"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limit"
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return "auth"
    if isinstance(exc, openai.APIConnectionError | IncompleteAnswerError):  # refused, reset, cut off mid-answer
        return "server"
    if isinstance(exc, openai.APIStatusError) and exc.status_code >= 500:
        return "server"
    return "other"


def is_model_failure(exc: BaseException) -> bool:
    """Whether `exc` is a model call failing (or a model that cannot be called), rather than Parley's own bug."""
    return isinstance(exc, openai.OpenAIError | ModelError | TimeoutError | NodeTimeoutError)


def describe_failure(exc: BaseException) -> str:
    """One short line saying what went wrong, for error bodies, stored runs and logs.

    Upstream text in it is capped at `UPSTREAM_TEXT_LIMIT` characters and has secrets redacted.
    """
    if isinstance(exc, openai.APIStatusError):
        detail = _body_message(exc.body) or exc.message
        return f"HTTP {exc.status_code}: {upstream_text(detail)}"
    if isinstance(exc, ModelCallError | ModelError):
        return upstream_text(str(exc))
    if isinstance(exc, openai.APITimeoutError):
        return "no answer before the time limit"
    if isinstance(exc, openai.APIConnectionError):
        root = exc
        while root.__cause__ is not None:  # langchain-openai re-raises the SDK's error, which wraps the transport's
            root = root.__cause__
        what = root.__class__.__name__ if root is not exc else "connection error"
        return f"endpoint unreachable or the connection broke ({what})"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{exc.__class__.__name__}: {upstream_text(text)}" if text else exc.__class__.__name__


def failure_message(exc: BaseException, *, model: str = "{detail}", unreadable: str | None = None,
                    other: str = "{kind}") -> str:
    """What to tell a user about a failure `exc`: the one failure → message mapper, worded by each caller's templates.

    A model failure (`is_model_failure`) is `model` with `{detail}` its `describe_failure` (upstream text capped
    and redacted); a `ValueError` that is not one (an answer that could not be used: bad JSON, a value out of
    range) is `unreadable` when given; anything else is `other`, which may name `{kind}` (the exception's class)
    or `{text}` (its message, else its class), and so says no more of Parley's internals than the caller lets it.

    >>> failure_message(ModelError("no key"), model="Model failure: {detail}")
    'Model failure: no key'
    >>> failure_message(KeyError("x"), other="The debate failed: {kind}")
    'The debate failed: KeyError'
    """
    if is_model_failure(exc):
        return model.format(detail=describe_failure(exc))
    if unreadable is not None and isinstance(exc, ValueError):
        return unreadable
    return other.format(kind=exc.__class__.__name__, text=str(exc) or exc.__class__.__name__)


def is_transient(exc: BaseException) -> bool:
    """True for failures worth one more attempt (rate limits, server errors, streams cut off); a timeout
    already spent its budget."""
    return classify_failure(exc) in ("rate_limit", "server")


# The retry policy of every node that calls a model: one more attempt, only for what may pass next time.
MODEL_RETRY = RetryPolicy(max_attempts=2, initial_interval=0.5, max_interval=4.0, retry_on=is_transient)

# A structured answer that cannot be read (bad JSON, a value out of range, cut off at the token cap).
# Small models produce these now and then; nodes that can do without the answer catch exactly these.
UNREADABLE_ANSWER = (OutputParserException, ValidationError, openai.LengthFinishReasonError)
