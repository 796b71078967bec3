"""`parley`: serve the API, run the embedded model, manage keys and workspaces, and run debates."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
import threading

import typer
import uvicorn
from langchain_core.messages import HumanMessage
from openai import OpenAIError
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from parley.cli import agents as agents_cli
from parley.cli import duel as duel_cli
from parley.cli import eval as eval_cli
from parley.cli import mcp as mcp_cli
from parley.cli import panel as panel_cli
from parley.cli import roundtable as roundtable_cli
from parley.cli import workflow as workflow_cli
from parley.cli.common import (
    CLI_USER,
    CLI_WORKSPACE,
    MAX_COST,
    MAX_SECONDS,
    MAX_TOKENS,
    budget_fields,
    check_model_options,
    console,
    describe_budget,
    describe_unexpected,
    fail,
    model_factory,
    report_to,
    unexpected,
    with_db,
)
from parley.cli.worker import SERVE_PID
from parley.core.embedded import EmbeddedServerError, EmbeddedServices, forget_model, model_server, record_model
from parley.core.settings import get_settings
from parley.llm.budget import BudgetLimits, InvalidBudget
from parley.llm.factory import ModelFactory
from parley.llm.failures import ModelError, failure_message
from parley.llm.usage import UsageLedger
from parley.store import keys as key_store
from parley.store import workspaces as ws_store

class ParleyGroup(TyperGroup):
    """The `parley` command: an exception no command turned into a message is still one `error:` line (its traceback
    in the log file), never Typer's page of traceback with every local variable."""

    def main(self, *args, **kwargs):
        if not kwargs.get("standalone_mode", True):
            return super().main(*args, **kwargs)
        try:
            return super().main(*args, **kwargs)  # exits itself for usage errors, `fail`'s Exit, Ctrl-C
        except Exception as exc:
            unexpected(exc)
            sys.exit(1)


app = typer.Typer(help="Parley: multi-agent LLM debates.", cls=ParleyGroup, no_args_is_help=True,
                  add_completion=False, pretty_exceptions_enable=False)
model_app = typer.Typer(help="The model layer and the embedded model.", no_args_is_help=True)
keys_app = typer.Typer(help="API keys.", no_args_is_help=True)
workspaces_app = typer.Typer(help="Workspace credit, allowance and default budget.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(keys_app, name="keys")
app.add_typer(workspaces_app, name="workspaces")
app.add_typer(workflow_cli.app, name="workflow")
app.add_typer(agents_cli.app, name="agents")
app.add_typer(eval_cli.app, name="eval")
duel_cli.register(app)
panel_cli.register(app)
roundtable_cli.register(app)
mcp_cli.register(app)


# Servers whose terminal is their log: their records stay on stderr, as uvicorn's do.
SERVERS = ("serve", "mcp")


@app.callback()
def main(
    ctx: typer.Context,
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Show warnings and tracebacks on the terminal too; they always go to "
        "PARLEY_HOME/logs/cli.log, and a failure is one `error:` line."),
) -> None:
    """Parley: multi-agent LLM debates."""
    try:
        settings = get_settings()
    except ValidationError as exc:
        raise fail(describe_unexpected(exc), code=2) from None
    if ctx.invoked_subcommand not in SERVERS:
        report_to(settings.parley_home, verbose=verbose)


def _first_local_key(services: EmbeddedServices) -> tuple[str, float] | None:
    """On an empty embedded database, create an all-scopes key so a new user can call the API at once, and give its
    workspace the starting credit (`PARLEY_FIRST_CREDIT_USD`) so that a priced model answers too; return the key and
    that credit (None when the database already had keys, or is not the embedded one)."""
    if not services.database:
        return None
    credit = get_settings().parley_first_credit_usd

    async def create(db) -> tuple[str, float] | None:
        if await db.api_keys.count_documents({}, limit=1):
            return None
        _, plaintext = await key_store.create_key(
            db, user=CLI_USER, workspace=CLI_WORKSPACE,
            scopes=["admin", "chat", "conversations", "debate", "workflows"],
        )
        if credit > 0:
            await ws_store.add_credit(db, CLI_WORKSPACE, credit)
        return plaintext, credit

    from parley import store

    async def run() -> tuple[str, float] | None:
        client, db = store.connect(services.database.url, get_settings().mongodb_db)
        try:
            await store.ensure_indexes(db)
            return await create(db)
        finally:
            await client.close()

    return asyncio.run(run())


@app.command()
def serve(
    host: str | None = typer.Option(None, help="Interface to listen on (default: PARLEY_HOST, 127.0.0.1)."),
    port: int | None = typer.Option(None, help="Port to listen on (default: PARLEY_PORT, 8000)."),
    workers: int = typer.Option(
        1, min=1, help="Worker processes. Runs live in the database, so any worker serves any run and resumes "
        "the runs of a worker that dies."),
) -> None:
    """Serve the Parley API, starting the embedded model and database when none is configured."""
    settings = get_settings()
    host, port = host or settings.parley_host, port or settings.parley_port
    try:
        services = EmbeddedServices.start(settings, report=lambda msg: console.print(f"[cyan]•[/] {msg}"))
    except EmbeddedServerError as exc:
        raise fail(str(exc)) from exc
    from parley.api.main import UVICORN_OPTIONS, create_app

    metrics_dir = None  # one made here for the workers' metrics, removed at the end
    try:
        first = _first_local_key(services)
        key = first[0] if first else None
        url = f"http://{host}:{port}"
        console.print(f"\n[bold green]Parley[/] on {url}  (Studio: {url}/, API docs: {url}/docs, "
                      f"model: {settings.default_model})")
        if first:
            credit = (f"${first[1]:.2f} of credit for priced models (PARLEY_FIRST_CREDIT_USD)" if first[1]
                      else "no credit: add some with `parley workspaces credit default --add USD`")
            console.print(f"A first key for this local install (user {CLI_USER}, workspace {CLI_WORKSPACE}, all "
                          f"scopes; {credit}), shown once:\n  [bold]{key}[/]", soft_wrap=True)
        shown = key or "$PARLEY_KEY"
        console.print("Try it:")
        console.print(f"  curl {url}/healthz")
        console.print(
            f"  curl -N {url}/api/debate -H 'Authorization: Bearer {shown}' -H 'Content-Type: application/json' "
            "-d '{\"topic\": \"Should remote work be the default?\", \"userProfile\": {\"name\": \"Ada\"}}'\n",
            soft_wrap=True,
        )
        # uvicorn re-raises SIGTERM after its graceful shutdown; turn it into an exception so the
        # embedded servers below are stopped rather than orphaned.
        signal.signal(signal.SIGTERM, _raise_system_exit)
        if workers == 1:
            uvicorn.run(create_app(settings, services=services), host=host, port=port, log_level="info",
                        **UVICORN_OPTIONS)
            return
        # Each worker process builds its own app; the embedded servers started here are shared through the
        # environment it inherits.
        os.environ["MONGODB_URI"] = services.mongodb_uri(settings)
        if services.local_model_url:
            os.environ["PARLEY_LOCAL_BASE_URL"] = services.local_model_url
        if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # so that /metrics sums every worker's counts
            metrics_dir = tempfile.mkdtemp(prefix="parley-metrics-")
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        os.environ[SERVE_PID] = str(os.getpid())
        # A worker has `PARLEY_WORKER_TIMEOUT` seconds to start serving (and to answer each health ping): uvicorn's 5 s
        # killed workers still importing on a loaded machine, again and again.
        uvicorn.run("parley.cli.worker:worker_app", factory=True, host=host, port=port, workers=workers,
                    log_level="info", timeout_worker_healthcheck=int(settings.parley_worker_timeout), **UVICORN_OPTIONS)
    finally:
        services.stop()
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def _raise_system_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@model_app.command("serve")
def model_serve(port: int = typer.Option(0, help="Port; 0 picks a free one.")) -> None:
    """Run the embedded model server alone (OpenAI-compatible, on 127.0.0.1) until Ctrl-C; the other commands on this
    PARLEY_HOME use it meanwhile."""
    settings = get_settings()
    try:
        server = model_server(settings.parley_home, port or settings.parley_model_port).start(timeout=120)
    except EmbeddedServerError as exc:
        raise fail(str(exc)) from exc
    record_model(settings.parley_home, server)  # the other commands on this home use it
    console.print(f"Embedded model at [bold]{server.url}[/] (model `smollm2`); log: {server.log_path}. Ctrl-C stops it.")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.is_set() and server.running:
            stop.wait(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        forget_model(settings.parley_home, server)
        server.stop()


@model_app.command("chat")
def model_chat(
    prompt: str = typer.Argument(..., help="What to ask."),
    model: str = typer.Option(None, help="Model id (`provider:model`); the default model when omitted."),
    max_tokens: int = typer.Option(200, help="Output cap."),
    temperature: float = typer.Option(0.7, help="Sampling temperature."),
) -> None:
    """Stream one completion through the model layer (starting the embedded model if it is needed)."""
    check_model_options("--model", model)
    settings = get_settings()
    model_id = model or settings.default_model
    ledger = UsageLedger()

    async def run(factory: ModelFactory) -> None:
        chat = factory.chat(model_id, temperature=temperature, max_tokens=max_tokens, ledger=ledger)
        async for chunk in chat.astream([HumanMessage(prompt)]):
            console.print(chunk.content, end="", highlight=False, markup=False)
        console.print()

    with model_factory([model_id]) as factory:
        try:
            asyncio.run(run(factory))
        except ModelError as exc:
            raise fail(failure_message(exc)) from exc
        except OpenAIError as exc:
            endpoint = factory.resolve(model_id).base_url or "OpenAI"
            raise fail(f"the model call to {model_id} at {endpoint} failed: {failure_message(exc)}") from exc
    rec = ledger.records[-1] if ledger.records else None
    if rec:
        console.print(
            f"[dim]{model_id}: {rec.input_tokens} in"
            f"{f' ({rec.cached_tokens} cached)' if rec.cached_tokens else ''}, {rec.output_tokens} out"
            f"{f' ({rec.reasoning_tokens} reasoning)' if rec.reasoning_tokens else ''}, ${rec.cost:.6f}"
            f"{'' if rec.priced else ' (no price known)'}{' (estimated)' if rec.estimated else ''}[/]"
        )


@keys_app.command("create")
def keys_create(
    user: str = typer.Option(..., help="User the key acts as."),
    workspace: str = typer.Option(..., help="Workspace the key belongs to."),
    scopes: str = typer.Option(..., help="Comma list: " + ", ".join(key_store.SCOPES)),
) -> None:
    """Create an API key; the plaintext is printed once, as the last line."""
    wanted = [s.strip() for s in scopes.split(",") if s.strip()]

    async def create(db):
        return await key_store.create_key(db, user=user, workspace=workspace, scopes=wanted)

    try:
        record, plaintext = with_db(create)
    except ValueError as exc:
        raise fail(str(exc), code=2) from exc
    console.print(f"Created {record['_id']} for {user} in {workspace} with scopes {', '.join(record['scopes'])}.")
    print(plaintext)


def _when(moment) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else ""


@keys_app.command("list")
def keys_list(
    workspace: str = typer.Option(None, help="Only this workspace's keys."),
    user: str = typer.Option(None, help="Only this user's keys."),
) -> None:
    """List API keys, oldest first, revoked ones too: id, user, workspace, scopes, created, last used (to the
    minute) and status. Never a key itself: it was shown once, when it was created."""
    keys = with_db(lambda db: key_store.list_keys(db, workspace=workspace, user=user))
    if not keys:
        console.print("No keys" + (" match." if workspace or user else " yet. Create one with `parley keys create`."))
        return
    table = Table("id", "user", "workspace", "scopes", "created", "last used", "status", title="API keys")
    for key in keys:
        status = f"revoked {_when(key.get('revokedAt'))}".strip() if key.get("revoked") else "active"
        table.add_row(key["_id"], escape(key["user"]), escape(key["workspace"]), ", ".join(key.get("scopes", [])),
                      _when(key.get("createdAt")), _when(key.get("lastUsedAt")) or "never", status)
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(key_id: str = typer.Argument(..., help="The key's id (`key_…`, from `parley keys list`).")) -> None:
    """Revoke a key: every request with it is refused (401) from now on, by every Parley process."""
    record, revoked_now = with_db(lambda db: key_store.revoke_key(db, key_id=key_id))
    if record is None:
        raise fail(f"no key {key_id} (see `parley keys list`)", code=2)
    owner = f"{escape(record['user'])} in {escape(record['workspace'])}"
    if revoked_now:
        console.print(f"Revoked {key_id} ({owner}).")
    else:
        console.print(f"{key_id} ({owner}) was already revoked, {_when(record.get('revokedAt'))}.")


@workspaces_app.command("credit")
def workspaces_credit(
    workspace: str = typer.Argument(..., help="Workspace id."),
    add: float = typer.Option(..., "--add", help="USD to add to the credit balance."),
) -> None:
    """Add USD credit to a workspace (panel debates reserve and settle against it)."""
    try:
        balance = with_db(lambda db: ws_store.add_credit(db, workspace, add))
    except ValueError as exc:
        raise fail(str(exc), code=2) from exc
    console.print(f"{workspace}: credit balance ${balance:.6f}")


@workspaces_app.command("allowance")
def workspaces_allowance(
    workspace: str = typer.Argument(..., help="Workspace id."),
    set_: int = typer.Option(..., "--set", help="Token allowance (round tables consume it)."),
) -> None:
    """Set a workspace's token allowance."""
    try:
        tokens = with_db(lambda db: ws_store.set_allowance(db, workspace, set_))
    except ValueError as exc:
        raise fail(str(exc), code=2) from exc
    console.print(f"{workspace}: allowance {tokens} tokens")


@workspaces_app.command("budget")
def workspaces_budget(
    workspace: str = typer.Argument(..., help="Workspace id."),
    max_tokens: int = MAX_TOKENS,
    max_cost: float = MAX_COST,
    max_seconds: float = MAX_SECONDS,
    clear: bool = typer.Option(False, "--clear", help="Remove the default budget."),
) -> None:
    """Set the default budget of a workspace's runs: the limits a run gets when its request sets none of its own
    (it then ends with its synthesis before passing them; docs/steering.md)."""
    given = budget_fields(max_tokens, max_cost, max_seconds)
    if clear == bool(given):
        raise fail("give --max-tokens, --max-cost and/or --max-seconds, or --clear", code=2)
    try:
        limits = BudgetLimits.parse(given)
    except InvalidBudget as exc:
        raise fail(str(exc), code=2) from exc
    budget = with_db(lambda db: ws_store.set_budget(db, workspace, limits.dump() or None))
    console.print(f"{workspace}: default budget {describe_budget(budget)}")


@workspaces_app.command("show")
def workspaces_show(workspace: str = typer.Argument(..., help="Workspace id.")) -> None:
    """Show a workspace's credit, allowance and default budget."""
    ws = with_db(lambda db: ws_store.get_workspace(db, workspace))
    table = Table("workspace", "credit (USD)", "allowance (tokens)", "default budget")
    allowance = ws.get("allowanceTokens")
    table.add_row(workspace, f"{ws.get('creditUsd', 0.0):.6f}", "unlimited" if allowance is None else str(allowance),
                  describe_budget(ws.get("budget")))
    console.print(table)


if __name__ == "__main__":
    app()
