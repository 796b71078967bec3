"""Run methods over a task's items, resumably: every finished item is appended to `items.jsonl` at once.

`DIR/run.json` holds the run's settings; a restart with the same `DIR` and the same settings skips the
items already recorded (nothing is asked twice), and a restart with other settings is refused. Each
item runs in its own `RunContext`, so its tokens, cost and calls are read from that run's
`UsageLedger`; its seconds come from a monotonic clock.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import openai
from langchain_core.caches import BaseCache

from parley.core.limits import MAX_PANEL_SIZE, MIN_PANEL_SIZE
from parley.evals.methods import MethodOptions, method_of
from parley.evals.scoring import matched_samples, mean
from parley.evals.tasks import Item, Task
from parley.graphs.panel.steps import PanelError
from parley.llm.factory import ModelFactory
from parley.llm.failures import ModelError, describe_failure
from parley.nodes.context import RunContext

__all__ = ["EvalAborted", "ItemStore", "RunSettings", "RunSettingsMismatch", "run_eval"]

SETTINGS_FILE, ITEMS_FILE = "run.json", "items.jsonl"
# A run stops after this many items in a row failed: the endpoint is down or refuses every request.
MAX_FAILURES_IN_A_ROW = 5
# Responses are kept in items.jsonl for inspection, up to this many characters.
RESPONSE_CHARS = 4000

# What a model failure looks like once retries are spent; anything else is a bug and stops the run.
# TimeoutError covers langchain-openai's own stream timeout (no chunk for a while, e.g. queued on a busy
# local server), which is not an openai error.
MODEL_FAILURES = (openai.OpenAIError, ModelError, PanelError, TimeoutError)


class RunSettingsMismatch(ValueError):
    """`--out` holds a run with other settings; resuming it would mix two experiments."""


class EvalAborted(RuntimeError):
    """Too many items in a row failed, so the run stopped; what finished is kept."""


@dataclass(frozen=True)
class RunSettings:
    """Everything that decides what a run asks and how it is scored (not how fast it goes)."""

    task: str
    answer_rule: str
    n: int
    seed: int
    methods: list[str]
    model: str
    options: MethodOptions
    match_budget: bool
    item_ids: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def differences(mine: dict[str, Any], stored: dict[str, Any]) -> list[str]:
    """The settings that differ from a stored run's, each as `name: here vs stored`."""
    out = []
    for key in sorted(set(mine) | set(stored)):
        if mine.get(key) != stored.get(key):
            if key == "item_ids":
                out.append("the items differ")
            else:
                out.append(f"{key}: {mine.get(key)!r} here, {stored.get(key)!r} in the stored run")
    return out


# The methods whose k `--match-budget` chooses from the tokens of `single` and `debate`.
MATCHED_METHODS = ("self-consistency", "self-moa")


def ordered_methods(methods: list[str], match_budget: bool) -> list[str]:
    """Run order: as given, except that budget-matched methods wait for single and debate."""
    if not match_budget:
        return list(methods)
    return [m for m in methods if m not in MATCHED_METHODS] + [m for m in methods if m in MATCHED_METHODS]


class ItemStore:
    """A JSONL file under the run's folder: one line per finished item, each written durably."""

    def __init__(self, folder: Path, name: str = ITEMS_FILE) -> None:
        self.path = folder / name

    def load(self) -> list[dict[str, Any]]:
        """The recorded items; a last line cut short by an interruption is dropped from the file too."""
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        whole = data[: data.rfind(b"\n") + 1]
        if len(whole) != len(data):
            with self.path.open("r+b") as handle:  # appending after a torn line would glue two records
                handle.truncate(len(whole))
        return [json.loads(line) for line in whole.decode("utf-8").splitlines() if line.strip()]

    def append(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def prepare_folder(folder: Path, settings: dict[str, Any], name: str = SETTINGS_FILE) -> None:
    """Create `folder` with the run's settings, or check that the run stored there has the same ones."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if path.exists():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise RunSettingsMismatch(f"{path} is not valid JSON ({exc.msg}); use another --out") from exc
        found = differences(settings, stored)
        if found:
            raise RunSettingsMismatch(
                f"{folder} holds a run with other settings ({'; '.join(found)}). "
                "Resume it with the same settings, or choose another --out.")
        return
    path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")


async def run_jobs(
    jobs: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]],
    *,
    store: ItemStore,
    concurrency: int,
    finished: Callable[[dict[str, Any]], None],
    failed: Callable[[str, str], None],
) -> None:
    """Run `jobs` (item id, job), at most `concurrency` at a time, appending each record to `store` once made.

    A job whose model calls fail is reported to `failed` and left unrecorded, so a restart retries it;
    `MAX_FAILURES_IN_A_ROW` failures in a row raise `EvalAborted` and cancel the jobs still running.
    """
    if concurrency < 1:
        raise ValueError(f"--concurrency must be at least 1 (got {concurrency})")
    semaphore = asyncio.Semaphore(concurrency)
    failures_in_a_row = 0
    stopping = False  # once the run is stopping (an abort, Ctrl-C), no waiting job may start

    async def run(item_id: str, job: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        nonlocal failures_in_a_row, stopping
        async with semaphore:
            if stopping:
                return
            try:
                try:
                    record = await job()
                except MODEL_FAILURES as exc:
                    failures_in_a_row += 1
                    failed(item_id, describe_failure(exc))
                    if failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
                        raise EvalAborted(f"{failures_in_a_row} items in a row failed; the last: "
                                          f"{describe_failure(exc)}") from exc
                    return
                failures_in_a_row = 0
                store.append(record)
                finished(record)
            except BaseException:
                stopping = True
                raise

    try:
        async with asyncio.TaskGroup() as group:  # a failure that stops the run cancels the rest
            for item_id, job in jobs:
                group.create_task(run(item_id, job))
    except BaseExceptionGroup as group_error:
        raise group_error.exceptions[0] from None  # the failure that stopped the run, not its wrapper


@dataclass
class Observer:
    """What the runner reports while it works; the CLI draws its progress bars from these calls."""

    method_started: Callable[[str, int, list[dict[str, Any]]], None] = lambda method, total, done: None
    item_finished: Callable[[str, dict[str, Any]], None] = lambda method, record: None
    item_failed: Callable[[str, str, str], None] = lambda method, item_id, error: None
    samples_matched: Callable[[str, int, float, float], None] = lambda method, k, debate_tokens, sample_tokens: None


async def run_item(task: Task, item: Item, method: str, options: MethodOptions, factory: ModelFactory,
                   model: str, cache: BaseCache | None = None) -> dict[str, Any]:
    """Ask one item with one method; the record written to items.jsonl. With a response `cache`, its calls at
    temperature 0 are answered from it when an earlier run made them (`parley eval --cache`)."""
    ctx = RunContext(models=factory, model=model, response_cache=cache)
    started = time.monotonic()
    attempt = await method_of(method)(task.prompt(item), task.rule, ctx, options)
    seconds = time.monotonic() - started
    ledger = ctx.ledger
    first = attempt.first_vote
    depth = attempt.adaptive
    return {
        "method": method,
        "item": item.id,
        "gold": task.rule.canonical_gold(item.answer),
        "prediction": attempt.prediction,
        "correct": task.rule.is_correct(attempt.prediction, item.answer),
        "votes": attempt.votes,
        "tied": attempt.tied,
        "tokens": ledger.total_tokens,
        "input_tokens": ledger.input_tokens,
        "cost": ledger.total_cost,
        # Parts of the above: prompt tokens read from the provider's cache, output spent reasoning, and their cost.
        "cached_tokens": ledger.cached_tokens,
        "reasoning_tokens": ledger.reasoning_tokens,
        "cached_cost": sum(r.cached_cost for r in ledger.records),
        "reasoning_cost": sum(r.reasoning_cost for r in ledger.records),
        "calls": len(ledger.records),
        "seconds": round(seconds, 3),
        "priced": all(r.priced for r in ledger.records),
        "estimated_tokens": any(r.estimated for r in ledger.records),
        "samples": {"self-consistency": options.samples, "self-moa": options.agents}.get(method),
        # The round-0 vote (debate, roundtable): the majority of the first answers, before any debate round.
        "first_vote": first["answer"] if first else None,
        "first_vote_correct": task.rule.is_correct(first["answer"], item.answer) if first else None,
        # Adaptive depth (`adaptive`): the path the panel took, and the first seats' agreement that chose it.
        "adaptive_path": depth["path"] if depth else None,
        "agreement": round(depth["agreement"], 4) if depth else None,
        "response": attempt.response[:RESPONSE_CHARS],
    }


async def run_eval(
    task: Task,
    settings: RunSettings,
    folder: Path,
    *,
    factory: ModelFactory,
    concurrency: int = 4,
    observer: Observer | None = None,
    cache: BaseCache | None = None,
) -> list[dict[str, Any]]:
    """Run every method of `settings` over `task`'s items, skipping what `folder` already records; with a response
    `cache` (`store.response_cache.ResponseCache`), calls at temperature 0 an earlier run made are answered from it.

    Returns every record (old and new). Items whose model calls fail are not recorded (a restart asks
    them again); `MAX_FAILURES_IN_A_ROW` failures in a row raise `EvalAborted`.

    Raises:
        RunSettingsMismatch: `folder` holds a run with other settings.
        EvalAborted: the endpoint kept failing.
    """
    observer = observer or Observer()
    prepare_folder(folder, settings.to_json())
    store = ItemStore(folder)
    records = store.load()

    for method in ordered_methods(settings.methods, settings.match_budget):
        options = settings.options
        if method == "self-consistency" and settings.match_budget:
            options = replace(options, samples=_matched_k(records, observer))
        if method == "self-moa" and settings.match_budget:
            options = replace(options, agents=_matched_moa(records, observer))
        mine = [r for r in records if r["method"] == method]
        done = {r["item"] for r in mine}
        observer.method_started(method, len(task.items), mine)

        def finished(record: dict[str, Any], method: str = method) -> None:
            records.append(record)
            observer.item_finished(method, record)

        jobs = [
            (item.id, partial(run_item, task, item, method, options, factory, settings.model, cache))
            for item in task.items if item.id not in done
        ]
        await run_jobs(jobs, store=store, concurrency=concurrency, finished=finished,
                       failed=partial(observer.item_failed, method))
    return records


def _matched_k(records: list[dict[str, Any]], observer: Observer) -> int:
    """Self-consistency's k for equal tokens per item: the debate's tokens over one `single` answer's."""
    debate = [r["tokens"] for r in records if r["method"] == "debate"]
    single = [r["tokens"] for r in records if r["method"] == "single"]
    if not debate or not single:
        raise EvalAborted("--match-budget needs finished single and debate items to size self-consistency")
    k = matched_samples(mean(debate), mean(single))
    observer.samples_matched("self-consistency", k, mean(debate), mean(single))
    return k


def _matched_moa(records: list[dict[str, Any]], observer: Observer) -> int:
    """Self-MoA's k for equal tokens per item: its aggregator costs about one `single` answer, and every sample
    costs one answer plus its output once more (the aggregator reads it); within the panel's 2-8 seats."""
    debate = [r["tokens"] for r in records if r["method"] == "debate"]
    single = [r for r in records if r["method"] == "single"]
    if not debate or not single:
        raise EvalAborted("--match-budget needs finished single and debate items to size self-moa")
    answer = mean([r["tokens"] for r in single])
    output = mean([r["tokens"] - r["input_tokens"] for r in single])
    k = min(MAX_PANEL_SIZE, matched_samples(mean(debate) - answer, answer + output, minimum=MIN_PANEL_SIZE))
    observer.samples_matched("self-moa", k, mean(debate), answer + output)
    return k
