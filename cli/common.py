"""Helpers the CLI commands share: a console, a database handle that works with or without MONGODB_URI, and a
model factory that starts the embedded model when a command needs it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import typer
from pymongo.asynchronous.database import AsyncDatabase
from rich.console import Console

from parley import store
from parley.core.embedded import EmbeddedServerError, database_server, model_server, running_database
from parley.core.settings import get_settings
from parley.llm.factory import ModelFactory

T = TypeVar("T")

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print `message` in red on stderr and return the Exit to raise."""
    err_console.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code)


@contextmanager
def database_uri() -> Iterator[str]:
    """MONGODB_URI, the running embedded database, or one started for the block (and stopped after)."""
    settings = get_settings()
    uri = settings.mongodb_uri or running_database(settings.parley_home)
    if uri:
        yield uri
        return
    try:
        server = database_server(settings.parley_home).start(timeout=60)
    except EmbeddedServerError as exc:
        raise fail(str(exc)) from exc
    try:
        yield server.url
    finally:
        server.stop()


def with_db(fn: Callable[[AsyncDatabase], Awaitable[T]]) -> T:
    """Run `fn(db)` against MONGODB_URI, the running embedded database, or a briefly started one."""
    settings = get_settings()

    async def run(uri: str) -> T:
        client, db = store.connect(uri, settings.mongodb_db)
        try:
            await store.ensure_indexes(db)
            return await fn(db)
        finally:
            await client.close()

    with database_uri() as uri:
        return asyncio.run(run(uri))


@contextmanager
def model_factory(model_ids: Iterable[str]) -> Iterator[ModelFactory]:
    """The model factory for a command that calls `model_ids`; when one of them is the embedded model, it is
    started for the block (and stopped after)."""
    settings = get_settings()
    if not any(m.startswith("local:") for m in model_ids):
        yield ModelFactory(settings)
        return
    err_console.print("[dim]Starting the embedded model…[/]")
    try:
        server = model_server(settings.parley_home, settings.parley_model_port).start(timeout=120)
    except EmbeddedServerError as exc:
        raise fail(str(exc)) from exc
    try:
        yield ModelFactory(settings, local_base_url=server.url)
    finally:
        server.stop()


# --- steering a debate from the terminal (`--steer`, docs/steering.md) -----------------------------------------

# A budget's options, as `parley debate`, `parley roundtable` and `parley workspaces budget` take them.
MAX_TOKENS = typer.Option(None, "--max-tokens", help="Budget: tokens a debate may use; it goes to its verdict or "
                                                     "synthesis before a turn or round would pass them.")
MAX_COST = typer.Option(None, "--max-cost", help="Budget: as --max-tokens, in USD.")
MAX_SECONDS = typer.Option(None, "--max-seconds", help="Budget: as --max-tokens, in seconds (waits not counted).")


def budget_fields(max_tokens: int | None, max_cost: float | None, max_seconds: float | None) -> dict[str, float]:
    """The budget options given, as the API's fields (`maxTokens`, `maxCost`, `maxSeconds`)."""
    given = {"maxTokens": max_tokens, "maxCost": max_cost, "maxSeconds": max_seconds}
    return {name: value for name, value in given.items() if value is not None}


STEER_PROMPT = "[bold]Enter[/] to go on, a message to guide the debate, [bold]/end[/] for the verdict: "
STOPPED = {"budget": "its budget held no more", "user": "you ended it", "unanimous": "round 0 was unanimous"}


def ask_at_boundary(where: str) -> dict[str, str]:
    """Ask the person at the terminal what the debate waiting at `where` should do; return the input to send it:
    `continue` (an empty line), `end` (`/end`), or `guide` with the line as its message."""
    console.rule(f"[bold]Your turn[/] · {where}")
    line = console.input(STEER_PROMPT).strip()
    if not line:
        return {"action": "continue"}
    if line.lower() in ("/end", "/stop", "/verdict"):
        return {"action": "end"}
    return {"action": "guide", "content": line}


def describe_budget(budget: dict | None) -> str:
    """A budget's limits in words (`none` when there is none)."""
    if not budget:
        return "none"
    units = {"maxTokens": "{:g} tokens", "maxCost": "${:g}", "maxSeconds": "{:g} s"}
    return ", ".join(units[name].format(value) for name, value in budget.items())


def show_stopped(stopped_by: str | None, figures: dict | None = None) -> None:
    """Say why a debate went to its verdict early (`stoppedBy`), with what its budget had spent."""
    if not stopped_by:
        return
    spent = (figures or {}).get("spent")
    extra = f" (spent {spent['tokens']} tokens, ${spent['costUsd']:.6f})" if spent else ""
    console.print(f"[yellow]Stopped early[/] ({stopped_by}): {STOPPED.get(stopped_by, stopped_by)}{extra}")
