"""Tasks: Du et al.'s arithmetic, the shipped GSM8K subset, JSONL files, and the errors each can give."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from parley.nodes.answers import canonical_number
from parley.evals.tasks import GSM8K_FILE, TaskError, arithmetic_items, load_task, select_gsm8k_subset


def test_arithmetic_follows_du_et_al_and_its_seed():
    items = arithmetic_items(50, seed=4)
    assert items == arithmetic_items(50, seed=4) and items != arithmetic_items(50, seed=5)
    for item in items:
        expression = re.search(r"(\d+)\+(\d+)\*(\d+)\+(\d+)-(\d+)\*(\d+)", item.question)
        a, b, c, d, e, f = map(int, expression.groups())
        assert all(0 <= x < 30 for x in (a, b, c, d, e, f))
        assert item.answer == str(a + b * c + d - e * f)
    assert len({item.id for item in items}) == 50


def test_a_task_prompt_asks_for_the_rules_format():
    task = load_task("arithmetic", n=1, seed=0)
    assert task.prompt(task.items[0]).endswith("`Answer: <number>`.")


def test_the_shipped_gsm8k_subset_and_its_licence():
    data = resources.files("parley.evals").joinpath("data")
    records = [json.loads(line) for line in data.joinpath(GSM8K_FILE).read_text().splitlines()]
    assert len(records) == 100 and len({r["id"] for r in records}) == 100
    for record in records:
        assert record["id"].startswith("gsm8k-test-") and record["question"].strip()
        assert record["answer"] == canonical_number(record["solution"].rsplit("####", 1)[1])
    assert "MIT License" in data.joinpath("GSM8K-LICENSE").read_text()
    task = load_task("gsm8k", n=100, seed=0)
    assert len(task.items) == 100 and task.rule.name == "number"


def test_gsm8k_order_depends_on_the_seed_only():
    assert load_task("gsm8k", n=5, seed=1).items == load_task("gsm8k", n=5, seed=1).items
    assert load_task("gsm8k", n=5, seed=1).items != load_task("gsm8k", n=5, seed=2).items


def test_the_subset_selection_is_reproducible():
    lines = [json.dumps({"question": f"q{i}", "answer": f"work\n#### {i:,}"}) for i in range(2000)]
    subset = select_gsm8k_subset(lines, size=10, seed=3)
    assert subset == select_gsm8k_subset(lines, size=10, seed=3)
    indices = [int(r["id"].rsplit("-", 1)[1]) for r in subset]
    assert indices == sorted(indices) and len(set(indices)) == 10
    assert all(r["answer"] == str(i) for r, i in zip(subset, indices))


def test_a_jsonl_task(tmp_path):
    path = tmp_path / "capitals.jsonl"
    path.write_text('{"question": "Capital of France?", "answer": "Paris"}\n\n'
                    '{"id": "it", "question": "Capital of Italy?", "answer": "Rome"}\n')
    task = load_task(str(path), n=2, seed=0, rule="exact")
    assert sorted(item.id for item in task.items) == ["it", "line-1"]
    assert task.rule.name == "exact"


@pytest.mark.parametrize(("content", "rule", "message"), [
    ('{"question": "Q?"}\n', "exact", "line 1: 'answer' must be a non-empty string or number"),
    ('{"question": "Q?", "answer": "A"}\nnot json\n', "exact", "line 2: not valid JSON"),
    ('["Q?", "A"]\n', "exact", "line 1: expected an object"),
    ('{"id": 1, "question": "Q", "answer": "A"}\n{"id": 1, "question": "R", "answer": "B"}\n', "exact",
     "line 2: id '1' is used twice"),
    ("\n", "exact", "holds no items"),
    ('{"question": "Q?", "answer": "A"}\n', None, "needs --answer-rule"),
    ('{"question": "Q?", "answer": "A"}\n', "numbers", "unknown answer rule"),
    ('{"question": "Q?", "answer": "many"}\n', "number", "cannot read the gold answer of 1 item"),
    ('{"question": "Q?", "answer": "A"}\n', "choice", None),  # fine, but --n 2 is too many
])
def test_bad_jsonl_tasks_are_named(tmp_path, content, rule, message):
    path = tmp_path / "task.jsonl"
    path.write_text(content)
    with pytest.raises(TaskError, match=re.escape(message or "has 1 items; --n 2 asks for more")):
        load_task(str(path), n=2, seed=0, rule=rule)


def test_unknown_tasks_and_bad_sizes(tmp_path):
    with pytest.raises(TaskError, match="unknown task 'gsm9k'"):
        load_task("gsm9k", n=1, seed=0)
    with pytest.raises(TaskError, match="cannot read"):
        load_task(str(tmp_path / "missing.jsonl"), n=1, seed=0, rule="exact")
    with pytest.raises(TaskError, match="--n must be at least 1"):
        load_task("arithmetic", n=0, seed=0)
    with pytest.raises(TaskError, match="gsm8k has 100 items"):
        load_task("gsm8k", n=101, seed=0)
    with pytest.raises(TaskError, match="answers are numbers"):
        load_task("arithmetic", n=1, seed=0, rule="exact")
