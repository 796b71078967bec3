"""Helpers the CLI commands share: a console, a database handle that works with or without MONGODB_URI, and a
model factory that starts the embedded model when a command needs it."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import TypeVar

import typer
from pymongo.asynchronous.database import AsyncDatabase
from pydantic import ValidationError
from pymongo.errors import ConnectionFailure
from rich.console import Console
from rich.text import Text

from parley import store
from parley.core.embedded import (
    EmbeddedServerError,
    database_server,
    model_server,
    running_database,
    running_model,
)
from parley.core.fields import model_id_problem
from parley.core.settings import Settings, get_settings
from parley.llm.factory import ModelFactory

T = TypeVar("T")

# Who the commands act as when not told (`parley agents`, `parley roundtable`, the first key `parley serve` makes):
# the README's quick start makes its key for the same user and workspace, so that it sees what the commands made.
CLI_USER, CLI_WORKSPACE = "local", "default"

console = Console()
err_console = Console(stderr=True)


# --- failures: one line on the terminal, the traceback in a log file --------------------------------------------

LOG_FILE = Path("logs") / "cli.log"  # under PARLEY_HOME
LOG_FILE_BYTES = 1_000_000  # then it starts afresh, the previous one kept as cli.log.1


@dataclass
class _Reporting:
    """Where this command's log records go (set once a command starts, by `report_to`)."""

    verbose: bool = True  # until a command says otherwise, as Python does: records and tracebacks on stderr
    log_path: Path | None = None
    tracebacks: int = 0  # records with a traceback written to the log file alone

    def hint(self) -> str:
        if self.verbose or not self.log_path or not self.tracebacks:
            return ""
        return f" (the traceback is in {self.log_path}; --verbose shows it)"


_reporting = _Reporting()


class _LogFile(RotatingFileHandler):
    """The command's log file, counting the tracebacks it takes in (so that the `error:` line can say where they are)."""

    parley_cli = True

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            _reporting.tracebacks += 1
        super().emit(record)


def report_to(home: Path, *, verbose: bool) -> None:
    """Send log records (a failed run's traceback, a warning) to `home/logs/cli.log`, and to stderr as well when
    `verbose`: a failed command shows its one `error:` line, not the 100 lines of traceback Python printed above it."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "parley_cli", False)]:
        root.removeHandler(handler)
        handler.close()
    _reporting.verbose, _reporting.log_path, _reporting.tracebacks = verbose, None, 0
    handlers: list[logging.Handler] = []
    try:
        path = home / LOG_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(_LogFile(path, maxBytes=LOG_FILE_BYTES, backupCount=1, delay=True, encoding="utf-8"))
        handlers[0].setFormatter(logging.Formatter("%(asctime)s pid %(process)d %(levelname)s %(name)s: %(message)s"))
        _reporting.log_path = path
    except OSError:  # a home that cannot be written: no file, and the terminal only with --verbose
        pass
    if verbose:
        handlers.append(logging.StreamHandler(sys.stderr))  # the message and its traceback, as Python printed them
    for handler in handlers or [logging.NullHandler()]:
        handler.parley_cli = True
        root.addHandler(handler)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print `error: message` on stderr as one line (the terminal wraps it, never Rich; the message is plain text, not
    markup, so `parley[embedded]` stays whole) and return the Exit to raise. When the command logged a traceback to
    its log file, the line says where it is."""
    err_console.print(Text.assemble(("error:", "bold red"), " ", message + _reporting.hint()), soft_wrap=True)
    return typer.Exit(code)


def check_model_options(option: str, *model_ids: str | None) -> None:
    """Refuse (exit 2, naming `option`) a model id that no request could name: blank, or longer than
    `MAX_MODEL_ID_CHARS` (`core.fields`)."""
    for model_id in model_ids:
        if problem := model_id_problem(model_id):
            raise fail(f"{option}: {problem}", code=2)


def unexpected(exc: Exception) -> typer.Exit:
    """Report an exception no command turned into a message: its traceback to the log file (and the terminal with
    --verbose), then one `error:` line naming it; return the Exit to raise."""
    logging.getLogger("parley.cli").error("%s failed", " ".join(["parley", *sys.argv[1:]]), exc_info=exc)
    return fail(describe_unexpected(exc))


def describe_unexpected(exc: Exception) -> str:
    """One line for an exception no command expected: invalid settings by name, anything else by its type and the
    first line of its message."""
    if isinstance(exc, ValidationError) and exc.title == Settings.__name__:
        return "invalid setting " + "; ".join(
            f"{'.'.join(str(part) for part in error['loc']).upper()}: {error['msg']}"
            for error in exc.errors())
    if isinstance(exc, ConnectionFailure):  # pymongo's own text runs on with the whole topology
        reason = re.split(r" \(configured timeouts|, Timeout: ", str(exc))[0]
        where = "MONGODB_URI" if get_settings().mongodb_uri else "the embedded database"
        return f"the database cannot be reached ({reason}): check {where}"
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


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
    """The model factory for a command that calls `model_ids`. When one of them is the embedded model, it is the one
    PARLEY_LOCAL_BASE_URL names, or the one a `parley serve` runs on this PARLEY_HOME (`running_model`); only when
    neither is there is one started for the block (and stopped after)."""
    settings = get_settings()
    if not any(m.startswith("local:") for m in model_ids):
        yield ModelFactory(settings)
        return
    running = os.environ.get("PARLEY_LOCAL_BASE_URL") or running_model(settings.parley_home)
    if running:
        err_console.print(f"[dim]Using the embedded model at {running}[/]")
        yield ModelFactory(settings, local_base_url=running)
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
