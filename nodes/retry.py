"""Retry policy for nodes that call a model: retry what a second attempt can fix, never a bad request."""

from __future__ import annotations

import httpx
import openai
from langgraph.types import RetryPolicy


def transient_model_error(exc: BaseException) -> bool:
    """True for failures worth one more attempt: timeouts, dropped connections, 429s and 5xx answers."""
    if isinstance(exc, (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500
    return isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError))


MODEL_RETRY = RetryPolicy(max_attempts=2, initial_interval=0.5, retry_on=transient_model_error)
