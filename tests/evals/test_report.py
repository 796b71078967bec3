"""The three result files: results.json with the documented shape, results.md as a table, and the plot; adaptive
depth against the full panel, figured by hand."""

from __future__ import annotations

import json

from parley.evals.methods import MethodOptions
from parley.evals.report import EMBEDDED_MODEL_NOTE, write_reports
from parley.evals.runner import RunSettings
from parley.evals.scoring import bootstrap_interval

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def record(method: str, item: int, correct: bool, tokens: int, **extra) -> dict:
    return {"method": method, "item": f"i{item}", "gold": "1", "prediction": "1" if correct else "2",
            "correct": correct, "votes": None, "tied": False, "tokens": tokens, "input_tokens": tokens // 2,
            "cost": tokens * 1e-6, "calls": 1 if method == "single" else 6, "seconds": 0.5, "priced": True,
            "estimated_tokens": False, "samples": None, "response": "Answer: 1", **extra}


def settings(model: str = "openai:gpt-4o-mini") -> RunSettings:
    return RunSettings(task="arithmetic", answer_rule="number", n=4, seed=0, methods=["single", "self-consistency"],
                       model=model, options=MethodOptions(samples=6), match_budget=False,
                       item_ids=[f"i{i}" for i in range(4)])


def test_the_three_files(tmp_path):
    records = [record("single", i, correct=i < 2, tokens=100) for i in range(4)]
    records += [record("self-consistency", i, correct=i < 3, tokens=600, samples=6, tied=i == 0) for i in range(4)]
    doc = write_reports(settings(), records, tmp_path)

    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored == doc
    assert {"task", "n", "seed", "model", "models", "methods"} <= set(stored)
    assert (stored["task"], stored["n"], stored["seed"], stored["model"]) == ("arithmetic", 4, 0, "openai:gpt-4o-mini")
    single, consistency = stored["methods"]
    for method in (single, consistency):
        assert {"name", "accuracy", "ci_low", "ci_high", "tokens_per_item", "cost_per_item", "calls_per_item",
                "seconds_per_item"} <= set(method)
        assert method["ci_low"] <= method["accuracy"] <= method["ci_high"]
    assert (single["name"], single["accuracy"], single["tokens_per_item"], single["calls_per_item"]) == \
        ("single", 0.5, 100.0, 1.0)
    assert (consistency["accuracy"], consistency["tokens_per_item"], consistency["samples"]) == (0.75, 600.0, 6)
    assert consistency["tied_votes"] == 1 and consistency["cost_per_item"] == 0.0006
    assert "note" not in stored

    table = (tmp_path / "results.md").read_text()
    assert "| method | n | accuracy | 95% CI | tokens/item | cost/item (USD) | calls/item | s/item |" in table
    assert "| single | 4 | 0.500 |" in table and "| self-consistency (k=6) | 4 | 0.750 |" in table

    assert (tmp_path / "accuracy_vs_tokens.png").read_bytes().startswith(PNG_SIGNATURE)


def test_the_embedded_model_is_flagged_as_not_meaningful(tmp_path):
    records = [record("single", i, correct=False, tokens=50) for i in range(4)]
    doc = write_reports(settings("local:smollm2"), records, tmp_path)
    assert doc["note"] == EMBEDDED_MODEL_NOTE
    assert "near zero" in (tmp_path / "results.md").read_text()
    consistency = doc["methods"][1]
    assert consistency["n"] == 0 and consistency["accuracy"] is None  # no items: no figures, and no crash


def test_the_round_zero_vote_beside_the_final_answer(tmp_path):
    # Item 0: the vote was right, the rounds kept it; 1: wrong, then fixed; 2: right, then broken; 3: wrong, kept.
    first = [(True, True), (False, True), (True, False), (False, False)]
    records = [record("debate", i, correct=final, tokens=600, first_vote="1" if vote else "3",
                      first_vote_correct=vote) for i, (vote, final) in enumerate(first)]
    records += [record("single", i, correct=True, tokens=100) for i in range(4)]
    run = RunSettings(task="arithmetic", answer_rule="number", n=4, seed=0, methods=["single", "debate"],
                      model="openai:gpt-4o-mini", options=MethodOptions(), match_budget=False,
                      item_ids=[f"i{i}" for i in range(4)])
    doc = write_reports(run, records, tmp_path)
    single, debate = doc["methods"]
    assert "first_vote" not in single
    assert debate["first_vote"]["accuracy"] == 0.5 and debate["accuracy"] == 0.5
    assert {k: debate["first_vote"][k] for k in ("n", "changed", "fixed", "broken")} == \
        {"n": 4, "changed": 3, "fixed": 1, "broken": 1}
    table = (tmp_path / "results.md").read_text().split("## Did the debate rounds change anything?")[1]
    assert "| debate (3 agents × 1 round) | 4 | 0.500 |" in table and table.rstrip().endswith("| 0.500 | 3 | 1 | 1 |")


def adaptive_settings(methods: list[str], n: int, seed: int = 7) -> RunSettings:
    return RunSettings(task="arithmetic", answer_rule="number", n=n, seed=seed, methods=methods,
                       model="openai:gpt-4o-mini", options=MethodOptions(), match_budget=False,
                       item_ids=[f"i{i}" for i in range(n)])


def test_adaptive_depth_against_the_full_panel_at_equal_items(tmp_path):
    # 20 items both answered, and a 21st only the panel did (not compared). The panel spends 1200 tokens an item;
    # adaptive 800 on the 15 items its first two seats agreed on (400 saved each) and 1200 on the 5 it escalated:
    # 300 saved an item, 25 %. The panel is right on i0-i9, adaptive on i0-i7 and i10-i13: 0.5 against 0.6, +0.1.
    panel = [record("panel", i, correct=i < 10, tokens=1200) for i in range(20)]
    panel.append(record("panel", 20, correct=True, tokens=90_000))
    agreed = set(range(15))
    adaptive = [record("adaptive", i, correct=i < 8 or 10 <= i < 14, tokens=800 if i in agreed else 1200,
                       adaptive_path="agreed" if i in agreed else "escalated") for i in range(20)]
    records = list(reversed(adaptive)) + panel  # items.jsonl keeps finishing order, not item order
    doc = write_reports(adaptive_settings(["panel", "adaptive"], n=21), records, tmp_path, plot=False)

    versus = doc["adaptive_vs_panel"]
    assert versus == json.loads((tmp_path / "results.json").read_text())["adaptive_vs_panel"]
    differences = [0.0] * 8 + [-1.0] * 2 + [1.0] * 4 + [0.0] * 6  # adaptive − panel, item by item
    expected = bootstrap_interval(differences, seed=7)  # the run's seed, over items in the run's order
    assert expected != bootstrap_interval(differences, seed=0)  # so the seed used is checked
    assert versus == {
        "n": 20, "paths": {"agreed": 15, "escalated": 5},
        "panel_tokens_per_item": 1200.0, "adaptive_tokens_per_item": 900.0,
        "tokens_saved_per_item": 300.0, "tokens_saved_pct": 25.0,
        "panel_accuracy": 0.5, "adaptive_accuracy": 0.6, "accuracy_difference": 0.1,
        "ci_low": round(expected.low, 4), "ci_high": round(expected.high, 4),
    }
    panel_row, adaptive_row = doc["methods"]
    assert panel_row["n"] == 21 and "paths" not in panel_row  # the row keeps every item the panel answered
    assert adaptive_row["paths"] == {"agreed": 15, "escalated": 5}
    assert adaptive_row["label"] == "adaptive (2 panelists; all 3 + arbitrator on disagreement)"

    table = (tmp_path / "results.md").read_text()
    section = table.split("## Adaptive depth against the full panel")[1]
    assert (f"| 20 | 15 | 5 | 1200 | 900 | 300 | 25.0% | 0.500 | 0.600 | +0.100 | "
            f"[{expected.low:+.3f}, {expected.high:+.3f}] |") in section
    assert "Adaptive depth's paths" not in table  # the section counts them


def test_the_same_answers_differ_by_nothing_at_any_spread(tmp_path):
    # Right on half the items each, on the same items: paired, the difference is exactly 0 with no spread.
    records = [record("panel", i, correct=i % 2 == 0, tokens=1000) for i in range(12)]
    records += [record("adaptive", i, correct=i % 2 == 0, tokens=1000, adaptive_path="escalated") for i in range(12)]
    versus = write_reports(adaptive_settings(["adaptive", "panel"], n=12), records, tmp_path,
                           plot=False)["adaptive_vs_panel"]
    assert (versus["accuracy_difference"], versus["ci_low"], versus["ci_high"]) == (0.0, 0.0, 0.0)
    assert (versus["tokens_saved_per_item"], versus["tokens_saved_pct"]) == (0.0, 0.0)
    assert versus["paths"] == {"agreed": 0, "escalated": 12}
    assert "| 12 | 0 | 12 | 1000 | 1000 | 0 | 0.0% | 0.500 | 0.500 | +0.000 | [+0.000, +0.000] |" in \
        (tmp_path / "results.md").read_text()


def test_adaptive_alone_shows_its_row_and_its_paths(tmp_path):
    records = [record("adaptive", i, correct=True, tokens=900, adaptive_path="agreed" if i < 3 else "escalated")
               for i in range(4)]
    doc = write_reports(adaptive_settings(["single", "adaptive"], n=4), records, tmp_path, plot=False)
    assert "adaptive_vs_panel" not in doc
    assert doc["methods"][1]["paths"] == {"agreed": 3, "escalated": 1} and doc["methods"][1]["accuracy"] == 1.0
    table = (tmp_path / "results.md").read_text()
    assert "| adaptive (2 panelists; all 3 + arbitrator on disagreement) | 4 | 1.000 |" in table
    assert "Adaptive depth's paths: 3 item(s) agreed (the first two panelists only), 1 escalated" in table
    assert "## Adaptive depth against the full panel" not in table
