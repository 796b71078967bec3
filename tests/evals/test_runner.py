"""The runner against the scripted model server: resuming without asking anything twice, refusing other
settings, surviving a torn line and failed items, and matching self-consistency's budget to the debate's."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from parley.evals.methods import MethodOptions
from parley.evals.runner import EvalAborted, ItemStore, Observer, RunSettings, RunSettingsMismatch, run_eval, run_jobs
from parley.evals.scoring import matched_samples, mean
from parley.evals.tasks import load_task
from parley.llm.factory import ModelFactory

MODEL = "openai:gpt-4o-mini"


class Interrupted(Exception):
    """Stands in for Ctrl-C arriving after some items finished."""


def settings_for(task, methods, **changes) -> RunSettings:
    fields = dict(task=task.name, answer_rule=task.rule.name, n=len(task.items), seed=0, methods=methods,
                  model=MODEL, options=MethodOptions(samples=3), match_budget=False,
                  item_ids=[item.id for item in task.items])
    return RunSettings(**{**fields, **changes})


def asked(llm, task) -> Counter:
    """How many requests asked each item's question (first messages only: the question as sent)."""
    return Counter(item.id for request in llm.requests for item in task.items
                   if request["messages"][0]["content"] == task.prompt(item))


def script_right_answers(llm, task) -> None:
    for item in task.items:
        llm.script(match=task.prompt(item), reply=f"Working... Answer: {item.answer}")


async def test_an_interrupted_run_resumes_without_asking_anything_twice(parley_env, llm, tmp_path):
    task = load_task("arithmetic", n=5, seed=0)
    script_right_answers(llm, task)
    settings = settings_for(task, ["single", "self-consistency"])
    factory = ModelFactory(parley_env)
    finished = []

    def stop_after_two(method, record):
        finished.append(record["item"])
        if len(finished) == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        await run_eval(task, settings, tmp_path, factory=factory, concurrency=1,
                       observer=Observer(item_finished=stop_after_two))
    assert len(ItemStore(tmp_path).load()) == 2
    assert sum(asked(llm, task).values()) == 2  # nothing beyond the two finished items was asked

    records = await run_eval(task, settings, tmp_path, factory=factory, concurrency=2)
    assert sorted((r["method"], r["item"]) for r in records) == sorted(
        (m, item.id) for m in ("single", "self-consistency") for item in task.items)
    assert all(r["correct"] for r in records)
    # Each item: one single answer and three samples, over both runs together: nothing asked twice.
    assert asked(llm, task) == {item.id: 1 + 3 for item in task.items}

    before = len(llm.requests)
    await run_eval(task, settings, tmp_path, factory=factory)
    assert len(llm.requests) == before  # a finished run asks nothing more


async def test_a_run_with_other_settings_is_refused(parley_env, llm, tmp_path):
    task = load_task("arithmetic", n=2, seed=0)
    factory = ModelFactory(parley_env)
    await run_eval(task, settings_for(task, ["single"]), tmp_path, factory=factory)
    stored = (tmp_path / "run.json").read_text()
    with pytest.raises(RunSettingsMismatch, match=r"seed: 1 here, 0 in the stored run"):
        await run_eval(task, settings_for(task, ["single"], seed=1), tmp_path, factory=factory)
    other = load_task("arithmetic", n=2, seed=9)
    with pytest.raises(RunSettingsMismatch, match="the items differ"):
        await run_eval(other, settings_for(other, ["single"]), tmp_path, factory=factory)
    with pytest.raises(RunSettingsMismatch, match="methods"):
        await run_eval(task, settings_for(task, ["single", "debate"]), tmp_path, factory=factory)
    assert (tmp_path / "run.json").read_text() == stored and len(ItemStore(tmp_path).load()) == 2


async def test_a_line_torn_by_an_interruption_is_dropped_and_asked_again(parley_env, llm, tmp_path):
    task = load_task("arithmetic", n=3, seed=0)
    settings = settings_for(task, ["single"])
    factory = ModelFactory(parley_env)
    await run_eval(task, settings, tmp_path, factory=factory)
    path = tmp_path / "items.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + lines[1] + lines[2][:25])  # the last record half written
    assert [r["item"] for r in ItemStore(tmp_path).load()] == [json.loads(lines[0])["item"],
                                                                 json.loads(lines[1])["item"]]
    assert path.read_text() == lines[0] + lines[1]
    llm.reset()
    await run_eval(task, settings, tmp_path, factory=factory)
    assert len(llm.requests) == 1 and len(ItemStore(tmp_path).load()) == 3


async def test_failed_items_are_left_for_the_next_run(parley_env, llm, tmp_path):
    task = load_task("arithmetic", n=3, seed=0)
    broken = task.items[1]
    llm.script(match=task.prompt(broken), status=400, times=1)
    failures = []
    settings = settings_for(task, ["single"])
    factory = ModelFactory(parley_env)
    records = await run_eval(task, settings, tmp_path, factory=factory,
                             observer=Observer(item_failed=lambda m, item, error: failures.append((item, error))))
    assert [item for item, _ in failures] == [broken.id] and "HTTP 400" in failures[0][1]
    assert broken.id not in {r["item"] for r in records}
    llm.reset()
    await run_eval(task, settings, tmp_path, factory=factory)
    assert asked(llm, task) == {broken.id: 1}


async def test_a_run_stops_when_every_item_fails(parley_env, llm, tmp_path):
    task = load_task("arithmetic", n=8, seed=0)
    llm.script(status=401)
    with pytest.raises(EvalAborted, match="5 items in a row failed; the last: HTTP 401"):
        await run_eval(task, settings_for(task, ["single"]), tmp_path, factory=ModelFactory(parley_env),
                       concurrency=1)
    assert len(llm.requests) == 5 and ItemStore(tmp_path).load() == []


async def test_match_budget_gives_self_consistency_the_debates_tokens(parley_env, llm, tmp_path):
    task = load_task("arithmetic", n=3, seed=0)
    # Debate answers are long (three agents, two rounds of them); a single answer is short.
    long_answer = "Let me check every product and sum with care before I commit. " * 8 + "Answer: 1"
    llm.script(match="Other agents answered", reply=long_answer)
    llm.script(reply="Answer: 1")
    settings = settings_for(task, ["self-consistency", "single", "debate"], match_budget=True)
    matched = []
    records = await run_eval(task, settings, tmp_path, factory=ModelFactory(parley_env),
                             observer=Observer(samples_matched=lambda method, k, d, s: matched.append(k)))

    debate = mean([r["tokens"] for r in records if r["method"] == "debate"])
    single = mean([r["tokens"] for r in records if r["method"] == "single"])
    k = matched_samples(debate, single)
    assert matched == [k] and k > settings.options.samples
    consistency = [r for r in records if r["method"] == "self-consistency"]
    assert {r["samples"] for r in consistency} == {k} and {r["calls"] for r in consistency} == {k}
    assert mean([r["tokens"] for r in consistency]) == pytest.approx(debate, rel=0.5 / k + 0.05)
    assert [r["method"] for r in records][-1] == "self-consistency"  # it waited for single and debate


async def test_a_timed_out_call_is_a_failed_item_not_a_crash(tmp_path):
    async def stalled() -> dict:
        raise TimeoutError("No streaming chunk received for 120.0s")  # langchain-openai's stream timeout is one

    async def answered() -> dict:
        return {"item": "b"}

    failed, finished = [], []
    await run_jobs([("a", stalled), ("b", answered)], store=ItemStore(tmp_path), concurrency=1,
                   finished=finished.append, failed=lambda item, error: failed.append((item, error)))
    assert failed == [("a", "TimeoutError: No streaming chunk received for 120.0s")]
    assert finished == [{"item": "b"}] and ItemStore(tmp_path).load() == [{"item": "b"}]
