"""The three result files: results.json with the documented shape, results.md as a table, and the plot."""

from __future__ import annotations

import json

from parley.evals.methods import MethodOptions
from parley.evals.report import EMBEDDED_MODEL_NOTE, write_reports
from parley.evals.runner import RunSettings

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
