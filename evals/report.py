"""The run's report: `results.json`, the same as a Markdown table in `results.md`, and `accuracy_vs_tokens.png`."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from parley.evals.methods import describe
from parley.evals.runner import RunSettings
from parley.evals.scoring import bootstrap_interval, mean

__all__ = ["EMBEDDED_MODEL_NOTE", "summarise", "write_plot", "write_reports"]

RESULTS_JSON, RESULTS_MD, PLOT_FILE = "results.json", "results.md", "accuracy_vs_tokens.png"

EMBEDDED_MODEL_NOTE = (
    "The embedded model is SmolLM2-135M, a 135M-parameter model: on these tasks its accuracy is near zero "
    "and its verdicts close to chance, so these figures only show that the pipeline runs. They say nothing "
    "about which method (or judge) is better; run against a real model for that."
)


def uses_embedded_model(settings: RunSettings) -> bool:
    return any(m.startswith("local:") for m in [settings.model, *settings.options.models])


def summarise(settings: RunSettings, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The results document: the run's settings and, per method, accuracy with its 95 % interval and
    per-item tokens, cost, calls and seconds (means over the items that finished)."""
    methods = []
    for name in settings.methods:
        mine = [r for r in records if r["method"] == name]
        interval = bootstrap_interval([1.0 if r["correct"] else 0.0 for r in mine], seed=settings.seed)
        # Self-consistency's k is its samples, self-moa's its seats: what `--match-budget` chose, when it did.
        field = "agents" if name == "self-moa" else "samples"
        samples = next((r["samples"] for r in mine if r.get("samples")), getattr(settings.options, field))
        methods.append({
            "name": name,
            "label": describe(name, replace(settings.options, **{field: samples})),
            "n": len(mine),
            "accuracy": _number(interval.value),
            "ci_low": _number(interval.low),
            "ci_high": _number(interval.high),
            "tokens_per_item": round(mean([r["tokens"] for r in mine]), 1),
            "cost_per_item": round(mean([r["cost"] for r in mine]), 8),
            "calls_per_item": round(mean([r["calls"] for r in mine]), 2),
            "seconds_per_item": round(mean([r["seconds"] for r in mine]), 2),
            "unreadable_answers": sum(1 for r in mine if r["prediction"] is None),
            "tied_votes": sum(1 for r in mine if r.get("tied")),
            "priced": all(r["priced"] for r in mine),
            "estimated_tokens": any(r["estimated_tokens"] for r in mine),
            **({"samples": samples} if name in ("self-consistency", "self-moa") else {}),
            **_first_vote(mine, settings.seed),
        })
    doc = {
        "task": settings.task,
        "answer_rule": settings.answer_rule,
        "n": settings.n,
        "seed": settings.seed,
        "model": settings.model,
        "models": settings.options.models or [settings.model],
        "options": {"agents": settings.options.agents, "rounds": settings.options.rounds,
                    "temperature": settings.options.temperature, "max_tokens": settings.options.max_tokens,
                    "match_budget": settings.match_budget},
        "interval": "95% percentile bootstrap over items (2000 resamples, seeded with the run's seed)",
        "methods": methods,
    }
    if uses_embedded_model(settings):
        doc["note"] = EMBEDDED_MODEL_NOTE
    return doc


def _number(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def _first_vote(records: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """For a method that debates in rounds, the round-0 vote beside its final answer: the vote's accuracy and
    interval, and on how many items the rounds changed the answer, fixing a wrong one or breaking a right one."""
    voted = [r for r in records if r.get("first_vote_correct") is not None]
    if not voted:
        return {}
    interval = bootstrap_interval([1.0 if r["first_vote_correct"] else 0.0 for r in voted], seed=seed)
    return {"first_vote": {
        "n": len(voted),
        "accuracy": _number(interval.value), "ci_low": _number(interval.low), "ci_high": _number(interval.high),
        "changed": sum(1 for r in voted if r["prediction"] != r["first_vote"]),
        "fixed": sum(1 for r in voted if r["correct"] and not r["first_vote_correct"]),
        "broken": sum(1 for r in voted if r["first_vote_correct"] and not r["correct"]),
    }}


def markdown(doc: dict[str, Any]) -> str:
    """The results as a Markdown table, with the run's settings above it."""
    models = ", ".join(doc["models"])
    lines = [
        f"# {doc['task']}: {doc['n']} items, seed {doc['seed']}",
        "",
        f"Model: `{doc['model']}`" + (f"; agents: {models}" if doc["models"] != [doc["model"]] else "")
        + f". Answer rule: `{doc['answer_rule']}`. Sampling temperature {doc['options']['temperature']}, "
        f"at most {doc['options']['max_tokens']} output tokens a call."
        + (" Self-consistency's k matched to the debate's tokens per item." if doc["options"]["match_budget"] else ""),
        "",
    ]
    if doc.get("note"):
        lines += [f"> **Note.** {doc['note']}", ""]
    lines += [
        "| method | n | accuracy | 95% CI | tokens/item | cost/item (USD) | calls/item | s/item |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for m in doc["methods"]:
        accuracy = "—" if m["accuracy"] is None else f"{m['accuracy']:.3f}"
        interval = "—" if m["ci_low"] is None else f"[{m['ci_low']:.3f}, {m['ci_high']:.3f}]"
        cost = f"{m['cost_per_item']:.6f}" if m["priced"] else f"{m['cost_per_item']:.6f} (unpriced)"
        tokens = f"{m['tokens_per_item']:.0f}" + (" (est.)" if m["estimated_tokens"] else "")
        lines.append(f"| {m['label']} | {m['n']} | {accuracy} | {interval} | {tokens} | {cost} | "
                     f"{m['calls_per_item']:.1f} | {m['seconds_per_item']:.1f} |")
    lines += ["", f"Intervals: {doc['interval']}."]
    unreadable = [f"{m['name']} {m['unreadable_answers']}" for m in doc["methods"] if m["unreadable_answers"]]
    if unreadable:
        lines.append(f"Answers the rule could not read (counted wrong): {', '.join(unreadable)}.")
    voted = [m for m in doc["methods"] if m.get("first_vote")]
    if voted:
        lines += [
            "", "## Did the debate rounds change anything?", "",
            "The round-0 vote is the majority of the agents' first answers, before any debate round: a baseline "
            "the debate paid for already. *Changed* counts the items whose final answer differs from it; *fixed* "
            "those the rounds turned right, *broken* those they turned wrong.", "",
            "| method | n | round-0 vote | 95% CI | final | changed | fixed | broken |",
            "|---|---:|---:|---|---:|---:|---:|---:|",
        ]
        for m in voted:
            first = m["first_vote"]
            accuracy = "—" if first["accuracy"] is None else f"{first['accuracy']:.3f}"
            interval = "—" if first["ci_low"] is None else f"[{first['ci_low']:.3f}, {first['ci_high']:.3f}]"
            final = "—" if m["accuracy"] is None else f"{m['accuracy']:.3f}"
            lines.append(f"| {m['label']} | {first['n']} | {accuracy} | {interval} | {final} | {first['changed']} | "
                         f"{first['fixed']} | {first['broken']} |")
    return "\n".join(lines) + "\n"


def write_plot(doc: dict[str, Any], path: Path) -> None:
    """Accuracy (with its interval) against tokens per item, one labelled point per method."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display is needed or wanted
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    try:
        for m in doc["methods"]:
            if m["accuracy"] is None:
                continue
            error = [[m["accuracy"] - m["ci_low"]], [m["ci_high"] - m["accuracy"]]]
            axes.errorbar([m["tokens_per_item"]], [m["accuracy"]], yerr=error, fmt="o", capsize=4, label=m["label"])
        axes.set_xlabel("tokens per item (input + output, all calls)")
        axes.set_ylabel("accuracy (95% bootstrap interval)")
        axes.set_ylim(-0.05, 1.05)
        axes.set_title(f"{doc['task']}, {doc['n']} items, {doc['model']}", fontsize=10)
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=8, loc="best")
        if doc.get("note"):
            figure.text(0.01, 0.01, "Embedded 135M model: figures not meaningful.", fontsize=7, color="firebrick")
        figure.tight_layout()
        figure.savefig(path)
    finally:
        plt.close(figure)


def write_reports(settings: RunSettings, records: list[dict[str, Any]], folder: Path, *,
                  plot: bool = True) -> dict[str, Any]:
    """Write results.json, results.md and (with `plot`) the plot under `folder`; return the results document.

    The plot comes last, so that a plot that cannot be drawn (no matplotlib) leaves the results written."""
    doc = summarise(settings, records)
    (folder / RESULTS_JSON).write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (folder / RESULTS_MD).write_text(markdown(doc), encoding="utf-8")
    if plot:
        write_plot(doc, folder / PLOT_FILE)
    return doc
