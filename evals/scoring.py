"""Scores of a run: accuracy with seeded bootstrap intervals, per-item averages, and equal-budget matching."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Interval", "bootstrap_interval", "matched_samples", "mean", "paired_difference_interval"]

BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    """A point estimate and its two-sided interval."""

    value: float
    low: float
    high: float


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def bootstrap_interval(outcomes: Sequence[float], *, seed: int, level: float = 0.95,
                       resamples: int = BOOTSTRAP_RESAMPLES) -> Interval:
    """The mean of `outcomes` (1/0 for right/wrong) and its percentile bootstrap interval.

    `resamples` samples of the same size are drawn with replacement from `outcomes` by
    `random.Random(seed)`, so the same data and seed always give the same interval. The interval is
    the (1-level)/2 and (1+level)/2 quantiles of their means. Empty data gives NaN throughout.
    """
    n = len(outcomes)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan)
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(outcomes, k=n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    low = means[max(0, math.floor(tail * resamples))]
    high = means[min(resamples - 1, math.ceil((1 - tail) * resamples) - 1)]
    return Interval(mean(outcomes), low, high)


def paired_difference_interval(first: Sequence[float], second: Sequence[float], *, seed: int,
                               level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES) -> Interval:
    """The mean of `first` minus the mean of `second`, two methods' outcomes on the same items in the same order, and
    its paired percentile bootstrap interval.

    Paired: each resample draws items, not outcomes, so an item keeps both of its outcomes. The mean of the per-item
    differences over a resample is the difference of the two means over it, so this is `bootstrap_interval` of the
    differences (the same seed, the same interval). Two methods right and wrong on the same items differ by 0, with
    an interval of [0, 0], however wide each one's own interval is.

    Raises:
        ValueError: the two hold outcomes of different numbers of items.
    """
    if len(first) != len(second):
        raise ValueError(f"paired outcomes must cover the same items: {len(first)} against {len(second)}")
    return bootstrap_interval([a - b for a, b in zip(first, second)], seed=seed, level=level, resamples=resamples)


def matched_samples(target_tokens: float, tokens_per_sample: float, *, minimum: int = 1) -> int:
    """How many samples cost as many tokens as `target_tokens`: the nearest whole number, at least `minimum`.

    Self-consistency's k under `--match-budget`: the debate's tokens per item over one sample's tokens
    per item (measured by the `single` method on the same items).
    """
    if tokens_per_sample <= 0:
        raise ValueError("one sample's token cost must be positive to match a budget")
    return max(minimum, round(target_tokens / tokens_per_sample))
