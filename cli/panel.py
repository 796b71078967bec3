"""`parley ask`: put a question to a panel in-process (no HTTP) and print the answer and how each panelist fared."""

from __future__ import annotations

import asyncio
from typing import Any

import typer
from rich.table import Table

from services.routers import PRESET_ID, preset_router
from store import routers as router_store
from cli.common import console, fail, model_factory, with_db
from core.limits import DEFAULT_MIN_SUCCESSES, DEFAULT_PANEL_SIZE, MAX_PANEL_SIZE, MIN_PANEL_SIZE
from core.settings import get_settings
from graphs.panel import PanelContext, PanelError, graph
from llm.failures import ModelError
from store import routers as router_store


def _load_router(router_id: str, workspace: str) -> dict[str, Any]:
    if router_id == PRESET_ID:
        return preset_router(get_settings())
    found = with_db(lambda db: router_store.get_router(db, workspace=workspace, router_id=router_id))
    if found is None:
        raise fail(f"no router '{router_id}' in workspace '{workspace}' (see `GET /v1/routers`)", code=2)
    return found


def _panel_table(panelists: list[dict[str, Any]]) -> Table:
    table = Table("model", "result", "tokens", "cost (USD)", "latency (ms)")
    for p in panelists:
        result = "[green]answered[/]" if p["success"] else f"[red]{p['error']}[/]"
        table.add_row(p["model"], result, str(p["tokens"]), f"{p['cost']:.6f}", str(p["latencyMs"]))
    return table


def ask(
    question: str = typer.Argument(..., help="What to ask the panel."),
    router: str = typer.Option(PRESET_ID, help="Router id: the `debate` preset or one stored in the workspace."),
    panel: bool = typer.Option(False, "--panel", help="Show every panelist's answer instead of an arbitrated one."),
    model: list[str] = typer.Option(None, "--model", help="Panel model; repeat it to replace the router's list."),
    arbitrator: str = typer.Option(None, help="Arbitrator model; the router's (then the deployment's) when omitted."),
    panel_size: int = typer.Option(None, min=MIN_PANEL_SIZE, max=MAX_PANEL_SIZE,
                                   help=f"Panelists ({MIN_PANEL_SIZE}-{MAX_PANEL_SIZE})."),
    debate: bool = typer.Option(None, "--debate/--no-debate", help="Debate, or ask one model; default: the router's."),
    allow_same_family: bool = typer.Option(
        None, "--allow-same-family/--distinct-families",
        help="Fill seats the families cannot by sampling the models again; default: the router's.",
    ),
    system: str = typer.Option(None, help="System prompt for every panelist."),
    workspace: str = typer.Option("default", help="Workspace whose router to use."),
    max_tokens: int = typer.Option(None, help="Output cap of each answer."),
) -> None:
    """Ask a panel of models of distinct families; an arbitrator answers (or, with --panel, all of them do).

    With --allow-same-family (the preset's default on the embedded model) a list short of families
    fills the panel by asking its models again.
    """
    settings = get_settings()
    config = _load_router(router, workspace)
    models = list(model or config["models"])
    size = panel_size or config.get("panel_size", DEFAULT_PANEL_SIZE)
    arbitrators = [m for m in dict.fromkeys((arbitrator, config.get("arbitrator"), settings.arbitrator_model)) if m]
    debate_on = config.get("debate", False) if debate is None else debate
    if allow_same_family is None:
        # The preset resamples for its own (embedded) list only; a stored router's setting goes with the router.
        allow_same_family = config.get("allow_same_family", False) and not (model and config.get("preset"))
    mode = "panel" if panel else "debate" if debate_on else "single"

    state = {
        "messages": [{"role": "user", "content": question}],
        "models": models,
        "panel_size": size,
        "allow_same_family": allow_same_family,
        "arbitrators": arbitrators,
        "mode": mode,
        "system_prompt": system or config.get("system_prompt"),
        "arbitrator_prompt": config.get("arbitrator_prompt"),
        "max_tokens": max_tokens,
        "min_successes": min(DEFAULT_MIN_SUCCESSES, size),
    }

    async def run(context: PanelContext) -> dict[str, Any]:
        result: dict[str, Any] = {}
        async for kind, data in graph.astream(state, context=context, stream_mode=["custom", "values"]):
            if kind == "values":
                result = data
            elif data.get("event") == "chunk":
                console.print(data["content"], end="", highlight=False, markup=False, soft_wrap=True)
            elif data.get("event") == "panelist" and not data["success"]:
                console.print(f"[dim]{data['model']} failed: {data['error']} ({data.get('detail', '')})[/]")
            elif data.get("event") == "fallback":
                console.print(f"\n[dim]{data['model']} failed: {data['error']} ({data['detail']}); next candidate[/]")
        console.print()
        return result

    with model_factory(models + arbitrators) as factory:
        context = PanelContext(models=factory)
        try:
            result = asyncio.run(run(context))
        except (PanelError, ModelError, ValueError) as exc:
            raise fail(str(exc)) from exc
    if result.get("panelists"):
        console.print(_panel_table(result["panelists"]))
    answered_by = result.get("arbitrator") or result.get("model_used")
    ledger = context.ledger
    who = f"arbitrator {answered_by}, " if mode == "debate" else f"{answered_by}, " if answered_by else ""
    console.print(f"[dim]{who}{ledger.total_tokens} tokens, ${ledger.total_cost:.6f}[/]")


def register(app: typer.Typer) -> None:
    """Add `parley ask` to the command line."""
    app.command("ask")(ask)
