"""The FastAPI application: `create_app()` wires settings, storage, the model factory and the routes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from parley import store
from parley.api.entry import EntryGuard
from parley.api.errors import install_error_handlers
from parley.api.logs import redact_access_log
from parley.api.mcp_server import PATH as MCP_PATH
from parley.api.mcp_server import McpEndpoint
from parley.api.openapi import install_openapi
from parley.api.ratelimit import RateLimiter
from parley.api.routes import ROUTERS, STARTUP_HOOKS
from parley.api.sse import KEEPALIVE_SECONDS
from parley.core.embedded import EmbeddedServices
from parley.core.settings import Settings, get_settings
from parley.llm.factory import ModelFactory
from parley.runs.checkpoints import expire_after, mongodb_saver
from parley.services.backend import Backend
from parley.services.engine import ParleyRunEngine
from parley.services.webhooks import WebhookSender

log = logging.getLogger("parley.api")

# The HTTP API's own version (OpenAPI `info.version`): its routes and bodies, not the Python package's (0.2.0 moved
# the Python names under `parley`; the HTTP API did not change).
API_VERSION = "0.1.0"

# How uvicorn must serve the app (`parley serve`, the tests' servers): forwarded headers are the app's business,
# believed only from PARLEY_TRUSTED_PROXIES, where uvicorn by itself would believe any from 127.0.0.1.
UVICORN_OPTIONS = {"proxy_headers": False}


def create_app(settings: Settings | None = None, *, services: EmbeddedServices | None = None) -> FastAPI:
    """Build the Parley service.

    Args:
        settings: deployment settings; read from the environment when omitted.
        services: embedded servers already started by the caller (`parley serve` does this so it can
            show progress). When omitted, the app starts whatever the settings need on start-up and
            stops it on shutdown.
    """
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        redact_access_log()  # here, once uvicorn has configured its loggers
        owned = services is None
        running = services or await asyncio.to_thread(EmbeddedServices.start, settings, log.info)
        uri = running.mongodb_uri(settings)
        client, db = store.connect(uri, settings.mongodb_db)
        saver = None
        try:
            await store.ensure_indexes(db)
            app.state.settings = settings
            app.state.services = running
            app.state.mongo_client = client
            app.state.db = db
            app.state.factory = ModelFactory(settings, local_base_url=running.local_model_url)
            app.state.ratelimiter = RateLimiter(uri, settings.mongodb_db)
            await asyncio.to_thread(app.state.ratelimiter.open)
            app.state.sse_keepalive = KEEPALIVE_SECONDS
            saver = mongodb_saver(uri, settings.mongodb_db, expire_after=expire_after(settings))
            app.state.runs = ParleyRunEngine(db, saver=saver, factory=app.state.factory, settings=settings, uri=uri)
            app.state.backend = Backend(db=db, factory=app.state.factory, settings=settings, runs=app.state.runs,
                                        limiter=app.state.ratelimiter)
            for hook in app.state.startup_hooks:
                await hook(app)
            await app.state.runs.start()
            app.state.webhooks = WebhookSender(db, settings, worker=app.state.runs.worker)
            app.state.webhooks.start()
            async with app.state.mcp.running():
                yield
        finally:
            if getattr(app.state, "webhooks", None):  # a delivery under way is handed back, due at once
                await app.state.webhooks.stop()
            if getattr(app.state, "runs", None):
                # Runs outlive this worker: each still going is handed over, to resume on another (or on
                # this one once restarted) from its last checkpoint.
                await app.state.runs.stop()
            if saver is not None:
                await saver.aclose()
            await client.close()
            if getattr(app.state, "ratelimiter", None):
                app.state.ratelimiter.close()
            if owned:
                running.stop()

    app = FastAPI(
        title="Parley",
        version=API_VERSION,
        description="Multi-agent LLM debates: duels, panels and round tables, as LangGraph graphs.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's own pages load their scripts from a CDN; api.routes.docs serves them from here
        redoc_url=None,
    )
    app.state.startup_hooks = list(STARTUP_HOOKS)
    if settings.parley_trusted_proxies:
        # The client address (which rate limits count by) and scheme come from X-Forwarded-* only when the
        # connection is from one of these proxies; from anyone else the headers are ignored.
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.parley_trusted_proxies)
    install_error_handlers(app)
    app.add_middleware(EntryGuard, max_body_bytes=settings.parley_max_body_bytes)
    app.state.mcp = McpEndpoint(app, max_body_bytes=settings.parley_max_body_bytes)
    app.add_route(MCP_PATH, app.state.mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    for router in ROUTERS:
        app.include_router(router)
    install_openapi(app)
    return app
