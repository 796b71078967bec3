"""Parley Studio, the web UI built from `studio/` into `api/static/studio/`, served at `/`.

The route is registered last and only matches what it serves, so it never shadows the API: paths under
`/api`, `/v1`, `/mcp`, `/healthz`, `/readyz`, `/docs`, `/openapi.json`, `/redoc` and `/metrics` are never its, and a
request it would not serve falls through to the API's own 404 or 405. It serves the bundle's files, and
gives `index.html` to a browser navigating to any other page (the Studio's client-side routes).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import Scope

STUDIO_DIR = Path(__file__).resolve().parents[1] / "static" / "studio"
RESERVED = ("/api", "/v1", "/mcp", "/healthz", "/readyz", "/docs", "/openapi.json", "/redoc", "/metrics")

# The key lives in localStorage, so no script but the bundle's may run: no inline or foreign scripts.
# Inline styles stay allowed (the canvas positions nodes with style attributes).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
# Bundle files carry a content hash in their names, so a browser may keep them for good.
ASSET_HEADERS = {"Cache-Control": "public, max-age=31536000, immutable", "X-Content-Type-Options": "nosniff"}


def _reserved(path: str) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in RESERVED)


def bundle_file(path: str) -> Path | None:
    """The bundle's file at a URL path (`/` is `index.html`), or None; never a file outside the bundle."""
    relative = path.lstrip("/") or "index.html"
    candidate = (STUDIO_DIR / relative).resolve()
    if candidate.is_file() and candidate.is_relative_to(STUDIO_DIR):
        return candidate
    return None


def _navigates(scope: Scope) -> bool:
    """A browser loading a page (not a script or an API client) asks for HTML."""
    accept = next((v for k, v in scope.get("headers", []) if k == b"accept"), b"")
    return b"text/html" in accept


class StudioRoute(APIRoute):
    """A catch-all that matches only the requests it will answer, so every other one keeps the API's answer."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is Match.NONE or scope.get("method") not in ("GET", "HEAD"):
            return Match.NONE, {}
        path = scope.get("path", "/")
        if _reserved(path) or not (bundle_file(path) or _navigates(scope)):
            return Match.NONE, {}
        return match, child


router = APIRouter(route_class=StudioRoute, include_in_schema=False)


@router.api_route("/{path:path}", methods=["GET", "HEAD"])
async def studio(path: str) -> Response:
    found = bundle_file(path)
    if found is not None and found.name != "index.html":
        return FileResponse(found, headers=ASSET_HEADERS)
    index = STUDIO_DIR / "index.html"
    if path.startswith("assets/") or not index.is_file():
        # A missing bundle file must not come back as HTML (the browser would run it as a script).
        message = "Parley Studio is not built: run `make studio`." if not index.is_file() else f"No file /{path}"
        return PlainTextResponse(message, status_code=404 if index.is_file() else 503)
    return FileResponse(index, headers=PAGE_HEADERS, media_type="text/html")
