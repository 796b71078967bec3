"""Judge bias with the duel's own judge on the scripted model server: flips, first-position wins, human agreement."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from parley.evals.judge import judge_pairs, load_pairs
from parley.evals.runner import RunSettingsMismatch
from parley.evals.tasks import TaskError
from parley.llm.factory import ModelFactory
from tests.support.duel import JUDGE_MARK, judgement

PAIRS = [
    # The judge prefers the right answer in both orders.
    {"id": "capital", "question": "Capital of France?", "answer_a": "Paris, seat of government.",
     "answer_b": "Lyon, the silk city.", "label": "A"},
    # The judge always picks whichever answer it reads first: a position flip.
    {"id": "sum", "question": "What is 2+2?", "answer_a": "Five, by my count.", "answer_b": "Four, plainly.",
     "label": "B"},
    # Consistent for B; a human called it a tie, so it does not count towards agreement.
    {"id": "colour", "question": "Colour of the sky?", "answer_a": "Green on clear days.",
     "answer_b": "Blue on clear days.", "label": "tie"},
]


def script_judge(llm) -> None:
    def when_first(text: str, winner: str) -> None:
        llm.script(match=f"Speaker A: {text}", json=judgement(winner))

    when_first("Paris", "A"), when_first("Lyon", "B")
    when_first("Five", "A"), when_first("Four", "A")
    when_first("Green", "B"), when_first("Blue", "A")


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    return path


async def test_flip_rate_position_bias_and_human_agreement(parley_env, llm, pairs_file, tmp_path):
    script_judge(llm)
    out = tmp_path / "judge"
    doc = await judge_pairs(load_pairs(pairs_file), str(pairs_file), out, factory=ModelFactory(parley_env),
                            model="openai:gpt-4o-mini", seed=0)

    assert len(llm.requests) == 6 and all(JUDGE_MARK in r["messages"][0]["content"] for r in llm.requests)
    lines = (out / "judgements.jsonl").read_text().splitlines()
    records = {r["item"]: (r["as_given"], r["swapped"], r["verdict"], r["flipped"]) for r in map(json.loads, lines)}
    assert records["capital"] == ("A", "A", "A", False)
    assert records["sum"] == ("A", "B", "tie", True)

    assert doc["n"] == 3
    assert doc["position_flip"]["rate"] == pytest.approx(1 / 3, abs=1e-4) and doc["position_flip"]["n"] == 3
    assert doc["first_position_wins"]["rate"] == pytest.approx(4 / 6, abs=1e-4)
    assert (doc["human_agreement"]["n"], doc["human_agreement"]["rate"]) == (2, 0.5)
    for measure in ("position_flip", "first_position_wins", "human_agreement"):
        assert doc[measure]["ci_low"] <= doc[measure]["rate"] <= doc[measure]["ci_high"]
    assert json.loads((out / "judge.json").read_text()) == doc
    assert "| position flip rate | 3 | 0.333 |" in (out / "judge.md").read_text()

    llm.reset()
    again = await judge_pairs(load_pairs(pairs_file), str(pairs_file), out, factory=ModelFactory(parley_env),
                              model="openai:gpt-4o-mini", seed=0)
    assert llm.requests == [] and again == doc  # resumed: every pair was already judged


async def test_a_judge_run_of_another_model_is_refused(parley_env, llm, pairs_file, tmp_path):
    pairs, factory = load_pairs(pairs_file), ModelFactory(parley_env)
    await judge_pairs(pairs, str(pairs_file), tmp_path, factory=factory, model="openai:gpt-4o-mini", seed=0)
    with pytest.raises(RunSettingsMismatch, match="model: 'openai:gpt-4o' here"):
        await judge_pairs(pairs, str(pairs_file), tmp_path, factory=factory, model="openai:gpt-4o", seed=0)


@pytest.mark.parametrize(("line", "message"), [
    ('{"question": "Q", "answer_a": "x"}', "line 1: 'answer_b' must be a non-empty string"),
    ('{"question": "Q", "answer_a": "x", "answer_b": "y", "label": "first"}', "'label' must be A, B or tie"),
    ("{", "line 1: not valid JSON"),
])
def test_bad_pairs_are_named(tmp_path, line, message):
    path = tmp_path / "pairs.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(TaskError, match=message):
        load_pairs(path)


def test_the_shipped_example_pairs_load():
    pairs = load_pairs(resources.files("parley.evals").joinpath("data", "judge_pairs_example.jsonl"))
    assert len(pairs) == 8 and {p.label for p in pairs} == {"A", "B", "tie"}
