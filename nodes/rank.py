"""Peer review: each author ranks the other authors' anonymised answers, never its own, and a Borda count ranks them
all (the panel's `rank` rule).

    REVIEWS = FanOut(node="review", results_key="reviews", tolerate=is_model_failure, failure=review_failure)
    builder.add_node("review", rank(context=PanelContext), **REVIEWS.node_options(then="count_ranks",
                                                                                  retry=REVIEW_RETRY))
    orders = review_orders(len(answers), seed)           # who reads what, in which order
    scores = borda([r["ranking"] for r in reviews], len(answers))

Every reviewer reads the others' answers in an order of its own, shuffled by a generator seeded with the run's seed
and the reviewer's position: no answer is always read first, and the same seed reads the same orders again. The
answers are shown as the arbitrator sees them (`nodes.arbitrate.arbitration_messages`: Answer A, B, C in the
reviewer's order, authors' model names redacted). A ranking still unreadable on its last attempt, or a reviewer
whose model failed, abstains; the Borda score is the mean over the reviews an answer received, so an abstention
costs no answer its points.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from functools import cache
from typing import Any, Literal, NotRequired

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field, create_model, field_validator
from typing_extensions import TypedDict  # pydantic's schemas need these before Python 3.12

from parley.llm.failures import classify_failure, describe_failure
from parley.nodes.anonymise import Anonymiser
from parley.nodes.arbitrate import ANSWER_LETTERS, arbitration_messages
from parley.nodes.bounds import Clipped
from parley.nodes.context import RunContext
from parley.nodes.events import emit
from parley.nodes.prompts import decide as prompts
from parley.nodes.structured import ask_structured, node_attempt, structured_retry

__all__ = ["REVIEW_ATTEMPTS", "REVIEW_RETRY", "ReviewTask", "borda", "rank", "ranking_schema", "review_failure",
           "review_orders"]

log = logging.getLogger("parley.rank")

# How many times a reviewer is asked for a readable ranking before it abstains; its node's retry policy.
REVIEW_ATTEMPTS = 2
REVIEW_RETRY = structured_retry(REVIEW_ATTEMPTS)
# A ranking is a verdict, not a composition.
REVIEW_TEMPERATURE = 0.0


def review_orders(count: int, seed: int | str) -> list[list[int]]:
    """For each of `count` authors, the positions of the others' answers in the order it reads them (never its own):
    shuffled by `random.Random` seeded with `seed` and the reviewer's position, so each reviewer has its own order
    and the same seed always gives the same orders.

    >>> review_orders(3, 7) == review_orders(3, 7)
    True
    >>> [sorted(order) for order in review_orders(3, 7)]
    [[1, 2], [0, 2], [0, 1]]
    """
    orders = []
    for reviewer in range(count):
        others = [i for i in range(count) if i != reviewer]
        # Seeded with the text's UTF-8 bytes, as random.Random does with a str, but a lone surrogate (no character,
        # so no UTF-8) is kept rather than refused: every other seed reads the same orders as before.
        random.Random(f"{seed}:{reviewer}".encode("utf-8", "surrogatepass")).shuffle(others)
        orders.append(others)
    return orders


@cache
def ranking_schema(letters: str) -> type[BaseModel]:
    """A reviewer's answer when the answers are shown as `letters` (one class per set, so a model call's schema is
    built once): every letter exactly once, best first, and why."""

    def every_letter_once(cls: type, value: list[str]) -> list[str]:
        if sorted(value) != sorted(letters):
            raise ValueError(f"rank every one of {', '.join(letters)} exactly once, not {value}")
        return value

    return create_model(
        "Ranking",
        __doc__="A reviewer's ranking of the answers it read.",
        __validators__={"every_letter_once": field_validator("ranking")(classmethod(every_letter_once))},
        ranking=(list[Literal[tuple(letters)]], Field(
            min_length=len(letters), max_length=len(letters),
            description="Every answer's letter exactly once, the best first.")),
        reason=(Clipped(300), Field(description="One or two sentences on why the first is the best.")),
    )


class ReviewTask(TypedDict):
    """What one reviewer receives through `Send`."""

    index: int  # the reviewer's own answer's position in `answers`
    reviewer: str  # the name it goes by (its seat's label)
    model: str  # called and priced
    messages: list[dict]  # the conversation the answers answer
    system_prompt: NotRequired[str | None]
    answers: list[dict]  # every answer, `{model, model_id?, answer}`, in panel order
    order: list[int]  # the positions it reads, in its order (`review_orders`)


def rank(
    *,
    context: type[RunContext] = RunContext,
    temperature: float | None = REVIEW_TEMPERATURE,
    attempts: int = REVIEW_ATTEMPTS,
    output_key: str = "reviews",
    label: str = "reviewer",
):
    """Build the reviewer node: one reviewer model ranks the anonymised answers it is shown, best first.

    The node reads a `ReviewTask` (sent once per reviewer, each reading the answers in its own order) and the panel's
    `rank` rule counts the rankings (a Borda count); a ranking still unreadable on the last attempt abstains.

    Writes `{index, reviewer, model, success, ranking, shown, reason}` to `output_key` (a list with
    `operator.add`): `ranking` the positions in `answers` best first (None when the ranking stayed unreadable),
    `shown` the order it read them in. Each ranking goes out as a `review` event too.

    Args:
        context: the run context class the node reads.
        temperature: the reviewers' sampling temperature.
        attempts: the node's attempts (its retry policy's `max_attempts`, see `REVIEW_RETRY`).
        output_key: the state key of the reviews.
        label: the usage label of its calls (the reviewer's name is added).

    Returns:
        The async node `(task, runtime) -> update`, named `review`.

    Example:
        ```python
        # One review per panelist, sent on a FanOut (the panel's `rank` rule, parley.graphs.panel.rules, shortened)
        reviews = parley.FanOut(node="review", results_key="reviews", tolerate=is_model_failure,
                                failure=review_failure)
        builder.add_node("review", parley.rank(context=parley.PanelContext),
                         **reviews.node_options(then="count_ranks", retry=REVIEW_RETRY))
        builder.add_conditional_edges("tally", reviews.dispatch(review_tasks), ["review"])
        ```
    """

    async def review_answers(task: ReviewTask, runtime: Runtime) -> dict[str, Any]:
        """Rank the other panelists' anonymised answers, in this reviewer's own order."""
        ctx = context.of(runtime)
        order = task["order"]
        shown = [task["answers"][i] for i in order]
        letters = ANSWER_LETTERS[: len(shown)]
        model = task["model"]
        prompt = arbitration_messages(
            task["messages"], shown, system_prompt=task.get("system_prompt"), instructions=prompts.RANK_SYSTEM,
            request=prompts.RANK_REQUEST, prompt_budget=ctx.factory.prompt_budget(model, None),
        )
        structured = ctx.structured(ranking_schema(letters), model, temperature=temperature,
                                    label=f"{label}:{task['reviewer']}")

        def abstain(exc: BaseException) -> None:
            log.warning("ranking of reviewer %s unreadable (%s); it abstains", task["reviewer"],
                        exc.__class__.__name__)

        ranked = await ask_structured(structured, prompt, fallback=abstain,
                                      attempt=node_attempt(runtime, default=attempts), attempts=attempts)
        names = Anonymiser({a["model"]: f"Answer {letters[i]}" for i, a in enumerate(shown)}, min_length=0)
        record = {
            "index": task["index"], "reviewer": task["reviewer"], "model": model, "success": ranked is not None,
            "ranking": None if ranked is None else [order[letters.index(letter)] for letter in ranked.ranking],
            "shown": list(order), "reason": "" if ranked is None else names.reveal(ranked.reason),
        }
        emit({"event": "review", **public_review(record, task["answers"])})
        return {output_key: [record]}

    review_answers.__name__ = "review"
    return review_answers


def review_failure(task: ReviewTask, exc: BaseException) -> dict[str, Any]:
    """The review recorded for a reviewer whose model call failed (its retries spent): it abstains."""
    record = {"index": task["index"], "reviewer": task["reviewer"], "model": task["model"], "success": False,
              "ranking": None, "shown": list(task["order"]), "reason": "", "error": classify_failure(exc),
              "detail": describe_failure(exc)}
    emit({"event": "review", **public_review(record, task["answers"])})
    return record


def public_review(record: dict[str, Any], answers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A review as a client reads it: authors by name rather than by position."""
    def names(positions: Sequence[int] | None) -> list[str] | None:
        return None if positions is None else [answers[i]["model"] for i in positions]

    out = {"reviewer": record["reviewer"], "success": record["success"], "ranking": names(record["ranking"]),
           "shown": names(record["shown"]), "reason": record["reason"]}
    if "error" in record:
        out["error"] = record["error"]
    return out


def borda(rankings: Sequence[Sequence[int] | None], count: int) -> list[dict[str, Any]]:
    """The Borda count of `rankings` (each a list of distinct positions in `range(count)`, best first, as the reviewers'
    validated rankings are; None abstains):
    a ranking of m answers gives m - 1 points to its first, m - 2 to its second, ... 0 to its last. An answer's
    score is its points over the reviews it received, so answers compare fairly when a reviewer abstained.

    Returns one entry per answer, `{index, points, reviews, score}`, best score first (position on ties).

    >>> [(s["index"], s["score"]) for s in borda([[1, 2], [0, 2], [1, 0]], 3)]
    [(1, 1.0), (0, 0.5), (2, 0.0)]
    """
    points, reviews = [0] * count, [0] * count
    for ranking in rankings:
        if ranking is None:
            continue
        for place, index in enumerate(ranking):
            points[index] += len(ranking) - 1 - place
            reviews[index] += 1
    scores = [{"index": i, "points": points[i], "reviews": reviews[i],
               "score": round(points[i] / reviews[i], 4) if reviews[i] else 0.0} for i in range(count)]
    return sorted(scores, key=lambda s: -s["score"])
