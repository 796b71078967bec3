"""`parley workflow`: check, run and describe designer workflows; a run goes through the run engine, as
`POST /v1/workflows/runs` does (stored, and listed in History)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from parley.cli.common import console, database_uri, err_console, fail, model_factory
from parley.cli.runs import RunFailed, failure_of, follow_run, principal, run_here
from parley.core.settings import get_settings
from parley.designer import (
    WorkflowError,
    WorkflowInputError,
    WorkflowSpec,
    example_files,
    parse_assignments,
    prepare_input,
    validate_workflow,
    workflow_json_schema,
)
from parley.services import workflows as service
from parley.services.backend import Backend
from parley.services.errors import ServiceError

app = typer.Typer(help="Designer workflows: validate, run, schema.", no_args_is_help=True)

FILE_HELP = "A workflow JSON file, or the name of a bundled example (see `parley workflow examples`)."


def _read(file: str) -> Any:
    path = Path(file)
    if not path.exists() and file in example_files():
        path = example_files()[file]
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise fail(f"{file}: no such file (bundled examples: {', '.join(example_files())})", code=2) from None
    except json.JSONDecodeError as exc:
        raise fail(f"{file} is not valid JSON: {exc}", code=2) from None


def _checked(file: str) -> WorkflowSpec:
    try:
        return validate_workflow(_read(file))
    except WorkflowError as exc:
        for issue in exc.issues:
            err_console.print(f"[red]✗[/] {escape(str(issue))}")
        raise fail(f"{file}: {len(exc.issues)} problem(s)", code=1) from None


@app.command("schema")
def schema() -> None:
    """Print the JSON Schema of a workflow document (for editors)."""
    print(json.dumps(workflow_json_schema(), indent=2))


@app.command("validate")
def validate(file: str = typer.Argument(..., help=FILE_HELP)) -> None:
    """Check a workflow without running it; every problem is listed with its node and JSON path."""
    spec = _checked(file)
    console.print(f"[green]✓[/] {escape(spec.name)}: {len(spec.nodes)} nodes, {len(spec.edges)} edges, "
                  f"state keys {', '.join(spec.state) or 'none'}")


@app.command("examples")
def examples() -> None:
    """List the bundled example workflows."""
    for name, path in example_files().items():
        spec = json.loads(path.read_text())
        console.print(f"[bold]{name}[/]  {escape(spec.get('description', ''))}\n  [dim]{path}[/]")


def _show(kind: str, event: dict[str, Any], state: dict[str, Any]) -> None:
    """Print one of a workflow run's events: a node starting, its streamed text, its progress, its end."""
    if kind == "node_start":
        state["streaming"] = False
        console.print(f"[cyan]▶ {escape(event['node'])}[/] [dim]({event['type']})[/]")
    elif kind == "chunk":
        state["streaming"] = True
        console.print(event.get("content", ""), end="", style="dim", highlight=False, markup=False)
    elif kind == "progress":
        console.print(f"  [dim]{escape(event['node'])}: {escape(event['kind'])}[/]")
    elif kind == "node_end":
        if state.pop("streaming", False):
            console.print()
        usage = event["usage"]
        tokens = f", {usage['totalTokens']} tokens" if usage["calls"] else ""
        console.print(f"[green]✓ {escape(event['node'])}[/] → {', '.join(event['keys']) or 'nothing'}"
                      f"[dim]{tokens}[/]")


@app.command("run")
def run(
    file: str = typer.Argument(..., help=FILE_HELP),
    input: list[str] = typer.Option(  # noqa: A002 - the option is --input
        None, "--input", "-i", help="key=value for a declared state key (repeatable); typed by the key's "
                                    "declared type (objects and arrays as JSON)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the final state, as JSON."),
) -> None:
    """Run a workflow, streaming node progress, then print the final state.

    Values not given with --input come from the workflow's sampleInput. The run is stored for user `local` in
    workspace `default`, as one the API started (History lists it).
    """
    spec = _checked(file)
    try:
        values = {**(spec.sample_input or {}), **parse_assignments(spec, input or [])}
        prepare_input(spec, values)  # here, so that each problem is listed on its own line
    except WorkflowInputError as exc:
        for issue in exc.issues:
            err_console.print(f"[red]✗[/] {escape(str(issue))}")
        raise fail("the input does not fit the workflow's state", code=2) from None

    async def go(backend: Backend) -> dict[str, Any]:
        run = await service.start_run(backend, principal(), document=spec.dump(), input=values)
        shown: dict[str, Any] = {}
        async for kind, data in follow_run(backend.runs, run["_id"], user=run["user"]):
            if kind == "done":
                return data
            if (failure := failure_of(kind, data)) is not None:
                raise failure
            if not quiet:
                _show(kind, data, shown)
        raise RunFailed("the workflow run ended without a result")

    with database_uri() as uri, model_factory([get_settings().default_model, *spec.models()]) as factory:
        try:
            done = run_here(uri, factory, go)
        except ServiceError as exc:
            raise fail(exc.message) from exc
        except RunFailed as exc:
            raise fail(str(exc)) from exc
    if quiet:
        print(json.dumps(done["state"], ensure_ascii=False, indent=2, default=str))
        return
    console.rule("final state")
    console.print_json(json.dumps(done["state"], ensure_ascii=False, default=str))
    usage = done["usage"]
    console.print(f"[dim]{usage['calls']} model calls, {usage['totalTokens']} tokens, ${usage['costUsd']:.6f}; "
                  f"run {done['runId']}[/]", soft_wrap=True)
