"""The run's report: `results.json`, the same as a Markdown table in `results.md`, and `accuracy_vs_tokens.png`."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from parley.evals.methods import describe
from parley.evals.runner import RunSettings
from parley.evals.scoring import bootstrap_interval, mean, paired_difference_interval

__all__ = ["EMBEDDED_MODEL_NOTE", "adaptive_vs_panel", "summarise", "write_plot", "write_reports"]

RESULTS_JSON, RESULTS_MD, PLOT_FILE = "results.json", "results.md", "accuracy_vs_tokens.png"

EMBEDDED_MODEL_NOTE = (
    "The embedded model is SmolLM2-135M, a 135M-parameter model: on these tasks its accuracy is near zero "
    "and its verdicts close to chance, so these figures only show that the pipeline runs. They say nothing "
    "about which method (or judge) is better; run against a real model for that."
)


def uses_embedded_model(settings: RunSettings) -> bool:
    return any(m.startswith("local:") for m in [settings.model, *settings.options.models])


def _paid_parts(records: list[dict[str, Any]]) -> dict[str, float]:
    """Per item, the parts of the tokens and cost paid at other rates: prompt tokens read from the provider's cache
    (at its cached price) and output tokens spent reasoning (records written before they were counted have none)."""
    return {"cached_tokens_per_item": round(mean([r.get("cached_tokens", 0) for r in records]), 1),
            "cached_cost_per_item": round(mean([r.get("cached_cost", 0.0) for r in records]), 8),
            "reasoning_tokens_per_item": round(mean([r.get("reasoning_tokens", 0) for r in records]), 1),
            "reasoning_cost_per_item": round(mean([r.get("reasoning_cost", 0.0) for r in records]), 8)}


def summarise(settings: RunSettings, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The results document: the run's settings and, per method, accuracy with its 95 % interval and
    per-item tokens, cost, calls and seconds (means over the items that finished); when `adaptive` and `panel`
    both ran, the one against the other on the items both answered (`adaptive_vs_panel`)."""
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
            **_paid_parts(mine),
            "calls_per_item": round(mean([r["calls"] for r in mine]), 2),
            "seconds_per_item": round(mean([r["seconds"] for r in mine]), 2),
            "unreadable_answers": sum(1 for r in mine if r["prediction"] is None),
            "tied_votes": sum(1 for r in mine if r.get("tied")),
            "priced": all(r["priced"] for r in mine),
            "estimated_tokens": any(r["estimated_tokens"] for r in mine),
            **({"samples": samples} if name in ("self-consistency", "self-moa") else {}),
            **({"paths": _paths(mine)} if name == "adaptive" else {}),
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
    if "adaptive" in settings.methods and "panel" in settings.methods:
        doc["adaptive_vs_panel"] = adaptive_vs_panel(settings, records)
    if uses_embedded_model(settings):
        doc["note"] = EMBEDDED_MODEL_NOTE
    return doc


def _number(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def _paths(records: list[dict[str, Any]]) -> dict[str, int]:
    """How many of an adaptive run's items each path took: `agreed` (the first seats only) or `escalated`."""
    return {path: sum(1 for r in records if r.get("adaptive_path") == path) for path in ("agreed", "escalated")}


def adaptive_vs_panel(settings: RunSettings, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Adaptive depth against the full panel at equal items (those both answered, in the run's item order): tokens
    per item of each and what adaptive saved (per item, and as a share of the panel's), accuracy of each and the
    difference adaptive − panel with its 95 % paired bootstrap interval (seeded with the run's seed), and the
    paths adaptive took on those items."""
    by_method = {name: {r["item"]: r for r in records if r["method"] == name} for name in ("panel", "adaptive")}
    order = {item: i for i, item in enumerate(settings.item_ids)}
    both = by_method["panel"].keys() & by_method["adaptive"].keys()
    items = sorted(both, key=lambda item: (order.get(item, len(order)), item))
    panel = [by_method["panel"][i] for i in items]
    adaptive = [by_method["adaptive"][i] for i in items]
    panel_tokens, adaptive_tokens = mean([r["tokens"] for r in panel]), mean([r["tokens"] for r in adaptive])
    saved = panel_tokens - adaptive_tokens
    difference = paired_difference_interval([1.0 if r["correct"] else 0.0 for r in adaptive],
                                            [1.0 if r["correct"] else 0.0 for r in panel], seed=settings.seed)
    return {
        "n": len(items),
        "paths": _paths(adaptive),
        "panel_tokens_per_item": round(panel_tokens, 1),
        "adaptive_tokens_per_item": round(adaptive_tokens, 1),
        "tokens_saved_per_item": round(saved, 1),
        "tokens_saved_pct": round(100 * saved / panel_tokens, 1) if panel_tokens else None,
        "panel_accuracy": _number(mean([1.0 if r["correct"] else 0.0 for r in panel])) if items else None,
        "adaptive_accuracy": _number(mean([1.0 if r["correct"] else 0.0 for r in adaptive])) if items else None,
        "accuracy_difference": _number(difference.value),
        "ci_low": _number(difference.low),
        "ci_high": _number(difference.high),
    }


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
    paid = [m for m in doc["methods"] if m.get("cached_tokens_per_item") or m.get("reasoning_tokens_per_item")]
    if paid:
        lines += ["", "Of those tokens and that cost, per item: prompt tokens read from the provider's prompt cache "
                  "(at its cached price) and output tokens spent reasoning (at the output price).", "",
                  "| method | cached tokens/item | cached cost/item (USD) | reasoning tokens/item | "
                  "reasoning cost/item (USD) |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {m['label']} | {m['cached_tokens_per_item']:.0f} | {m['cached_cost_per_item']:.6f} | "
                  f"{m['reasoning_tokens_per_item']:.0f} | {m['reasoning_cost_per_item']:.6f} |" for m in paid]
    lines += ["", f"Intervals: {doc['interval']}."]
    unreadable = [f"{m['name']} {m['unreadable_answers']}" for m in doc["methods"] if m["unreadable_answers"]]
    if unreadable:
        lines.append(f"Answers the rule could not read (counted wrong): {', '.join(unreadable)}.")
    adaptive = next((m for m in doc["methods"] if m["name"] == "adaptive"), None)
    if adaptive and "adaptive_vs_panel" not in doc:
        paths = adaptive["paths"]
        lines.append(f"Adaptive depth's paths: {paths['agreed']} item(s) agreed (the first two panelists only), "
                     f"{paths['escalated']} escalated (the whole panel).")
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
    if doc.get("adaptive_vs_panel"):
        lines += _adaptive_section(doc["adaptive_vs_panel"])
    return "\n".join(lines) + "\n"


def _adaptive_section(versus: dict[str, Any]) -> list[str]:
    """results.md's comparison of adaptive depth with the full panel (`adaptive_vs_panel`)."""
    def accuracy(value: float | None) -> str:
        return "—" if value is None else f"{value:.3f}"

    share = "—" if versus["tokens_saved_pct"] is None else f"{versus['tokens_saved_pct']:.1f}%"
    difference = "—" if versus["accuracy_difference"] is None else f"{versus['accuracy_difference']:+.3f}"
    interval = "—" if versus["ci_low"] is None else f"[{versus['ci_low']:+.3f}, {versus['ci_high']:+.3f}]"
    return [
        "", "## Adaptive depth against the full panel", "",
        "Adaptive depth asks two panelists first and the rest of the panel only when those two disagree. On the "
        "items both methods answered: *agreed* counts those where the first two agreed and the panel stopped there, "
        "*escalated* those the whole panel answered; *saved* is the full panel's tokens per item less adaptive "
        "depth's; *adaptive − panel* is the difference in accuracy, with its 95% paired bootstrap interval over "
        "those items (seeded with the run's seed). An interval holding 0 shows no difference.", "",
        "| items | agreed | escalated | panel tokens/item | adaptive tokens/item | saved/item | saved | "
        "panel accuracy | adaptive accuracy | adaptive − panel | 95% CI |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| {versus['n']} | {versus['paths']['agreed']} | {versus['paths']['escalated']} | "
        f"{versus['panel_tokens_per_item']:.0f} | {versus['adaptive_tokens_per_item']:.0f} | "
        f"{versus['tokens_saved_per_item']:.0f} | {share} | {accuracy(versus['panel_accuracy'])} | "
        f"{accuracy(versus['adaptive_accuracy'])} | {difference} | {interval} |",
    ]


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
