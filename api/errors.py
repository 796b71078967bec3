"""Errors the HTTP layer sends, in the wire shape each API family's clients expect.

The services raise their own errors (`services.errors`); `service_error` maps each to its status here, once, and
the routes let them through.

OpenAI-compatible routes answer `{"error": {"message", "type", "code"}}`; the duel contract's routes
(`/api/...`, docs/api.md) answer exactly `{"error": "<message>"}` plus any extra fields (e.g. `retryAfter`);
Parley's own routes answer `{"error": "<message>", "code": ...}`. The shape is chosen here by
path, once, so routes only raise `ApiError`.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pymongo.errors import ConnectionFailure
from starlette.exceptions import HTTPException as StarletteHTTPException

from parley.services import errors as service_errors
from parley.services.errors import describe_validation, validation_code

log = logging.getLogger("parley.api")

OPENAI_STYLE_PREFIXES = ("/v1/chat/", "/v1/responses", "/v1/routers", "/v1/models")
# The duel contract's routes: their documented refusals keep the contract's exact body, even where Parley knows a code.
SEED_STYLE_PREFIXES = ("/api/",)
# Bodies the modes' contracts spell out word for word (docs/api.md): their clients may compare them exactly, so they
# carry no `code`.
# Every other error body has one.
SEED_EXACT_MESSAGES = frozenset({
    "Unauthorized", "Missing topic or userProfile", "Rate limit exceeded", "Failed to start debate",  # duel contract
    "Conversation not found", "Not found", "No agents found. Please create agents first.",  # round-table contract
})
UNPROCESSABLE_PREFIXES = ("/v1/workflows",)

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "insufficient_quota",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable",
}

# The `code` of an error raised without one: what its status says.
DEFAULT_CODES = {
    400: "invalid_request", 401: "unauthorized", 402: "insufficient_credits", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 406: "not_acceptable", 409: "conflict", 413: "body_too_large",
    415: "unsupported_media_type", 422: "invalid_request", 429: "rate_limited", 499: "cancelled",
    500: "internal_error", 502: "upstream_error", 503: "service_unavailable", 504: "upstream_timeout",
}


def default_code(status: int) -> str:
    return DEFAULT_CODES.get(status, "internal_error" if status >= 500 else "invalid_request")


class ApiError(Exception):
    """An error with its HTTP status, human message and optional machine code."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        self.type = type or _OPENAI_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        self.headers, self.extra = headers or {}, extra or {}


RUN_ID_HEADER = "X-Run-Id"


def run_error(error: dict[str, Any], *, run_id: str | None = None) -> ApiError:
    """The HTTP error for a run that failed or could not start (a run's stored `error`, or a `RunFailure`'s):
    its `status`, `message` and `code`, every other field as extra body fields; the run's id, when there is
    a run, in `X-Run-Id` (as on every answer about a run)."""
    extra = {k: v for k, v in error.items() if k not in ("message", "status", "code")}
    headers = {RUN_ID_HEADER: run_id} if run_id else None
    return ApiError(error.get("status", 500), error["message"], code=error.get("code"), extra=extra, headers=headers)


# The status of each kind of service error (a subclass takes its nearest base's).
SERVICE_STATUSES: dict[type[service_errors.ServiceError], int] = {
    service_errors.InvalidRequest: 400,
    service_errors.PaymentRequired: 402,
    service_errors.Forbidden: 403,
    service_errors.NotFound: 404,
    service_errors.Conflict: 409,
    service_errors.TooLarge: 413,
    service_errors.Unprocessable: 422,
    service_errors.RateLimited: 429,
    service_errors.CannotStart: 500,
    service_errors.BadGateway: 502,
}


def service_error(exc: service_errors.ServiceError) -> ApiError:
    """The HTTP error for what the services refused: the status of its kind (`SERVICE_STATUSES`; a failed run's
    own, see `run_error`), its message and code, its details as extra body fields. A message a mode's contract
    spells out word for word is sent without its kind's generic code, as that contract's clients expect (a narrower
    code the service named is kept)."""
    if isinstance(exc, service_errors.RunFailed):
        return run_error(exc.error, run_id=exc.run_id)
    status = next((SERVICE_STATUSES[kind] for kind in type(exc).__mro__ if kind in SERVICE_STATUSES), 500)
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, service_errors.RateLimited) else None
    code = None if exc.message in SEED_EXACT_MESSAGES and exc.code == type(exc).code else exc.code
    return ApiError(status, exc.message, code=code, headers=headers, extra=dict(exc.details))


INTERNAL_ERROR = "Internal error: the server log has the cause"


def failure_error(exc: Exception) -> ApiError:
    """The error for an exception that reached the edge of Parley (a route, an MCP tool): what it says itself (an
    `ApiError`, a service's refusal), the database unreachable (503), or anything else (500, its cause logged)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, service_errors.ServiceError):
        return service_error(exc)
    if isinstance(exc, ConnectionFailure):
        # Where the database is (its host and port, in the driver's message) is for the log, not for the caller.
        log.error("database unreachable: %s", exc)
        return ApiError(503, "Database unavailable: the server log has the cause", code="database_unavailable")
    log.error("unexpected failure", exc_info=exc)
    return ApiError(500, INTERNAL_ERROR, code="internal_error")


def error_body(path: str, err: ApiError) -> dict[str, Any]:
    """Render `err` in the shape of the API family `path` belongs to."""
    code = err.code or default_code(err.status)
    if path.startswith(OPENAI_STYLE_PREFIXES):
        return {"error": {"message": err.message, "type": err.type, "code": code, **err.extra}}
    body: dict[str, Any] = {"error": err.message}
    seed_exact = err.message in SEED_EXACT_MESSAGES and (path.startswith(SEED_STYLE_PREFIXES) or err.code is None)
    if not seed_exact:
        body["code"] = code
    body.update(err.extra)
    return body


def error_response(request: Request, err: ApiError) -> JSONResponse:
    return JSONResponse(error_body(request.url.path, err), status_code=err.status, headers=err.headers)


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method the API answers on `path`, from its OpenAPI document (a 405's `Allow`). Routing alone knows
    only the methods of the one route it tried, not those of the path's other routes."""
    matches = [(template.count("{"), item) for template, item in app.openapi()["paths"].items()
               if re.fullmatch(re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template)), path)]
    # `/v1/workflows/runs` is its own resource, not a workflow whose id is "runs": the most literal templates win.
    fewest = min((params for params, _ in matches), default=0)
    return sorted({m.upper() for params, item in matches if params == fewest for m in item})


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that turn every failure into a clear JSON body."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(request, exc)

    @app.exception_handler(service_errors.ServiceError)
    async def _refused(request: Request, exc: service_errors.ServiceError) -> JSONResponse:
        return error_response(request, service_error(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        status = 422 if request.url.path.startswith(UNPROCESSABLE_PREFIXES) else 400
        details = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in exc.errors()]
        err = ApiError(status, describe_validation(exc.errors()), code=validation_code(exc.errors()),
                       extra={"details": details})
        return error_response(request, err)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "HTTP error"
        if exc.status_code == 404 and message == "Not Found":
            message = f"No route for {request.method} {request.url.path}"
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request.app, request.url.path)) or headers.get("Allow", "")
        return error_response(request, ApiError(exc.status_code, message, headers=headers))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Starlette calls this for anything no other handler took, then re-raises it for the server's log.
        return error_response(request, ApiError(500, INTERNAL_ERROR, code="internal_error"))

    @app.exception_handler(ConnectionFailure)
    async def _db_down(request: Request, exc: ConnectionFailure) -> JSONResponse:
        return error_response(request, failure_error(exc))
