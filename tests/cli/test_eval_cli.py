"""`parley eval run` and `parley eval judge` in-process against the scripted model: files, resuming, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parley.cli.main import app
from parley.core.limits import ADAPTIVE_AGREEMENT, MAX_PANEL_SIZE, MIN_PANEL_SIZE
from parley.core.settings import get_settings
from tests.support.duel import judgement


def run(*args: str):
    return CliRunner().invoke(app, ["eval", *args])


def test_run_writes_the_results_and_resumes_without_asking_again(parley_env, llm, tmp_path):
    llm.script(reply="Adding up the products... Answer: 12")
    out = tmp_path / "out"
    args = ["run", "--task", "arithmetic", "--methods", "single,debate", "--n", "3", "--seed", "5",
            "--out", str(out), "--concurrency", "2"]
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert {"run.json", "items.jsonl", "results.json", "results.md", "accuracy_vs_tokens.png"} <= \
        {p.name for p in out.iterdir()}
    doc = json.loads((out / "results.json").read_text())
    assert [m["name"] for m in doc["methods"]] == ["single", "debate"] and doc["n"] == 3 and doc["seed"] == 5
    assert [m["calls_per_item"] for m in doc["methods"]] == [1.0, 6.0]
    assert "near zero" not in result.output  # a hosted model gets no embedded-model warning
    assert "single" in result.output and "results.md" in result.output
    asked = len(llm.requests)
    assert asked == 3 * (1 + 6)

    again = run(*args)
    assert again.exit_code == 0, again.output
    assert len(llm.requests) == asked  # everything was done: nothing is asked twice
    assert json.loads((out / "results.json").read_text()) == doc

    other = run(*[a if a != "5" else "6" for a in args])
    assert other.exit_code == 2 and "seed: 6 here, 5 in the stored run" in " ".join(other.output.split())


def test_the_report_counts_cached_and_reasoning_tokens_and_their_cost(parley_env, llm, tmp_path):
    llm.script(reply="Thinking it over... Answer: 12", reasoning_tokens=300, cached_tokens=20)
    out = tmp_path / "out"
    result = run("run", "--task", "arithmetic", "--methods", "single", "--n", "2", "--out", str(out), "--no-plot")
    assert result.exit_code == 0, result.output
    [single] = json.loads((out / "results.json").read_text())["methods"]
    assert (single["cached_tokens_per_item"], single["reasoning_tokens_per_item"]) == (20.0, 300.0)
    # gpt-4o-mini: $0.075 a million cached prompt tokens, $0.60 a million output tokens (reasoning included).
    assert single["cached_cost_per_item"] == pytest.approx(20 * 0.075 / 1e6)
    assert single["reasoning_cost_per_item"] == pytest.approx(300 * 0.60 / 1e6)
    assert single["tokens_per_item"] > 300 and single["cost_per_item"] > single["reasoning_cost_per_item"]
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert {(r["cached_tokens"], r["reasoning_tokens"]) for r in items} == {(20, 300)}
    table = (out / "results.md").read_text()
    assert "| method | cached tokens/item | cached cost/item (USD) | reasoning tokens/item |" in table
    assert "| single | 20 | 0.000002 | 300 | 0.000180 |" in table


def test_run_writes_the_panel_rules_self_moa_and_the_round_zero_vote(parley_env, llm, tmp_path):
    llm.script(match="Other agents answered", reply="On reflection... Answer: 14")
    llm.script(reply="Adding up the products... Answer: 12")
    out = tmp_path / "out"
    methods = "single,debate,panel:vote,panel:rank,panel:best-of-n,self-moa"
    result = run("run", "--task", "arithmetic", "--methods", methods, "--n", "2", "--out", str(out),
                 "--match-budget", "--concurrency", "2")
    assert result.exit_code == 0, result.output
    assert "self-moa gets k=" in " ".join(result.output.split())
    doc = json.loads((out / "results.json").read_text())
    by_name = {m["name"]: m for m in doc["methods"]}
    assert list(by_name) == methods.split(",") and all(m["n"] == 2 for m in doc["methods"])
    assert by_name["panel:vote"]["calls_per_item"] == 3.0  # a unanimous vote needs no arbitrator
    assert MIN_PANEL_SIZE <= by_name["self-moa"]["samples"] <= MAX_PANEL_SIZE
    # The debate's round-0 vote (all 12) beside its final answer (all 14): the rounds changed every item.
    assert by_name["debate"]["first_vote"]["n"] == 2 and by_name["debate"]["first_vote"]["changed"] == 2
    assert "first_vote" not in by_name["single"]
    table = (out / "results.md").read_text()
    for label in ("panel:vote (3 panelists", "panel:rank (3 panelists", "panel:best-of-n (3 panelists",
                  f"self-moa ({by_name['self-moa']['samples']} samples"):
        assert f"| {label}" in table
    assert "## Did the debate rounds change anything?" in table
    assert "| debate (3 agents × 1 round) | 2 | " in table.split("## Did the debate rounds")[1]
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert {(r["first_vote"], r["prediction"]) for r in items if r["method"] == "debate"} == {("12", "14")}


def test_run_compares_adaptive_depth_with_the_full_panel(parley_env, llm, tmp_path):
    llm.script(reply="Adding up the products... Answer: 12")  # every seat agrees: adaptive stops after two
    out = tmp_path / "out"
    result = run("run", "--task", "arithmetic", "--methods", "panel,adaptive", "--n", "2", "--out", str(out),
                 "--concurrency", "1", "--no-plot")
    assert result.exit_code == 0, result.output
    assert len(llm.requests) == 2 * (4 + 2)  # per item: three panelists and the arbitrator; the two that agree
    doc = json.loads((out / "results.json").read_text())
    panel, adaptive = doc["methods"]
    assert (panel["calls_per_item"], adaptive["calls_per_item"]) == (4.0, 2.0)
    assert adaptive["paths"] == {"agreed": 2, "escalated": 0} and "paths" not in panel
    versus = doc["adaptive_vs_panel"]
    assert versus["n"] == 2 and versus["paths"] == {"agreed": 2, "escalated": 0}
    assert (versus["panel_tokens_per_item"], versus["adaptive_tokens_per_item"]) == \
        (panel["tokens_per_item"], adaptive["tokens_per_item"])
    saved = panel["tokens_per_item"] - adaptive["tokens_per_item"]
    assert saved > 0 and versus["tokens_saved_per_item"] == round(saved, 1)
    assert versus["tokens_saved_pct"] == round(100 * saved / panel["tokens_per_item"], 1)
    assert (versus["accuracy_difference"], versus["ci_low"], versus["ci_high"]) == (0.0, 0.0, 0.0)  # same answers
    flat = " ".join(result.output.split())
    assert f"Adaptive against the full panel on 2 items: {saved:.0f} tokens/item saved" in flat
    assert "## Adaptive depth against the full panel" in (out / "results.md").read_text()
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert sorted((r["method"], r["adaptive_path"]) for r in items) == \
        [("adaptive", "agreed")] * 2 + [("panel", None)] * 2
    assert all(r["agreement"] >= ADAPTIVE_AGREEMENT for r in items if r["method"] == "adaptive")


def test_failed_items_make_the_run_exit_non_zero(parley_env, llm, tmp_path):
    llm.script(status=400, times=1)
    result = run("run", "--task", "arithmetic", "--methods", "single", "--n", "3", "--out", str(tmp_path),
                 "--concurrency", "1")
    assert result.exit_code == 1
    flat = " ".join(result.output.split())
    assert "HTTP 400" in flat and "1 item(s) failed" in flat and "run the same command again" in flat
    assert json.loads((tmp_path / "results.json").read_text())["methods"][0]["n"] == 2


@pytest.mark.parametrize(("args", "message"), [
    (["--methods", "single,voting"], "unknown method(s) voting: choose from single, self-consistency"),
    (["--methods", "single,single"], "names a method twice"),
    (["--methods", "panel", "--agents", "1"], "the panel seats 2-8 panelists"),
    (["--methods", "roundtable", "--agents", "6"], "the round table seats at most 5 agents"),
    (["--methods", "panel:vote", "--agents", "9"], "the panel seats 2-8 panelists (panel:vote)"),
    (["--methods", "panel:rank", "--agents", "2"], "panel:rank needs at least 3 panelists"),
    (["--methods", "panel,adaptive", "--agents", "2"], "adaptive asks 2 panelists first and the rest only when "
     "they disagree: with --agents 2 there is no rest to skip"),
    (["--methods", "single,debate", "--match-budget"], "add self-consistency or self-moa to --methods"),
    (["--methods", "debate,self-consistency", "--match-budget"], "add single to --methods"),
    (["--methods", "single,debate,self-consistency", "--match-budget", "--samples", "4"], "leave out --samples"),
    (["--methods", "single", "--task", "gsm8k", "--n", "500"], "gsm8k has 100 items"),
    (["--methods", "single", "--task", "trivia"], "unknown task 'trivia'"),
    (["--methods", "single", "--model", "mystery:model"], None),
])
def test_bad_input_is_refused_before_any_model_call(parley_env, llm, tmp_path, monkeypatch, args, message):
    if message is None:  # a model that cannot be reached: no endpoint and no key
        monkeypatch.delenv("OPENAI_BASE_URL")
        monkeypatch.delenv("OPENAI_API_KEY")
        get_settings.cache_clear()
        message = "mystery:model: no API key"
    task = [] if "--task" in args else ["--task", "arithmetic"]
    result = run("run", *task, *args, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert llm.requests == []


def test_judge_command(parley_env, llm, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"question": "2+2?", "answer_a": "Four.", "answer_b": "Five.", "label": "A"}) + "\n")
    llm.script(match="Speaker A: Four", json=judgement("A"))
    llm.script(match="Speaker A: Five", json=judgement("A"))  # whichever comes first wins: a flip
    result = run("judge", "--pairs", str(pairs), "--out", str(tmp_path / "j"))
    assert result.exit_code == 0, result.output
    assert "position flip rate" in result.output and "judge.md" in result.output
    doc = json.loads((tmp_path / "j" / "judge.json").read_text())
    assert doc["position_flip"]["rate"] == 1.0 and doc["human_agreement"]["rate"] == 0.0

    missing = run("judge", "--pairs", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "k"))
    assert missing.exit_code == 2 and "cannot read" in missing.output


EXAMPLE = Path(__file__).resolve().parents[2] / "designer" / "examples" / "multiagent-debate.json"


def test_a_workflow_file_runs_as_a_method_and_matches_the_debate_it_is_built_as(parley_env, llm, tmp_path):
    """The multiagent-debate example (Du et al.'s 3 agents × 2 rounds, then a majority) beside the debate method of
    the same shape (its defaults: 3 agents, 1 revision round): the same calls and answers, read by the task's rule."""
    llm.script(match="Other agents answered", reply="Checked again. Answer: 12")
    llm.script(reply="First go. Answer: 12")
    method = f"workflow:{EXAMPLE}"
    out = tmp_path / "out"
    result = run("run", "--task", "arithmetic", "--methods", f"debate,{method}", "--n", "2", "--out", str(out),
                 "--concurrency", "1")
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "results.json").read_text())
    assert [m["name"] for m in doc["methods"]] == ["debate", method]
    debate, workflow = doc["methods"]
    assert debate["calls_per_item"] == workflow["calls_per_item"] == 6.0
    assert workflow["label"] == "workflow Multi-agent debate (multiagent-debate.json)"
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    by_method = {name: {r["item"]: r for r in items if r["method"] == name} for name in ("debate", method)}
    assert set(by_method["debate"]) == set(by_method[method]) and len(by_method[method]) == 2
    for item, asked in by_method[method].items():
        built_in = by_method["debate"][item]
        assert asked["prediction"] == built_in["prediction"] == "12" and asked["correct"] == built_in["correct"]
        assert asked["tokens"] == built_in["tokens"]  # the same prompts, so the same usage


def test_a_workflow_method_must_read_question_and_write_answer(parley_env, tmp_path):
    document = json.loads(EXAMPLE.read_text())
    document["state"]["reply"] = document["state"].pop("answer")
    document["nodes"][-1]["output_key"] = "reply"
    path = tmp_path / "flow.json"
    path.write_text(json.dumps(document))
    result = run("run", "--task", "arithmetic", "--methods", f"workflow:{path}", "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert "must declare the state key(s) answer" in " ".join(result.output.split())
    missing = run("run", "--task", "arithmetic", "--methods", f"workflow:{tmp_path / 'none.json'}",
                  "--out", str(tmp_path / "out"))
    assert missing.exit_code == 2 and "cannot read workflow" in " ".join(missing.output.split())


def test_run_with_cache_answers_a_rerun_s_calls_at_temperature_0_from_the_database(parley_env, llm, tmp_path, sync_db):
    llm.script(reply="Adding up the products... Answer: 12")
    args = ["run", "--task", "arithmetic", "--methods", "single,debate", "--n", "2", "--seed", "3", "--no-plot",
            "--temperature", "0", "--concurrency", "1", "--cache"]
    first = run(*args, "--out", str(tmp_path / "first"))
    assert first.exit_code == 0, first.output
    asked = len(llm.requests)
    # Even the first run asks fewer than its 2 x (1 + 6) calls: the debate's agents, one model at temperature 0,
    # ask each other's identical questions, answered once.
    assert 0 < asked < 2 * (1 + 6) and sync_db.response_cache.count_documents({"scope": "eval"}) > 0
    # A new run (another folder: nothing to resume) asks the same calls: every one is answered from the cache.
    second = run(*args, "--out", str(tmp_path / "second"))
    assert second.exit_code == 0, second.output
    assert len(llm.requests) == asked
    first_doc = json.loads((tmp_path / "first" / "results.json").read_text())
    second_doc = json.loads((tmp_path / "second" / "results.json").read_text())
    assert [m["accuracy"] for m in second_doc["methods"]] == [m["accuracy"] for m in first_doc["methods"]]
    # Without --cache, nothing is read from it.
    third = run(*args[:-1], "--out", str(tmp_path / "third"))
    assert third.exit_code == 0, third.output
    assert len(llm.requests) == asked + 2 * (1 + 6)  # every call made
