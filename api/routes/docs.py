"""The API's reference pages, `/docs` (Swagger UI) and `/redoc` (Redoc), served whole from this origin.

Their scripts and styles come from the `fastapi-offline` package (pinned in pyproject.toml), served under
`/docs/assets/`, so the pages work offline and no CDN's script ever runs on the Studio's origin, where the
Studio keeps its key. A strict Content-Security-Policy allows only this origin's scripts; the one piece of
set-up Swagger UI needs is a file too (`swagger-init.js`), reading the document's address from the page.
"""

from __future__ import annotations

from html import escape
from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, Response

from parley.api.errors import ApiError

ASSETS_DIR = Path(str(files("fastapi_offline") / "static"))
ASSETS_URL = "/docs/assets"
PACKAGED_ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")

# Only this origin's scripts run. Both UIs set inline styles; Redoc builds its search index in a worker made
# from a blob; Swagger UI's icons are data: URIs; "Try it out" calls this origin's API.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'none'"
)
PAGE_HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
ASSET_HEADERS = {"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"}

SWAGGER_INIT = """\
// Parley's Swagger UI set-up, a file rather than an inline script so that the page's CSP allows no inline script.
const root = document.getElementById("swagger-ui");
window.ui = SwaggerUIBundle({
  url: root.dataset.specUrl,
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null,  // Swagger UI would otherwise send the document to a public validator for its badge
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
"""

SWAGGER_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} - Swagger UI</title>
<link rel="stylesheet" href="{assets}/swagger-ui.css">
<link rel="icon" href="{assets}/favicon.png">
</head>
<body>
<div id="swagger-ui" data-spec-url="{spec}"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script src="{assets}/swagger-init.js"></script>
</body>
</html>
"""

REDOC_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} - ReDoc</title>
<link rel="icon" href="{assets}/favicon.png">
</head>
<body style="margin: 0">
<redoc spec-url="{spec}"></redoc>
<script src="{assets}/redoc.standalone.js"></script>
</body>
</html>
"""

router = APIRouter(include_in_schema=False)


def _page(request: Request, template: str) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    html = template.format(title=escape(request.app.title), assets=escape(root + ASSETS_URL),
                           spec=escape(root + (request.app.openapi_url or "/openapi.json")))
    return HTMLResponse(html, headers=PAGE_HEADERS)


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    return _page(request, SWAGGER_PAGE)


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    return _page(request, REDOC_PAGE)


@router.get(ASSETS_URL + "/{name}")
async def asset(name: str) -> Response:
    if name == "swagger-init.js":
        return Response(SWAGGER_INIT, media_type="text/javascript", headers=ASSET_HEADERS)
    if name not in PACKAGED_ASSETS:
        raise ApiError(404, f"No file {ASSETS_URL}/{name}", code="not_found")
    return FileResponse(ASSETS_DIR / name, headers=ASSET_HEADERS)
