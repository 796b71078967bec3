"""Classify failed model calls, so callers report why a model failed and retry only what may pass next time."""

from __future__ import annotations

from typing import Literal

import openai
from langchain_core.exceptions import OutputParserException
from langgraph.errors import NodeTimeoutError
from langgraph.types import RetryPolicy

from pydantic import ValidationError

from nodes.models import ModelError

FailureClass = Literal["timeout", "rate_limit", "auth", "server", "other"]


def classify_failure(exc: BaseException) -> FailureClass:
    """Name the kind of failure: timeout, rate_limit, auth, server (5xx, unreachable) or other.

    Every endpoint speaks the OpenAI protocol through one client, so the `openai` exceptions are the
    vocabulary here whatever provider answered.
    """
    if isinstance(exc, openai.APITimeoutError | NodeTimeoutError | TimeoutError):
        return "timeout"
    if isinstance(exc, openai.RateLimitError):
        return "rate_limit"
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return "auth"
    if isinstance(exc, openai.APIConnectionError):  # refused, reset, DNS: the endpoint is not serving
        return "server"
    if isinstance(exc, openai.APIStatusError) and exc.status_code >= 500:
        return "server"
    return "other"


def describe_failure(exc: BaseException) -> str:
    """One short line saying what went wrong, for error bodies and logs."""
    if isinstance(exc, openai.APIStatusError):
        body = exc.body if isinstance(exc.body, dict) else {}
        nested = body.get("error") if isinstance(body.get("error"), dict) else {}
        detail = body.get("message") or nested.get("message") or exc.message
        return f"HTTP {exc.status_code}: {detail}"
    if isinstance(exc, openai.APITimeoutError):
        return "no answer before the time limit"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        return f"endpoint unreachable ({cause.__class__.__name__ if cause else 'connection error'})"
    if isinstance(exc, ModelError):
        return str(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


def is_transient(exc: BaseException) -> bool:
    """True for failures worth one more attempt (rate limits, server errors); a timeout already spent its budget."""
    return classify_failure(exc) in ("rate_limit", "server")


# The retry policy of every node that calls a model: one more attempt, only for what may pass next time.
MODEL_RETRY = RetryPolicy(max_attempts=2, initial_interval=0.5, max_interval=4.0, retry_on=is_transient)

# A structured answer that cannot be read (bad JSON, a value out of range, cut off at the token cap).
# Small models produce these now and then; nodes that can do without the answer catch exactly these.
UNREADABLE_ANSWER = (OutputParserException, ValidationError, openai.LengthFinishReasonError)
