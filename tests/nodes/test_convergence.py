"""Convergence scores on constructed tables: unanimous, split, negation, one holdout, and how positions moved."""

from __future__ import annotations

from parley.nodes.convergence import (
    Position,
    agreement,
    contradicts,
    convergence_score,
    majority_stance,
    positions_of,
    strongest_consensus,
)

THRESHOLD = 0.85


def table(*stances: str, confidence: float = 0.8, claims: tuple[str, ...] | None = None) -> list[Position]:
    claims = claims or tuple("" for _ in stances)
    return [Position(f"a{i}", s, confidence, c) for i, (s, c) in enumerate(zip(stances, claims, strict=True))]


def test_unanimous_and_settled_table_converges():
    now = table("for", "for", "for", "for")
    assert convergence_score(now, previous=now) >= THRESHOLD
    assert agreement(now) > 0.9


def test_split_table_does_not_converge_however_settled():
    now = table("for", "for", "against", "against")
    assert convergence_score(now, previous=now) < 0.6


def test_sounding_alike_is_not_agreeing():
    # Identical prose, opposite stances: text similarity would say 1.0; the score must not.
    same_words = "Opening the Lyon office now is a reasonable bet given the letters of intent."
    now = [Position("a0", "for", 0.9, same_words), Position("a1", "against", 0.9, same_words)]
    assert convergence_score(now, previous=now) < 0.5


def test_negation_pair_scores_low_even_with_matching_labels():
    assert contradicts("The new bridge design is safe", "The new bridge design is not safe")
    assert contradicts("The bridge isn't safe", "The bridge is safe")
    assert contradicts("The bridge is unsafe", "The bridge is safe")
    assert not contradicts("The bridge is safe", "The bridge is safe for trucks")
    assert not contradicts("Open in Lyon now", "Do not hire in Paris next year")
    labelled_alike = table("for", "for", claims=("The new bridge design is safe", "The new bridge design is not safe"))
    agreeing = table("for", "for", claims=("The new bridge design is safe", "The new bridge design is safe"))
    assert convergence_score(labelled_alike, previous=labelled_alike) < 0.5
    assert convergence_score(agreeing, previous=agreeing) >= THRESHOLD


def test_one_holdout_keeps_the_table_below_threshold_but_above_a_split():
    holdout = table("for", "for", "for", "for", "against")
    split = table("for", "for", "against", "against", "against")
    unanimous = table("for", "for", "for", "for", "for")
    scores = [convergence_score(t, previous=t) for t in (split, holdout, unanimous)]
    assert scores[0] < scores[1] < THRESHOLD <= scores[2]


def test_moving_positions_lower_the_score_and_moving_toward_the_majority_counts_half():
    settled = table("for", "for", "for")
    before_away = table("for", "for", "against")
    before_toward = table("against", "for", "for")
    assert convergence_score(settled, previous=before_toward) < convergence_score(settled, previous=settled)
    assert convergence_score(settled, previous=before_toward) == convergence_score(settled, previous=before_away)
    turned_away = table("for", "for", "against")
    assert convergence_score(turned_away, previous=settled) < convergence_score(settled, previous=before_toward)


def test_confidence_damps_agreement_and_conditional_sits_near_for():
    sure, unsure = table("for", "for", confidence=1.0), table("for", "for", confidence=0.1)
    assert agreement(sure) == 1.0 and agreement(unsure) < 0.7
    assert agreement(table("for", "conditional")) > agreement(table("against", "conditional"))
    assert agreement(table("for", "against")) == 0.0


def test_scores_stay_in_unit_interval():
    for stances in (("for",), ("neutral", "neutral"), ("for", "against", "conditional", "neutral")):
        for conf in (0.0, 1.0, 7.0, -2.0):
            t = table(*stances, confidence=conf)
            assert 0.0 <= convergence_score(t) <= 1.0
            assert 0.0 <= convergence_score(t, previous=[]) <= 1.0


def test_majority_consensus_and_positions_from_a_transcript():
    transcript = [
        {"agentId": "a", "stance": "for", "confidence": 0.9, "keyPoint": "x", "roundNumber": 1},
        {"agentId": "b", "stance": "for", "confidence": 0.6, "keyPoint": "y", "roundNumber": 1},
        {"agentId": "c", "stance": "against", "confidence": 1.0, "keyPoint": "z", "roundNumber": 1},
        {"agentId": "da", "stance": "against", "confidence": 1.0, "keyPoint": "w", "roundNumber": 1,
         "isDevilsAdvocate": True},
        {"agentId": "a", "stance": "against", "confidence": 0.9, "keyPoint": "x", "roundNumber": 0},
    ]
    positions = positions_of(transcript, 1)
    assert [p.agent_id for p in positions] == ["a", "b", "c"]  # the devil's advocate is left out
    assert majority_stance(positions) == "for"
    stance, backers = strongest_consensus(positions)
    assert stance == "for" and [p.agent_id for p in backers] == ["a", "b"]
    assert majority_stance([]) is None
