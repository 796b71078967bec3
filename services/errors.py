"""What the services refuse, and why: one small hierarchy, each error with a machine `code` and a message.

The services know no HTTP: `api.errors.service_error` maps each class to its status and the JSON body the
API's clients expect; the CLI prints the message. `code` is the class's unless the error names a narrower one
(`NotFound("...", code="router_not_found")`); `details` are extra fields a client may read (the problems of a
workflow, a run's id).
"""

from __future__ import annotations

from typing import Any

from pydantic_core import PydanticCustomError


class ServiceError(Exception):
    """A request the services cannot carry out."""

    code = "service_error"

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or type(self).code
        self.details = details


class InvalidRequest(ServiceError):
    """The request cannot be carried out as asked (a router needed, too few model families)."""

    code = "invalid_request"


class Forbidden(ServiceError):
    """The key may not do this: it is read-only, lacks the scope, or is not the run's owner's."""

    code = "forbidden"


class NotFound(ServiceError):
    """No such thing for this caller (what it may not see is not found either)."""

    code = "not_found"


class Conflict(ServiceError):
    """The request clashes with what exists (an id taken, an idempotency key used for another question)."""

    code = "conflict"


class Unprocessable(ServiceError):
    """A document or an input that does not fit (a workflow's problems, its input's)."""

    code = "invalid_request"


class TooLarge(ServiceError):
    """What the request would store does not fit: the workspace's stored bytes would pass their bound."""

    code = "storage_quota_exceeded"


class PaymentRequired(ServiceError):
    """The workspace cannot pay for the run: its credit or its token allowance does not cover it."""

    code = "insufficient_credits"


class RateLimited(ServiceError):
    """Too many requests of this kind; `retry_after` seconds until the next is allowed."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int, code: str | None = None, **details: Any) -> None:
        super().__init__(message, code=code, **details)
        self.retry_after = retry_after


class BadGateway(ServiceError):
    """A server Parley had to reach for the request (an MCP server of tools) could not be reached or failed."""

    code = "bad_gateway"


class CannotStart(ServiceError):
    """The run cannot be set up: no agents to seat, no usable model, an allowance short of a minimum round table
    (the round-table contract answers these 500), the database refused it."""

    code = "internal_error"


class RunFailed(ServiceError):
    """A run the caller waited for ended without a result: `error` is its stored error (`message`, `status`,
    `code`, other fields), `run_id` the run's."""

    def __init__(self, error: dict[str, Any], *, run_id: str | None = None) -> None:
        super().__init__(error["message"], code=error.get("code"))
        self.code = error.get("code")  # none: the status's own code (the run said no more)
        self.error, self.run_id = error, run_id


# Codes a request model's validators name for what they refuse (`invalid_field`), instead of the generic
# `invalid_request`: a client can tell its tools from its response_format from its conversation.
FIELD_CODES = frozenset({"invalid_tools", "invalid_tool_messages", "invalid_response_format", "legacy_functions",
                         "invalid_arbitrator", "invalid_input", "unsupported_parameter"})


def invalid_field(code: str, message: str) -> PydanticCustomError:
    """The error a request model's validator raises for a refusal with its own `code` (one of `FIELD_CODES`)."""
    return PydanticCustomError(code, message)


def validation_code(errors: list[dict[str, Any]]) -> str:
    """The `code` of a refused body: the first error's own (`FIELD_CODES`), else `invalid_request`."""
    return next((e["type"] for e in errors if e.get("type") in FIELD_CODES), "invalid_request")


def describe_validation(errors: list[dict[str, Any]]) -> str:
    """Turn pydantic errors into one sentence naming each bad field."""
    broken = next((e for e in errors if e.get("type") == "json_invalid"), None)
    if broken is not None:
        position = next((p for p in broken.get("loc", ())[1:] if isinstance(p, int)), None)
        where = f" (near character {position})" if position is not None else ""
        return f"Request body is not valid JSON{where}: {broken.get('ctx', {}).get('error', 'cannot be parsed')}"
    parts = []
    for e in errors:
        loc = ".".join(str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path"))
        message = "must be a JSON object" if e.get("type") == "model_attributes_type" else e.get("msg", "invalid")
        # A refusal with its own code names its field itself (`messages[1]: ...`, `tools[0].function.name ...`).
        parts.append(message if e.get("type") in FIELD_CODES and not loc else f"{loc or 'body'}: {message}")
    return "Invalid request: " + "; ".join(parts)
