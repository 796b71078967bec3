"""HTTP routes, one module per resource; each validates, calls one function and maps errors."""

from collections.abc import Awaitable, Callable

from fastapi import FastAPI

from api.routes import (agents, chat, conversations, docs, duel, health, me, metrics, routers, runs, studio,
                        workflows)
from api.services import duel as duel_service
from api.services import roundtable

ROUTERS = [
    health.router,
    metrics.router,
    duel.router,
    chat.router,
    routers.router,
    agents.router,
    conversations.router,
    workflows.router,
    runs.router,
    me.router,
    docs.router,
    studio.router,  # last: it answers only what no API route does (the Studio's pages and files)
]

# Run by the lifespan once the database is connected, in order.
STARTUP_HOOKS: list[Callable[[FastAPI], Awaitable[None]]] = [duel_service.on_startup, roundtable.on_startup]
