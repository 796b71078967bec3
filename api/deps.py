"""FastAPI dependencies: the database, the model factory, the services' backend and the authenticated caller
(a `services.access.Principal`, imported from here too)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pymongo.asynchronous.database import AsyncDatabase

from parley.api.errors import ApiError
from parley.core.settings import Settings
from parley.llm.factory import ModelFactory
from parley.runs import RunEngine
from parley.services import access
from parley.services.access import Principal
from parley.services.errors import Forbidden
from parley.services.backend import Backend


# Coroutines, all of them: FastAPI runs a plain `def` dependency on a worker thread, a thread hop per request.
async def get_db(request: Request) -> AsyncDatabase:
    return request.app.state.db


async def get_factory(request: Request) -> ModelFactory:
    return request.app.state.factory


async def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


async def get_engine(request: Request) -> RunEngine:
    return request.app.state.runs


async def get_backend(request: Request) -> Backend:
    return request.app.state.backend


Db = Annotated[AsyncDatabase, Depends(get_db)]
Engine = Annotated[RunEngine, Depends(get_engine)]
Factory = Annotated[ModelFactory, Depends(get_factory)]
Services = Annotated[Backend, Depends(get_backend)]
AppSettings = Annotated[Settings, Depends(get_settings_dep)]


def presented_key(request: Request) -> str | None:
    """The key from `Authorization: Bearer <key>` or `x-api-key`."""
    auth = request.headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key") or None


# The two ways to present a key, declared so that the OpenAPI document shows them on every route that needs one;
# `presented_key` reads the same headers.
BEARER = HTTPBearer(auto_error=False, scheme_name="bearer", description="`Authorization: Bearer <key>`")
API_KEY = APIKeyHeader(name="x-api-key", auto_error=False, scheme_name="apiKey", description="The key, as is.")


async def get_principal(
    request: Request,
    db: Db,
    _bearer: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)] = None,
    _api_key: Annotated[str | None, Security(API_KEY)] = None,
) -> Principal:
    """Authenticate the request's key or raise 401."""
    principal = await access.authenticate(db, presented_key(request))
    if principal is None:
        raise ApiError(401, "Unauthorized", code="invalid_api_key")
    return principal


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


def require_scope(scope: str, *, write: bool = False, denied_status: int = 403):
    """A dependency admitting keys that carry `scope` (and, for writes, are not `readonly`): `access.check_scope`.

    Args:
        scope: the capability the route needs.
        write: the route creates, runs or deletes something, which a `readonly` key may not do.
        denied_status: status for a key without the scope (the duel contract answers 401, others 403).
    """

    async def check(principal: CurrentPrincipal) -> Principal:
        try:
            access.check_scope(principal, scope, write=write)
        except Forbidden as exc:
            if denied_status == 401 and exc.code == "scope_denied":
                raise ApiError(401, "Unauthorized", code="scope_denied") from exc
            raise
        return principal

    return check
