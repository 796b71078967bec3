"""HTTP routes, one module per resource; each validates, calls one function and maps errors."""

from collections.abc import Awaitable, Callable

from fastapi import FastAPI

from parley.api.routes import (agents, chat, conversations, docs, duel, health, me, metrics, models, responses, routers,
                               runs, studio, tools, webhooks, workflows)
from parley.services import duel as duel_service
from parley.services import roundtable

ROUTERS = [
    health.router,
    metrics.router,
    duel.router,
    chat.router,
    responses.router,
    models.router,
    routers.router,
    tools.router,
    webhooks.router,
    agents.router,
    conversations.router,
    workflows.router,
    runs.router,
    me.router,
    docs.router,
    studio.router,  # last: it answers only what no API route does (the Studio's pages and files)
]



async def _tidy_records(app: FastAPI) -> None:
    """Fail the debates an earlier Parley left running; finish what a stopped process left halfway."""
    await duel_service.fail_legacy_debates(app.state.db)
    await roundtable.tidy(app.state.db)


# Run by the lifespan once the database is connected, in order.
STARTUP_HOOKS: list[Callable[[FastAPI], Awaitable[None]]] = [_tidy_records]
