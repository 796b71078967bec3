"""Helpers the CLI commands share: a console, and a database handle that works with or without MONGODB_URI."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import typer
from pymongo.asynchronous.database import AsyncDatabase
from rich.console import Console

import store
from core.embedded import EmbeddedServerError, database_server, running_database
from core.settings import get_settings

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
