"""Bootstrap intervals (one method, and two paired over items) on data whose answer is known, and equal-budget
matching."""

from __future__ import annotations

import math

import pytest

from parley.evals.scoring import bootstrap_interval, matched_samples, paired_difference_interval


def test_constant_outcomes_have_no_spread():
    assert bootstrap_interval([1.0] * 30, seed=1) == (bootstrap_interval([1.0] * 30, seed=2))
    interval = bootstrap_interval([0.0] * 30, seed=1)
    assert (interval.value, interval.low, interval.high) == (0.0, 0.0, 0.0)


def test_half_right_out_of_100_matches_the_normal_approximation():
    outcomes = [1.0, 0.0] * 50
    interval = bootstrap_interval(outcomes, seed=7)
    half_width = 1.96 * math.sqrt(0.5 * 0.5 / 100)  # ≈ 0.098
    assert interval.value == 0.5
    assert interval.low == pytest.approx(0.5 - half_width, abs=0.02)
    assert interval.high == pytest.approx(0.5 + half_width, abs=0.02)
    assert interval.low < 0.5 < interval.high


def test_a_small_sample_gives_a_wide_interval_that_holds_its_mean():
    interval = bootstrap_interval([1.0, 1.0, 1.0, 0.0, 0.0], seed=3)  # 3 of 5
    assert interval.value == 0.6
    assert interval.low <= 0.2 and interval.high >= 1.0 - 1e-9
    # Every bootstrap mean of 5 items is a multiple of 0.2.
    assert round(interval.low * 5, 9) == int(round(interval.low * 5))


def test_the_seed_makes_intervals_reproducible():
    data = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert bootstrap_interval(data, seed=11) == bootstrap_interval(data, seed=11)


def test_no_data_gives_no_interval():
    assert all(math.isnan(v) for v in vars(bootstrap_interval([], seed=0)).values())


@pytest.mark.parametrize(("debate", "sample", "k"), [
    (600.0, 100.0, 6),
    (650.0, 100.0, 6),  # 6.5 rounds to the even 6
    (680.0, 100.0, 7),
    (40.0, 100.0, 1),  # never fewer than one sample
])
def test_matched_samples_spend_the_debates_tokens(debate, sample, k):
    assert matched_samples(debate, sample) == k


def test_matching_needs_a_positive_sample_cost():
    with pytest.raises(ValueError, match="positive"):
        matched_samples(600.0, 0.0)


def test_two_methods_right_on_the_same_items_differ_by_exactly_nothing():
    outcomes = [1.0, 0.0] * 20  # each alone: 0.5 with an interval about ±0.15 wide
    assert bootstrap_interval(outcomes, seed=4).high - bootstrap_interval(outcomes, seed=4).low > 0.2
    interval = paired_difference_interval(outcomes, list(outcomes), seed=4)
    assert (interval.value, interval.low, interval.high) == (0.0, 0.0, 0.0)


def test_the_paired_difference_resamples_items_not_outcomes():
    # The first method is right on the second's 50 items and on 10 more: +0.10, its differences ten 1s and ninety 0s.
    second = [1.0] * 50 + [0.0] * 50
    first = [1.0] * 60 + [0.0] * 40
    interval = paired_difference_interval(first, second, seed=7)
    half_width = 1.96 * math.sqrt(0.1 * 0.9 / 100)  # ≈ 0.059; unpaired, two accuracies near 0.55 give about 0.14
    assert interval.value == pytest.approx(0.1)
    assert interval.low == pytest.approx(0.1 - half_width, abs=0.02) and interval.low > 0
    assert interval.high == pytest.approx(0.1 + half_width, abs=0.02)
    assert interval == bootstrap_interval([a - b for a, b in zip(first, second)], seed=7)
    flipped = paired_difference_interval(second, first, seed=7)
    assert flipped.value == pytest.approx(-0.1) and flipped.high < 0  # the sign is first minus second


def test_paired_outcomes_must_cover_the_same_items():
    with pytest.raises(ValueError, match="3 against 2"):
        paired_difference_interval([1.0, 0.0, 1.0], [1.0, 0.0], seed=0)
    assert math.isnan(paired_difference_interval([], [], seed=0).value)
