"""Judge bias: how often the duel's judge changes its verdict when two answers swap places, and how often
it agrees with people who labelled the better answer.

Each pair `{question, answer_a, answer_b, label?}` goes to the duel's own judge node (`nodes.judge.judge`
as the duel configures it, `graphs.duel.judge_debate`, with its retry policy), once in the given order and once swapped, exactly as a duel is judged:
the question is the topic and each answer one speaker's turn. Records are appended to
`DIR/judgements.jsonl` as they finish, so a run resumes like `parley eval run` does.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from parley.evals.runner import ItemStore, prepare_folder, run_jobs
from parley.evals.scoring import bootstrap_interval, mean
from parley.evals.tasks import TaskError, jsonl_records
from parley.graphs.duel import JUDGE_RETRY, DuelContext, judge_both_orders, judge_debate
from parley.llm.factory import ModelFactory
from parley.nodes.judge import agreed_winner

__all__ = ["JudgePair", "judge_pairs", "load_pairs", "summarise_judgements"]

JUDGE_SETTINGS, JUDGEMENTS_FILE, JUDGE_JSON, JUDGE_MD = "judge-run.json", "judgements.jsonl", "judge.json", "judge.md"
LABELS = ("A", "B", "tie")
# The speakers' names; the judge only ever sees "Speaker A" and "Speaker B" in their place.
NAMES = {"user": "First respondent", "opponent": "Second respondent"}


@dataclass(frozen=True)
class JudgePair:
    """A pair: the question, the two answers, and an optional human label (A, B or tie)."""

    id: str
    question: str
    answer_a: str
    answer_b: str
    label: str | None = None


class JudgeState(TypedDict, total=False):
    topic: str
    user_profile: dict
    opponent_profile: dict
    messages: list[dict]
    verdicts: Annotated[list[dict], operator.add]


def build_judge_graph() -> StateGraph:
    """The duel's judging step on its own: the transcript judged twice, the second time with the order swapped."""
    builder = StateGraph(JudgeState, context_schema=DuelContext)
    builder.add_node("judge", judge_debate, retry_policy=JUDGE_RETRY)
    builder.add_conditional_edges(START, judge_both_orders, ["judge"])
    builder.add_edge("judge", END)
    return builder


judge_graph = build_judge_graph().compile(name="judge_bias")


def load_pairs(path: Path) -> list[JudgePair]:
    """Read a JSONL of pairs; raise TaskError naming the line of anything missing or malformed."""
    pairs = []
    for pair_id, number, record in jsonl_records(path, "question, answer_a and answer_b"):
        for key in ("question", "answer_a", "answer_b"):
            if not isinstance(record.get(key), str) or not record[key].strip():
                raise TaskError(f"{path}, line {number}: '{key}' must be a non-empty string")
        label = record.get("label")
        if label is not None and label not in LABELS:
            raise TaskError(f"{path}, line {number}: 'label' must be A, B or tie (got {label!r})")
        pairs.append(JudgePair(pair_id, record["question"], record["answer_a"], record["answer_b"], label))
    if not pairs:
        raise TaskError(f"{path} holds no pairs")
    return pairs


async def judge_pair(pair: JudgePair, *, factory: ModelFactory, model: str) -> dict[str, Any]:
    """Judge one pair in both orders; the record written to judgements.jsonl."""
    ctx = DuelContext(models=factory, model=model)
    result = await judge_graph.ainvoke({
        "topic": pair.question,
        "user_profile": {"name": NAMES["user"]},
        "opponent_profile": {"name": NAMES["opponent"]},
        "messages": [
            {"role": "user", "name": NAMES["user"], "content": pair.answer_a},
            {"role": "opponent", "name": NAMES["opponent"], "content": pair.answer_b},
        ],
    }, context=ctx)
    # The judge names the winning role; answer A was the user's turn, answer B the opponent's.
    winner = {"user": "A", "opponent": "B", "tie": "tie"}
    verdicts = {v["order"]: winner[v["winner"]] for v in result["verdicts"]}
    given, swapped = verdicts["as_debated"], verdicts["swapped"]
    combined = agreed_winner(given, swapped)  # the duel's own rule for two judgements
    return {
        "item": pair.id,
        "label": pair.label,
        "as_given": given,
        "swapped": swapped,
        "flipped": given != swapped,
        # Which answer was shown first in each order: A as given, B swapped.
        "first_shown_won": [given == "A", swapped == "B"],
        "verdict": combined,
        "agrees": None if pair.label in (None, "tie") else combined == pair.label,
        "tokens": ctx.ledger.total_tokens,
        "cost": ctx.ledger.total_cost,
        "calls": len(ctx.ledger.records),
    }


def summarise_judgements(records: list[dict[str, Any]], *, seed: int, model: str, pairs: str) -> dict[str, Any]:
    """Flip rate, first-position win rate and human agreement, each with a 95 % bootstrap interval."""
    def rate(outcomes: list[bool]) -> dict[str, Any]:
        if not outcomes:
            return {"n": 0, "rate": None, "ci_low": None, "ci_high": None}
        interval = bootstrap_interval([1.0 if o else 0.0 for o in outcomes], seed=seed)
        return {"n": len(outcomes), "rate": round(interval.value, 4), "ci_low": round(interval.low, 4),
                "ci_high": round(interval.high, 4)}

    decisive = [won for r in records for won, verdict in zip(r["first_shown_won"], (r["as_given"], r["swapped"]))
                if verdict != "tie"]
    return {
        "pairs": pairs,
        "model": model,
        "n": len(records),
        "position_flip": rate([r["flipped"] for r in records]),
        "first_position_wins": rate(decisive),
        "human_agreement": rate([r["agrees"] for r in records if r["agrees"] is not None]),
        "tokens_per_pair": round(mean([r["tokens"] for r in records]), 1),
        "cost_per_pair": round(mean([r["cost"] for r in records]), 8),
        "interval": "95% percentile bootstrap over pairs (2000 resamples, seeded)",
    }


def judge_markdown(doc: dict[str, Any]) -> str:
    rows = [
        ("position flip rate", doc["position_flip"],
         "verdict changes when the answers swap places (0 is ideal)"),
        ("first-shown answer wins", doc["first_position_wins"],
         "share of non-tie verdicts won by the answer shown first (0.5 is unbiased)"),
        ("agreement with humans", doc["human_agreement"],
         "both-orders verdict equals the human label, on pairs labelled A or B (a judge tie counts as disagreement)"),
    ]
    lines = [f"# Judge bias: `{doc['model']}` on {doc['pairs']} ({doc['n']} pairs)", "",
             "| measure | n | rate | 95% CI | meaning |", "|---|---:|---:|---|---|"]
    for name, value, meaning in rows:
        shown = "—" if value["rate"] is None else f"{value['rate']:.3f}"
        interval = "—" if value["ci_low"] is None else f"[{value['ci_low']:.3f}, {value['ci_high']:.3f}]"
        lines.append(f"| {name} | {value['n']} | {shown} | {interval} | {meaning} |")
    lines += ["", f"Tokens per pair: {doc['tokens_per_pair']:.0f}; cost per pair: ${doc['cost_per_pair']:.6f}.",
              f"Intervals: {doc['interval']}."]
    return "\n".join(lines) + "\n"


async def judge_pairs(pairs: list[JudgePair], source: str, folder: Path, *, factory: ModelFactory, model: str,
                      seed: int,
                      concurrency: int = 4, started: Callable[[int, int], None] = lambda total, done: None,
                      finished: Callable[[dict[str, Any]], None] = lambda record: None,
                      failed: Callable[[str, str], None] = lambda pair_id, error: None) -> dict[str, Any]:
    """Judge every pair (read by `load_pairs` from `source`) not yet recorded under `folder`, then write
    judge.json and judge.md there.

    Raises:
        RunSettingsMismatch: `folder` holds a judge run of other pairs, another model or seed.
    """
    settings = {"pairs": source, "model": model, "seed": seed, "item_ids": [p.id for p in pairs]}
    prepare_folder(folder, settings, JUDGE_SETTINGS)
    store = ItemStore(folder, JUDGEMENTS_FILE)
    records = store.load()
    done = {r["item"] for r in records}
    started(len(pairs), len(done))

    def record_finished(record: dict[str, Any]) -> None:
        records.append(record)
        finished(record)

    jobs = [(pair.id, partial(judge_pair, pair, factory=factory, model=model)) for pair in pairs if pair.id not in done]
    await run_jobs(jobs, store=store, concurrency=concurrency, finished=record_finished, failed=failed)
    doc = summarise_judgements(records, seed=seed, model=model, pairs=Path(source).name)
    (folder / JUDGE_JSON).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    (folder / JUDGE_MD).write_text(judge_markdown(doc), encoding="utf-8")
    return doc

