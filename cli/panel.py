"""`parley ask`: put a question to a panel through the run engine, as `POST /v1/chat/completions` does (stored,
billed to the workspace, and listed in History), and print the answer and how each panelist fared."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import typer
from rich.table import Table

from parley.cli.common import (
    CLI_WORKSPACE,
    check_model_options,
    console,
    database_uri,
    fail,
    model_factory,
    with_db,
)
from parley.cli.runs import RunFailed, WireEvent, failure_of, follow_run, principal, run_here
from parley.core.limits import MAX_PANEL_SIZE, MIN_PANEL_SIZE
from parley.core.settings import Settings, get_settings
from parley.graphs.panel.rules import RULES
from parley.services import panel as service
from parley.services.backend import Backend
from parley.services.errors import NotFound, ServiceError
from parley.services.panel import ChatCompletionRequest
from parley.services.progress import plural
from parley.services.routers import (
    COUNCIL_PRESETS,
    PRESET_ID,
    SELF_MOA_PREFIX,
    council_preset,
    load_router,
    preset_router,
    self_moa_router,
)


def _load_router(router_id: str, workspace: str, settings: Settings) -> dict[str, Any]:
    if router_id == PRESET_ID:
        return preset_router(settings)  # without a database
    if router_id in COUNCIL_PRESETS:
        return council_preset(settings, router_id)
    if router_id.startswith(SELF_MOA_PREFIX):
        try:
            return self_moa_router(settings, router_id.removeprefix(SELF_MOA_PREFIX))
        except ServiceError as exc:
            raise fail(str(exc), code=2) from exc
    try:
        return with_db(lambda db: load_router(db, settings, workspace=workspace, router_id=router_id))
    except NotFound as exc:
        raise fail(f"no router '{router_id}' in workspace '{workspace}' (see `GET /v1/routers`)", code=2) from exc


def _panel_table(panelists: list[dict[str, Any]]) -> Table:
    table = Table("model", "result", "tokens", "cost (USD)", "latency (ms)")
    for p in panelists:
        result = "[green]answered[/]" if p["success"] else f"[red]{p['error']}[/]"
        table.add_row(p["model"], result, str(p["tokens"]), f"{p['cost']:.6f}", str(p["latencyMs"]))
    return table


def _decision_line(decision: dict[str, Any]) -> str:
    """How a debate decided, in one line: its rule, who decided, and why the arbitrator did when a rule could not."""
    if decision.get("decidedBy") == "arbitrator":
        how = f"arbitrator {decision.get('arbitrator')}" + (f" ({decision['reason']})" if decision.get("reason") else "")
    elif decision.get("decidedBy") == "none":
        how = "no one decided" + (f" ({decision['reason']})" if decision.get("reason") else ": the answers, labelled")
    else:
        how = f"{decision['decidedBy']} chose {decision.get('winner')}'s answer"
    note = "" if decision.get("independent", True) else "; the decider shares a panelist's family"
    return f"rule {decision['rule']}: {how}{note}"


def _analysis_line(meta: dict[str, Any]) -> str:
    """The disagreement map and adaptive depth's path, in one line."""
    parts = []
    if analysis := meta.get("analysis"):
        parts.append(f"agreement {analysis['agreement']:.2f}: {plural(len(analysis['consensus']), 'shared point')}, "
                     f"{plural(len(analysis['contradictions']), 'contradiction')}, "
                     f"{plural(len(analysis['uniqueInsights']), 'unique insight')}")
    if adaptive := meta.get("adaptive"):
        seats = len(adaptive["firstSeats"]) if adaptive["path"] == "agreed" and "shadow" not in adaptive \
            else adaptive["seats"]
        parts.append(f"adaptive depth {adaptive['path']} ({adaptive['agreement']:.2f} against "
                     f"{adaptive['threshold']:.2f}), {seats} of {adaptive['seats']} seats asked")
    return "; ".join(parts)


def ask(
    question: str = typer.Argument(..., help="What to ask the panel."),
    router: str = typer.Option(PRESET_ID, help="Router id: a preset (`debate`, `quality`, `budget`), one stored in the "
                               "workspace, or "
                               "`self-moa/<provider:model>` (that model sampled for every seat)."),
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
    workspace: str = typer.Option(CLI_WORKSPACE, help="Workspace whose router to use; its credit pays for "
                                                             "priced models."),
    max_tokens: int = typer.Option(None, help="Output cap of each answer."),
    rule: str = typer.Option(None, help=f"How the debate decides: {', '.join(RULES)}; default: the router's. "
                             "A rule asks for a debate."),
    answer_rule: str = typer.Option(None, help="How `--rule vote` reads answers: number, choice, exact or "
                                    "regex:<pattern>; default: the router's, else exact."),
    seed: int = typer.Option(None, help="Seeds the reviewers' reading orders of `--rule rank`."),
    criteria: str = typer.Option(None, help="What the arbitrator (and judges) weigh the answers by."),
    depth: str = typer.Option(None, help="`full` (every panelist at once) or `adaptive` (two first, the rest only "
                              "when they disagree); default: the router's."),
) -> None:
    """Ask a panel of models of distinct families; an arbitrator answers (or, with --panel, all of them do).

    With --allow-same-family (the preset's default on the embedded model) a list short of families
    fills the panel by asking its models again.
    """
    check_model_options("--model", *(model or []))
    check_model_options("--arbitrator", arbitrator)
    settings = get_settings()
    overrides = {"models": model, "arbitrator": arbitrator, "panel_size": panel_size,
                 "allow_same_family": allow_same_family, "system_prompt": system}

    async def run(backend: Backend) -> tuple[dict, dict]:
        record = await service.start_completion(backend, principal(workspace=workspace).caller, body, **overrides)
        completion = await render_answer(follow_run(backend.runs, record["_id"], user=record["user"]))
        return completion, await backend.runs.get(record["_id"])

    with database_uri() as uri:
        # Planned here first for the models it calls (the embedded one is started when one of them is); the run
        # plans it again, as the chat completions route does.
        try:
            if depth not in (None, "full", "adaptive"):
                raise ServiceError(f"--depth must be 'full' or 'adaptive', not {depth!r}")
            plan = service.plan_for_router(_load_router(router, workspace, settings), settings, debate=debate,
                                           panel=panel, rule=rule, answer_rule=answer_rule, criteria=criteria,
                                           depth=depth, **overrides)
        except ServiceError as exc:  # the same refusal as the chat completions route's
            raise fail(str(exc)) from exc
        target = router if router.startswith(SELF_MOA_PREFIX) else f"router/{router}"
        body = ChatCompletionRequest(model=target, messages=[{"role": "user", "content": question}], stream=True,
                                     max_tokens=max_tokens, debate=debate, panel=panel, rule=rule,
                                     answer_rule=answer_rule, seed=seed, criteria=criteria, depth=depth)
        with model_factory(plan.models + plan.arbitrators) as factory:
            try:
                completion, record = run_here(uri, factory, run)
            except ServiceError as exc:
                raise fail(exc.message) from exc
            except RunFailed as exc:
                raise fail(str(exc)) from exc
    meta = completion["_meta"]
    seats = (meta.get("debate") or {}).get("panelists") or (meta.get("panel") or {}).get("models")
    if seats:
        console.print(_panel_table(seats))
    if meta.get("decision"):
        console.print(f"[dim]{_decision_line(meta['decision'])}[/]", highlight=False)
    if meta.get("analysis") or meta.get("adaptive"):
        console.print(f"[dim]{_analysis_line(meta)}[/]", highlight=False)
    usage = record.get("usage") or {}
    mode, used = meta["routerMode"], meta["modelUsed"]  # a debate's: its arbitrator, or the answer its rule chose
    arbitrated = mode == "debate" and meta.get("decision", {}).get("decidedBy", "arbitrator") == "arbitrator"
    who = f"arbitrator {used}, " if arbitrated else "" if mode == "panel" else f"{used}, "
    console.print(f"[dim]{who}{usage.get('totalTokens', 0)} tokens, ${usage.get('costUsd', 0):.6f}; "
                  f"run {record['_id']}[/]", soft_wrap=True)


async def render_answer(events: AsyncIterator[WireEvent]) -> dict[str, Any]:
    """Print a panel run's answer as it streams, and each panelist or candidate that failed; return the
    `chat.completion` of its `done` event.

    Raises:
        RunFailed: the run ended with `error` or `cancelled`, or without `done`.
    """
    async for event, data in events:
        if event == "chunk":
            console.print(data["content"], end="", highlight=False, markup=False, soft_wrap=True)
        elif event == "panelist" and not data["success"]:
            console.print(f"[dim]{data['model']} failed: {data['error']} ({data.get('detail', '')})[/]")
        elif event == "fallback":
            console.print(f"\n[dim]{data['model']} failed: {data['error']} ({data['detail']}); next candidate[/]")
        elif event == "done":
            console.print()
            return data["completion"]
        elif (failure := failure_of(event, data)) is not None:
            raise failure
    raise RunFailed("the panel ended without an answer")


def register(app: typer.Typer) -> None:
    """Add `parley ask` to the command line."""
    app.command("ask")(ask)
