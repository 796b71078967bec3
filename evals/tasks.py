"""Evaluation tasks: Du et al.'s arithmetic generator, the shipped GSM8K subset, and any JSONL of questions.

A task is a list of `Item`s (id, question, gold answer) and the `AnswerRule` that reads answers to
them. `load_task` picks the first `n` items in an order fixed by the seed, so a run is reproducible
and a second seed draws a different sample.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from parley.evals import prompts
from parley.nodes.answers import AnswerRule, canonical_number, parse_rule

__all__ = ["Item", "Task", "TaskError", "arithmetic_items", "load_task", "select_gsm8k_subset"]

GSM8K_FILE = "gsm8k_test_100.jsonl"
# How the shipped subset was drawn from GSM8K's test.jsonl (1,319 items; see docs/eval.md).
GSM8K_SUBSET_SEED, GSM8K_SUBSET_SIZE = 2023, 100


class TaskError(ValueError):
    """A task cannot be loaded: an unknown name, an unreadable file, a line without a question or answer."""


@dataclass(frozen=True)
class Item:
    id: str
    question: str
    answer: str


@dataclass(frozen=True)
class Task:
    name: str
    items: list[Item]
    rule: AnswerRule

    def prompt(self, item: Item) -> str:
        """The question as every method asks it: the item's text and the rule's answer-format instruction."""
        return prompts.QUESTION.format(question=item.question, instruction=self.rule.instruction)


def arithmetic_items(n: int, seed: int) -> list[Item]:
    """`n` expressions `a+b*c+d-e*f` of six integers drawn uniformly from 0-29, as in Du et al. (2023)."""
    rng = random.Random(seed)
    items = []
    for index in range(n):
        a, b, c, d, e, f = (rng.randrange(30) for _ in range(6))
        expression = f"{a}+{b}*{c}+{d}-{e}*{f}"
        items.append(Item(f"arithmetic-{seed}-{index}", prompts.ARITHMETIC_QUESTION.format(expression=expression),
                          str(a + b * c + d - e * f)))
    return items


def gsm8k_final_answer(solution: str) -> str:
    """The number after GSM8K's `####` marker, canonical (`"1,000"` → `"1000"`)."""
    _, marker, tail = solution.rpartition("####")
    value = canonical_number(tail.strip()) if marker else None
    if value is None:
        raise TaskError(f"a GSM8K solution without a readable '#### <number>' line: {solution[-80:]!r}")
    return value


def select_gsm8k_subset(lines: list[str], *, size: int = GSM8K_SUBSET_SIZE,
                        seed: int = GSM8K_SUBSET_SEED) -> list[dict]:
    """Draw the shipped subset from GSM8K's test.jsonl lines: `size` distinct indices by `random.Random(seed)`,
    in file order, each kept with its question, final answer and worked solution."""
    chosen = sorted(random.Random(seed).sample(range(len(lines)), size))
    subset = []
    for index in chosen:
        record = json.loads(lines[index])
        subset.append({"id": f"gsm8k-test-{index}", "question": record["question"],
                       "answer": gsm8k_final_answer(record["answer"]), "solution": record["answer"]})
    return subset


def gsm8k_items() -> list[Item]:
    text = resources.files("parley.evals").joinpath("data", GSM8K_FILE).read_text(encoding="utf-8")
    return [Item(r["id"], r["question"], r["answer"]) for r in map(json.loads, text.splitlines()) if r]


def jsonl_records(path: Path, expected: str) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """`(id, line number, object)` for each non-blank line of a JSONL file of objects (`expected` says what
    each should hold, for the error); an `id` is optional (the line number stands in) and must be unique.

    Raises:
        TaskError: the file cannot be read, or a line is not JSON, not an object, or repeats an id.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TaskError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise TaskError(f"{path} is not UTF-8 text: {exc}") from exc
    seen = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskError(f"{path}, line {number}: not valid JSON ({exc.msg})") from exc
        if not isinstance(record, dict):
            raise TaskError(f"{path}, line {number}: expected an object with {expected}")
        record_id = str(record.get("id", f"line-{number}"))
        if record_id in seen:
            raise TaskError(f"{path}, line {number}: id {record_id!r} is used twice")
        seen.add(record_id)
        yield record_id, number, record


def jsonl_items(path: Path) -> list[Item]:
    """Items of a JSONL file of `{question, answer}` objects (an `id` is optional; the line number stands in)."""
    items = []
    for item_id, number, record in jsonl_records(path, "'question' and 'answer'"):
        for key in ("question", "answer"):
            value = record.get(key)
            if not isinstance(value, str | int | float) or isinstance(value, bool) or not str(value).strip():
                raise TaskError(f"{path}, line {number}: '{key}' must be a non-empty string or number")
        items.append(Item(item_id, str(record["question"]), str(record["answer"])))
    if not items:
        raise TaskError(f"{path} holds no items")
    return items


def load_task(name: str, *, n: int, seed: int, rule: str | None = None) -> Task:
    """Load `arithmetic`, `gsm8k` or a JSONL file (with an answer rule) and pick `n` items by `seed`.

    Raises:
        TaskError: unknown task, unreadable file, bad rule, a gold answer the rule cannot read, or fewer
            than `n` items.
    """
    if n < 1:
        raise TaskError(f"--n must be at least 1 (got {n})")
    if name == "arithmetic":
        if rule not in (None, "number"):
            raise TaskError("arithmetic answers are numbers: leave out --answer-rule or use number")
        return Task(name, arithmetic_items(n, seed), parse_rule("number"))
    if name == "gsm8k":
        if rule not in (None, "number"):
            raise TaskError("gsm8k answers are numbers: leave out --answer-rule or use number")
        pool, answer_rule = gsm8k_items(), parse_rule("number")
    else:
        path = Path(name)
        if path.suffix != ".jsonl" and not path.exists():
            raise TaskError(f"unknown task {name!r}: use arithmetic, gsm8k, or the path of a .jsonl file")
        if rule is None:
            raise TaskError(f"{name}: a JSONL task needs --answer-rule (number, choice, exact or regex:<pattern>)")
        try:
            answer_rule = parse_rule(rule)
        except ValueError as exc:
            raise TaskError(str(exc)) from exc
        pool = jsonl_items(path)
    unreadable = [item.id for item in pool if answer_rule.canonical_gold(item.answer) is None]
    if unreadable:
        raise TaskError(f"{name}: the {answer_rule.name} rule cannot read the gold answer of "
                        f"{len(unreadable)} item(s), e.g. {unreadable[0]!r}")
    if n > len(pool):
        raise TaskError(f"{name} has {len(pool)} items; --n {n} asks for more")
    order = list(pool)
    random.Random(seed).shuffle(order)
    return Task(name, order[:n], answer_rule)
