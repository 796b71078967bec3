"""Convergence holds for any stances and claims a model states: scores stay in [0, 1], do not depend on the order
the seats are listed in, and two claims contradict each other whichever is read first (nodes/convergence.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from parley.nodes.convergence import (
    STANCES,
    Position,
    agreement,
    contradicts,
    convergence_score,
    pair_agreement,
    positions_of,
    stability,
)
from tests.support.strategies import PROPERTY, strings, text

# Claims built from words the negation reading cares about, so that "safe" meets "unsafe" and "not safe" often.
WORDS = ["safe", "unsafe", "ununsafe", "not", "never", "isn't", "it", "is", "plan", "unplan", "Safe", "安全", "😀"]
claims = st.one_of(st.lists(st.sampled_from(WORDS), max_size=5).map(" ".join), text)
stances = st.one_of(st.sampled_from(STANCES), strings(max_size=8))
confidences = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5))
positions = st.builds(Position, agent_id=st.sampled_from(["a", "b", "c", "d", "e"]), stance=stances,
                      confidence=confidences, claim=claims)
tables = st.lists(positions, max_size=6)


@settings(PROPERTY, max_examples=600)  # cheap, and a prefix that folds one way only takes a few hundred to meet
@given(a=claims, b=claims)
def test_contradiction_is_symmetric(a, b):
    assert contradicts(a, b) is contradicts(b, a)
    assert contradicts(a, a) is False


@PROPERTY
@given(a=positions, b=positions)
def test_pair_agreement_is_in_the_unit_interval_and_symmetric(a, b):
    value = pair_agreement(a, b)
    assert 0.0 <= value <= 1.0
    assert value == pair_agreement(b, a)


@PROPERTY
@given(current=tables, previous=tables, shuffle=st.randoms(use_true_random=False))
def test_scores_are_in_the_unit_interval_whatever_the_seat_order(current, previous, shuffle):
    table = agreement(current)
    settled = stability(current, previous)
    score = convergence_score(current, previous)
    alone = convergence_score(current)
    for value in (table, settled, score, alone):
        assert 0.0 <= value <= 1.0
    assert score == round(score, 4) and alone == round(table, 4)
    reordered = list(current)
    shuffle.shuffle(reordered)
    assert abs(agreement(reordered) - table) < 1e-9
    assert convergence_score(current, previous) == score  # the same round, the same score


@PROPERTY
@given(messages=st.lists(st.fixed_dictionaries(
    {"agentId": st.sampled_from(["a", "b", "c"]), "roundNumber": st.integers(0, 3)},
    optional={"stance": st.one_of(st.none(), stances), "confidence": confidences,
              "keyPoint": st.one_of(st.none(), claims), "isDevilsAdvocate": st.booleans()},
), max_size=10), round_number=st.integers(0, 3))
def test_positions_of_reads_the_regular_agents_of_one_round(messages, round_number):
    expected = [m for m in messages if m["roundNumber"] == round_number and not m.get("isDevilsAdvocate")]
    found = positions_of(messages, round_number)
    assert [p.agent_id for p in found] == [m["agentId"] for m in expected]
    assert all(p.stance and isinstance(p.confidence, float) and isinstance(p.claim, str) for p in found)
