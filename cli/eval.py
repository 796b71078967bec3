"""`parley eval`: measure single answers, self-consistency, debate, the panel (its decision rules, its adaptive
depth), Self-MoA, round table and designer workflows (`workflow:<path>`) on a task, and the duel judge's position
bias, in this process (no HTTP, no database)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from parley import store
from parley.cli.common import check_model_options, console, database_uri, fail, model_factory
from parley.core.limits import ADAPTIVE_FIRST_SEATS, MAX_PANEL_SIZE, MAX_TABLE_SEATS, MIN_PANEL_SIZE
from parley.core.settings import get_settings
from parley.evals.judge import JUDGE_JSON, JUDGE_MD, judge_pairs, load_pairs
from parley.evals.methods import (
    ADAPTIVE_MIN_AGENTS, METHODS, PANEL_METHODS, WORKFLOW_PREFIX, MethodOptions, workflow_spec,
)
from parley.evals.report import EMBEDDED_MODEL_NOTE, PLOT_FILE, RESULTS_JSON, RESULTS_MD, write_plot, write_reports
from parley.evals.runner import MATCHED_METHODS, EvalAborted, Observer, RunSettings, RunSettingsMismatch, run_eval
from parley.graphs.panel.rules import MIN_RANK_ANSWERS
from parley.evals.tasks import TaskError, load_task
from parley.llm.factory import ModelFactory
from parley.llm.failures import ModelError
from parley.store.response_cache import ResponseCache

log = logging.getLogger("parley.cli.eval")

app = typer.Typer(help="Measure whether debate beats simpler methods on your model, at equal compute.",
                  no_args_is_help=True)


T = TypeVar("T")
EVAL_CACHE_SCOPE = "eval"  # the response cache's scope of `parley eval --cache`: every eval on this database


def _comma_list(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _check_methods(methods: list[str], agents: int, match_budget: bool, samples: int | None) -> None:
    unknown = [m for m in methods if m not in METHODS and not m.startswith(WORKFLOW_PREFIX)]
    if not methods or unknown:
        raise fail(f"unknown method(s) {', '.join(unknown) or '(none given)'}: choose from {', '.join(METHODS)}, "
                   f"or {WORKFLOW_PREFIX}<path of a workflow file>", code=2)
    for method in methods:
        if method.startswith(WORKFLOW_PREFIX):
            try:
                workflow_spec(method.removeprefix(WORKFLOW_PREFIX))
            except ValueError as exc:
                raise fail(f"--methods {method}: {exc}", code=2) from exc
    if len(set(methods)) != len(methods):
        raise fail("--methods names a method twice", code=2)
    seated = [m for m in methods if m in PANEL_METHODS and not (match_budget and m in MATCHED_METHODS)]
    if seated and not MIN_PANEL_SIZE <= agents <= MAX_PANEL_SIZE:
        raise fail(f"the panel seats {MIN_PANEL_SIZE}-{MAX_PANEL_SIZE} panelists ({', '.join(seated)}); --agents is "
                   f"{agents}", code=2)
    if "panel:rank" in methods and agents < MIN_RANK_ANSWERS:
        raise fail(f"panel:rank needs at least {MIN_RANK_ANSWERS} panelists (each ranks the others' answers); "
                   f"--agents is {agents}", code=2)
    if "adaptive" in methods and agents < ADAPTIVE_MIN_AGENTS:
        raise fail(f"adaptive asks {ADAPTIVE_FIRST_SEATS} panelists first and the rest only when they disagree: "
                   f"with --agents {agents} there is no rest to skip (it would be the full panel); give --agents "
                   f"{ADAPTIVE_MIN_AGENTS} or more", code=2)
    if "roundtable" in methods and agents > MAX_TABLE_SEATS:
        raise fail(f"the round table seats at most {MAX_TABLE_SEATS} agents; --agents is {agents}", code=2)
    if match_budget:
        missing = [m for m in ("single", "debate") if m not in methods]
        if not any(m in methods for m in MATCHED_METHODS):
            missing.append(" or ".join(MATCHED_METHODS))
        if missing:
            raise fail("--match-budget sizes self-consistency (and self-moa) from the tokens of single and debate: "
                       f"add {', '.join(missing)} to --methods", code=2)
        if samples is not None:
            raise fail("--match-budget chooses self-consistency's k itself: leave out --samples", code=2)


def _check_plotting(no_plot: bool) -> None:
    """Refuse before any item is asked when the plot could not be drawn at the end (matplotlib is the `eval` extra)."""
    if no_plot:
        return
    try:
        import matplotlib  # noqa: F401  (pyplot is imported when the plot is drawn)
    except ImportError as exc:
        raise fail(f"`parley eval run` draws {PLOT_FILE} with matplotlib, which cannot be imported ({exc}): "
                   "`pip install 'parley[eval]'`, or add --no-plot", code=2) from None


@contextmanager
def _model_factory(model_ids: list[str]) -> Iterator[ModelFactory]:
    """A factory that reaches every model of the run, with the embedded model started when one needs it."""
    with model_factory(model_ids) as factory:
        try:
            for model_id in model_ids:
                factory.resolve(model_id)  # no key, no endpoint: say so now rather than once per item
        except ModelError as exc:
            raise fail(str(exc), code=2) from exc
        yield factory


async def _cached(uri: str | None, work: Callable[[ResponseCache | None], Awaitable[T]]) -> T:
    """`work(cache)`: with the response cache of the database at `uri` (scope `eval`), or with none (no `uri`)."""
    if uri is None:
        return await work(None)
    client, db = store.connect(uri, get_settings().mongodb_db)
    try:
        await store.ensure_indexes(db)
        return await work(ResponseCache(db, scope=EVAL_CACHE_SCOPE))
    finally:
        await client.close()


def _run(work: Coroutine[Any, Any, T], out: Path) -> T:
    """Run a resumable evaluation, turning each way it can stop into a clear message and exit code."""
    kept = f"What finished is kept in {out}; run the same command again to go on."
    try:
        return asyncio.run(work)
    except RunSettingsMismatch as exc:
        raise fail(str(exc), code=2) from exc
    except EvalAborted as exc:
        raise fail(f"{exc}. {kept}") from exc
    except KeyboardInterrupt:
        raise fail(f"interrupted. {kept}", code=130) from None


class ProgressBars(Observer):
    """One progress bar per method: items done, accuracy so far and time left."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(method_started=self.started, item_finished=self.finished, item_failed=self.failed,
                         samples_matched=self.matched)
        self.progress = progress
        self.bars: dict[str, Any] = {}
        self.scores: dict[str, list[bool]] = {}
        self.failures: list[str] = []

    def _accuracy(self, method: str) -> str:
        scores = self.scores[method]
        return f"{sum(scores) / len(scores):.2f}" if scores else "–"

    def started(self, method: str, total: int, done: list[dict[str, Any]]) -> None:
        self.scores[method] = [bool(r["correct"]) for r in done]
        self.bars[method] = self.progress.add_task(method, total=total, completed=len(done),
                                                   accuracy=self._accuracy(method))

    def finished(self, method: str, record: dict[str, Any]) -> None:
        self.scores[method].append(bool(record["correct"]))
        self.progress.update(self.bars[method], advance=1, accuracy=self._accuracy(method))

    def failed(self, method: str, item_id: str, error: str) -> None:
        self.failures.append(f"{method} / {item_id}: {error}")
        self.progress.console.print(f"[yellow]{escape(method)} / {escape(item_id)} failed:[/] {escape(error)}")

    def matched(self, method: str, k: int, debate_tokens: float, sample_tokens: float) -> None:
        self.progress.console.print(
            f"{method} gets k={k}: debate {debate_tokens:.0f} tokens/item ÷ {sample_tokens:.0f} a sample.")


def _results_table(doc: dict[str, Any]) -> Table:
    table = Table("method", "n", "accuracy", "95% CI", "tokens/item", "cost/item", "calls/item", "s/item",
                  title=f"{doc['task']} · {doc['model']}")
    for m in doc["methods"]:
        accuracy = "—" if m["accuracy"] is None else f"{m['accuracy']:.3f}"
        interval = "—" if m["ci_low"] is None else f"[{m['ci_low']:.3f}, {m['ci_high']:.3f}]"
        table.add_row(m["label"], str(m["n"]), accuracy, interval, f"{m['tokens_per_item']:.0f}",
                      f"${m['cost_per_item']:.6f}", f"{m['calls_per_item']:.1f}", f"{m['seconds_per_item']:.1f}")
    return table


def _adaptive_summary(doc: dict[str, Any]) -> str | None:
    """One line on adaptive depth against the full panel (results.md's section), when both ran."""
    versus = doc.get("adaptive_vs_panel")
    if not versus or not versus["n"]:
        return None
    share = "" if versus["tokens_saved_pct"] is None else f" ({versus['tokens_saved_pct']:.1f}%)"
    return (f"Adaptive against the full panel on {versus['n']} items: {versus['tokens_saved_per_item']:.0f} "
            f"tokens/item saved{share}; accuracy adaptive − panel {versus['accuracy_difference']:+.3f} "
            f"[{versus['ci_low']:+.3f}, {versus['ci_high']:+.3f}]; {versus['paths']['agreed']} agreed, "
            f"{versus['paths']['escalated']} escalated.")


def _plot(doc: dict[str, Any], path: Path) -> bool:
    """Draw the plot; False (its traceback logged) when it cannot be, since the results are written already."""
    try:
        write_plot(doc, path)
    except Exception:  # matplotlib fails in many ways (a font, a backend, the disk): none may lose the table
        log.exception("the plot %s could not be drawn", path)
        return False
    return True


@app.command("run")
def run(
    task: str = typer.Option(..., "--task", help="arithmetic, gsm8k, or the path of a JSONL of {question, answer}."),
    methods: str = typer.Option(..., "--methods", help=f"Comma list of: {', '.join(METHODS)}, or "
                                f"{WORKFLOW_PREFIX}<path> (a designer workflow reading `question`, writing `answer`)."),
    out: Path = typer.Option(..., "--out", help="Folder for results (and for resuming an interrupted run)."),
    n: int = typer.Option(20, "--n", help="Items to ask (the first n in the seed's order)."),
    seed: int = typer.Option(0, "--seed", help="Seeds the arithmetic problems, the item order and the bootstrap."),
    model: str = typer.Option(None, "--model", help="Model id (`provider:model`); the default model when omitted."),
    models: str = typer.Option(None, "--models",
                               help="Comma list of models dealt to debate agents, panelists and round-table seats."),
    answer_rule: str = typer.Option(None, "--answer-rule",
                                    help="For a JSONL task: number, choice, exact or regex:<pattern>."),
    agents: int = typer.Option(3, "--agents", min=1, help="Debate agents, panelists and round-table seats (k)."),
    rounds: int = typer.Option(1, "--rounds", min=0, help="Debate rounds after the first answers (r)."),
    samples: int = typer.Option(None, "--samples", min=1,
                                help="Self-consistency's k; default agents × (rounds + 1), the debate's call count."),
    match_budget: bool = typer.Option(False, "--match-budget",
                                      help="Pick the k of self-consistency and self-moa so their tokens per item "
                                      "match the debate's."),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0,
                                      help="Sampling temperature of the sampled methods."),
    max_tokens: int = typer.Option(512, "--max-tokens", min=16, help="Output cap of every call."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Items asked at once."),
    no_plot: bool = typer.Option(False, "--no-plot", help=f"Write no {PLOT_FILE} (and need no matplotlib)."),
    cache: bool = typer.Option(False, "--cache",
                               help="Answer calls at temperature 0 that an earlier run made from the response cache "
                               "in the database (free; kept RESPONSE_CACHE_TTL_SECONDS), and keep new ones there."),
) -> None:
    """Run METHODS over a task and write results.json, results.md and accuracy_vs_tokens.png under --out."""
    method_list = _comma_list(methods)
    _check_methods(method_list, agents, match_budget, samples)
    _check_plotting(no_plot)
    try:
        loaded = load_task(task, n=n, seed=seed, rule=answer_rule)
    except TaskError as exc:
        raise fail(str(exc), code=2) from exc
    check_model_options("--model", model)
    model_id = model or get_settings().default_model
    agent_models = _comma_list(models)
    check_model_options("--models", *agent_models)
    options = MethodOptions(agents=agents, rounds=rounds, samples=samples or agents * (rounds + 1),
                            temperature=temperature, max_tokens=max_tokens, models=agent_models)
    settings = RunSettings(task=loaded.name, answer_rule=loaded.rule.name, n=n, seed=seed, methods=method_list,
                           model=model_id, options=options, match_budget=match_budget,
                           item_ids=[item.id for item in loaded.items])
    # A workflow's nodes may name models of their own: the factory must reach them too.
    workflow_models = [m for method in method_list if method.startswith(WORKFLOW_PREFIX)
                       for m in workflow_spec(method.removeprefix(WORKFLOW_PREFIX)).models()]
    run_models = list(dict.fromkeys([model_id, *agent_models, *workflow_models]))
    embedded = any(m.startswith("local:") for m in run_models)
    if embedded:
        console.print(f"[bold yellow]Note:[/] {EMBEDDED_MODEL_NOTE}")

    with _model_factory(run_models) as factory:
        columns = [TextColumn("{task.description:<16}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("accuracy {task.fields[accuracy]}"), TimeRemainingColumn()]
        with Progress(*columns, console=console) as progress:
            bars = ProgressBars(progress)
            with database_uri() if cache else nullcontext() as uri:
                records = _run(_cached(uri, lambda response_cache: run_eval(
                    loaded, settings, out, factory=factory, concurrency=concurrency, observer=bars,
                    cache=response_cache)), out)
    doc = write_reports(settings, records, out, plot=False)
    console.print(_results_table(doc))
    if summary := _adaptive_summary(doc):
        console.print(escape(summary))
    if embedded:
        console.print(f"[bold yellow]Note:[/] {EMBEDDED_MODEL_NOTE}")
    plotted = not no_plot and _plot(doc, out / PLOT_FILE)
    console.print(f"Wrote {out / RESULTS_JSON}, {out / RESULTS_MD}" + (f" and {out / PLOT_FILE}." if plotted else "."))
    failed = None
    if not no_plot and not plotted:
        failed = fail(f"{PLOT_FILE} could not be drawn; the results above are in {out / RESULTS_JSON} and "
                      f"{out / RESULTS_MD}")
    if bars.failures:
        failed = fail(f"{len(bars.failures)} item(s) failed and are not in the results; run the same command "
                      "again to retry them.")
    if failed:
        raise failed


@app.command("judge")
def judge(
    pairs: Path = typer.Option(..., "--pairs",
                               help="JSONL of {question, answer_a, answer_b, label?} (label A, B or tie)."),
    out: Path = typer.Option(..., "--out", help="Folder for judge.json, judge.md and the resumable judgements."),
    model: str = typer.Option(None, "--model", help="Judge model (`provider:model`); the default model when omitted."),
    seed: int = typer.Option(0, "--seed", help="Seeds the bootstrap intervals."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Pairs judged at once."),
) -> None:
    """Measure the duel judge's position bias (verdict flips when the answers swap) and agreement with humans."""
    try:
        loaded = load_pairs(pairs)
    except TaskError as exc:
        raise fail(str(exc), code=2) from exc
    check_model_options("--model", model)
    model_id = model or get_settings().default_model
    if model_id.startswith("local:"):
        console.print(f"[bold yellow]Note:[/] {EMBEDDED_MODEL_NOTE}")
    failures: list[str] = []
    with _model_factory([model_id]) as factory:
        with Progress(TextColumn("judging"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=console) as progress:
            bar = progress.add_task("judge", total=None)

            def started(total: int, done: int) -> None:
                progress.update(bar, total=total, completed=done)

            def failed(pair_id: str, error: str) -> None:
                failures.append(pair_id)
                progress.console.print(f"[yellow]{escape(pair_id)} failed:[/] {escape(error)}")

            doc = _run(judge_pairs(loaded, str(pairs), out, factory=factory, model=model_id, seed=seed,
                                   concurrency=concurrency, started=started,
                                   finished=lambda record: progress.update(bar, advance=1), failed=failed), out)
    table = Table("measure", "n", "rate", "95% CI", title=f"Judge bias · {model_id}")
    for name, key in (("position flip rate", "position_flip"), ("first-shown answer wins", "first_position_wins"),
                      ("agreement with humans", "human_agreement")):
        value = doc[key]
        rate = "—" if value["rate"] is None else f"{value['rate']:.3f}"
        interval = "—" if value["ci_low"] is None else f"[{value['ci_low']:.3f}, {value['ci_high']:.3f}]"
        table.add_row(name, str(value["n"]), rate, interval)
    console.print(table)
    console.print(f"Wrote {out / JUDGE_JSON} and {out / JUDGE_MD}.")
    if failures:
        raise fail(f"{len(failures)} pair(s) failed and are not counted; run the same command again to retry them.")
