"""`GET /healthz`: can Parley reach its model endpoint and its database?"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from parley import store
from parley.api.deps import Db, Factory, presented_key
from parley.llm.failures import ModelError
from parley.services import access

router = APIRouter(tags=["health"])


def _versions() -> dict[str, str]:
    out = {}
    for name in ("parley", "langgraph", "langchain-openai", "fastapi", "pymongo"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


async def _model_status(factory) -> dict:
    model_id = factory.default_model
    try:
        resolved = factory.resolve(model_id)
    except ModelError as exc:
        return {"ok": False, "model": model_id, "error": str(exc)}
    base = (resolved.base_url or "https://api.openai.com/v1").rstrip("/")
    status = {"ok": False, "model": model_id, "endpoint": base}
    try:
        async with httpx.AsyncClient(timeout=3.0) as client:
            resp = await client.get(base + "/models", headers={"Authorization": f"Bearer {resolved.api_key}"})
    except httpx.HTTPError as exc:
        status["error"] = f"unreachable: {exc.__class__.__name__}"
        return status
    # Some gateways have no /models route; any answer but an auth refusal or a server error means "reachable".
    status["ok"] = resp.status_code < 500 and resp.status_code not in (401, 403)
    if not status["ok"]:
        status["error"] = f"HTTP {resp.status_code}"
    return status


@router.get("/healthz", summary="Model and database reachability", responses={
    200: {"description": "Both are reachable. The model endpoint's address is shown to an `admin` key only."},
    503: {"description": "The model endpoint or the database is unreachable; the body says which.",
          "content": {"application/json": {"schema": {"type": "object"}}}}})
async def healthz(request: Request, db: Db, factory: Factory) -> JSONResponse:
    # The endpoint's address is the deployment's business: shown to an admin key, not to whoever asks without one.
    model = await _model_status(factory)
    principal = await access.authenticate(db, presented_key(request))
    if principal is None or "admin" not in principal.scopes:
        model.pop("endpoint", None)
    services = request.app.state.services
    database = {"ok": await store.ping(db), "embedded": services.embedded_database}
    ok = model["ok"] and database["ok"]
    body = {"status": "ok" if ok else "degraded", "model": model, "database": database, "versions": _versions()}
    return JSONResponse(body, status_code=200 if ok else 503)
