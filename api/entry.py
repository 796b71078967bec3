"""Where every request enters: its body is read once, bounded, parsed and checked before any route sees it.

A body larger than the limit is refused with 413 as soon as that is known (from `Content-Length`, else while it
arrives); a JSON body that does not parse, nests too deep or holds what MongoDB cannot store (a NUL in a key, a
lone surrogate, an integer beyond 64 bits) is refused with 400 (422 on the designer's routes, as their other
validation errors), each with a `code` and a message naming where. So no route can store half of a request, fail
on it with a 500, or forget a check. Large bodies are parsed on a worker thread: one big request does not stall
the event loop that serves everyone else.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.api.errors import UNPROCESSABLE_PREFIXES, ApiError, error_body
from parley.core.limits import (
    MAX_JSON_DEPTH,
    OFF_LOOP_BYTES,
    ROUTE_BODY_BYTES,
    ROUTE_LIST_ITEMS,
    Refusal,
    refuse_unstorable,
)


def check_json(raw: bytes, path: str, *, max_depth: int = MAX_JSON_DEPTH) -> Refusal | None:
    """Why `raw` is not an acceptable JSON body for `path`, or None when it is (an empty body is left to the
    route).

    Never raises. An integer beyond 64 bits is `unstorable_value`, but one of more than 4300 digits is `invalid_json`:
    Python's parser refuses it (its int-string limit) before the value can be looked at.
    """
    if not raw.strip():
        return None
    try:
        value = json.loads(raw)
    except RecursionError:
        return Refusal("too_deep", f"The JSON nests deeper than {max_depth} levels")
    except ValueError as exc:  # includes a body that is not UTF-8
        return Refusal("invalid_json", f"Request body is not valid JSON: {str(exc)[:200]}")
    if isinstance(value, dict):
        for field, most in ROUTE_LIST_ITEMS.get(path, {}).items():
            if isinstance(value.get(field), list) and len(value[field]) > most:
                return Refusal("invalid_request", f"{field}: at most {most} items ({len(value[field])} sent)")
    return refuse_unstorable(value, max_depth=max_depth)


def _is_json(scope: Scope) -> bool:
    """JSON is what the API reads: a body sent as JSON, or with no type at all (FastAPI parses those too)."""
    content_type = next((v for k, v in scope.get("headers", ()) if k == b"content-type"), b"").decode("latin-1")
    return not content_type or "json" in content_type.lower()


def replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the app `body` (already read) as the whole request, then what `receive` gives (the
    client's hang-up)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class EntryGuard:
    """ASGI middleware holding every request body to `max_body_bytes` (less on the routes of `ROUTE_BODY_BYTES`)
    and to what MongoDB can store."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = min(self.max_body_bytes, ROUTE_BODY_BYTES.get(scope["path"], self.max_body_bytes))
        declared = next((v for k, v in scope.get("headers", ()) if k == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(scope, receive, send, self._too_large(limit))
            return
        if declared is None and not any(k == b"transfer-encoding" for k, _ in scope.get("headers", ())):
            await self.app(scope, receive, send)  # no body
            return

        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > limit:
                await self._refuse(scope, receive, send, self._too_large(limit))
                return

        if _is_json(scope):
            raw = bytes(body)
            path = scope["path"]
            refusal = await asyncio.to_thread(check_json, raw, path) if len(raw) >= OFF_LOOP_BYTES else check_json(
                raw, path)
            if refusal is not None:
                status = 422 if scope["path"].startswith(UNPROCESSABLE_PREFIXES) else 400
                await self._refuse(scope, receive, send, ApiError(status, refusal.message, code=refusal.code))
                return

        await self.app(scope, replaying(bytes(body), receive), send)

    @staticmethod
    def _too_large(size: int) -> ApiError:
        shown = f"{size // (1024 * 1024)} MB" if size % (1024 * 1024) == 0 else f"{size // 1024} KB"
        return ApiError(413, f"Request body exceeds {shown}", code="body_too_large")

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, err: ApiError) -> None:
        body: dict[str, Any] = error_body(scope["path"], err)
        await JSONResponse(body, status_code=err.status, headers={**err.headers, "Connection": "close"})(
            scope, receive, send)
