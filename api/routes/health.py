"""`GET /healthz`: can Parley reach its model endpoint and its database? `GET /readyz`: can this worker serve?

Both answer without a key, and then with their status alone (`{"status": "ok"}`, or 503 with a `code`): which model,
which endpoint, which database and which library versions a deployment runs are its own business. A valid key gets
the details of `/healthz` (an `admin` key the model endpoint's address and the versions too).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from parley import store
from parley.api.deps import Db, Engine, Factory, presented_key
from parley.llm.failures import ModelError
from parley.services import access

router = APIRouter(tags=["health"])

STATUS_ONLY = {"application/json": {"schema": {"type": "object", "properties": {
    "status": {"type": "string"}, "code": {"type": "string"}}, "required": ["status"]}}}


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


def _status(code: str | None, **details) -> JSONResponse:
    """`ok`, or `unavailable` with what is wrong as a code (no address, no name), and what a key may see."""
    body = {"status": "ok" if code is None else "unavailable", **({"code": code} if code else {}), **details}
    return JSONResponse(body, status_code=200 if code is None else 503)


@router.get("/healthz", summary="Model and database reachability", responses={
    200: {"description": "Both are reachable: `{\"status\": \"ok\"}`. A valid key also gets `model` and `database`; "
                         "an `admin` key the model endpoint's address and the library `versions` too.",
          "content": STATUS_ONLY},
    503: {"description": "The database (`database_unavailable`) or the model endpoint (`model_unavailable`) is "
                         "unreachable; a valid key gets the details.", "content": STATUS_ONLY}})
async def healthz(request: Request, db: Db, factory: Factory) -> JSONResponse:
    database_ok = await store.ping(db)
    model = await _model_status(factory)
    code = None if database_ok and model["ok"] else "model_unavailable" if database_ok else "database_unavailable"
    # A key is looked up only while the database answers; without one the status is all there is.
    principal = await access.authenticate(db, presented_key(request)) if database_ok else None
    if principal is None:
        return _status(code)
    database = {"ok": database_ok, "embedded": request.app.state.services.embedded_database}
    details = {"model": model, "database": database}
    if access.is_admin(principal):
        details["versions"] = _versions()
    else:
        model.pop("endpoint", None)
    return _status(code, **details)


@router.get("/readyz", summary="Whether this worker can serve", responses={
    200: {"description": "Ready: `{\"status\": \"ok\"}`: this worker runs and its database answers.",
          "content": STATUS_ONLY},
    503: {"description": "Not ready: the database does not answer (`database_unavailable`), or this worker is "
                         "starting, stopping or out of touch with its runs (`worker_unavailable`).",
          "content": STATUS_ONLY}})
async def readyz(db: Db, engine: Engine) -> JSONResponse:
    """Ready while this worker can serve a request: its run engine tends its runs (`RunEngine.tending`) and the
    database answers. The model endpoint is not asked: its outage is every worker's, and taking every worker out of
    service for it would leave nothing to answer the requests that need no model."""
    if not engine.tending():
        return _status("worker_unavailable")
    return _status(None if await store.ping(db) else "database_unavailable")
