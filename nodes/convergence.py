"""Convergence of a debate: how far the table agrees, and whether positions have stopped moving.

The score reads what agents *state* (stance, confidence, key claim), never how their prose sounds:
answers from one model resemble each other whatever they conclude (raw embedding cosine of same-model
answers already starts near 0.89), so textual similarity would call a split table converged. Two
claims that share their words but differ by a negation ("is safe" / "is not safe") count as opposed
even when the stances were labelled alike. The devil's advocate is left out: dissent is its job.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

from langgraph.runtime import Runtime

from parley.nodes.capability import mark
from parley.nodes.events import emit

Stance = Literal["for", "against", "conditional", "neutral"]
STANCES: tuple[str, ...] = ("for", "against", "conditional", "neutral")

AGREEMENT_WEIGHT = 0.7  # the rest is stability: a table still changing its mind has not converged

# How close two stances are. A conditional "yes, if" sits nearer to "for" than to "against";
# a neutral agent agrees with nobody in particular, including another neutral one.
_AFFINITY: dict[frozenset[str], float] = {
    frozenset({"for"}): 1.0,
    frozenset({"against"}): 1.0,
    frozenset({"conditional"}): 1.0,
    frozenset({"neutral"}): 0.5,
    frozenset({"for", "conditional"}): 0.5,
    frozenset({"against", "conditional"}): 0.25,
    frozenset({"for", "neutral"}): 0.25,
    frozenset({"against", "neutral"}): 0.25,
    frozenset({"conditional", "neutral"}): 0.25,
    frozenset({"for", "against"}): 0.0,
}

_WORD = re.compile(r"[a-z0-9]+")
_NEGATIONS = frozenset("not no never none nobody nothing neither nor without cannot".split())
_FILLER = frozenset("a an the is are was were be been it this that to of in on for and or we our".split())


@dataclass(frozen=True)
class Position:
    """What one agent stated at the end of a round."""

    agent_id: str
    stance: str
    confidence: float = 0.5
    claim: str = ""


def _claim_terms(claim: str) -> tuple[set[str], bool]:
    """Content words of a claim and whether it is negated (an odd number of negations)."""
    negated, content = False, set()
    for word in _WORD.findall(claim.lower().replace("n't", " not")):
        if word in _NEGATIONS:
            negated = not negated
        elif word not in _FILLER:
            content.add(word)
    return content, negated


def _fold_prefix(terms: set[str], negated: bool, other: set[str]) -> tuple[set[str], bool]:
    """Read "unsafe" as "not safe" when the other claim says "safe"."""
    for word in [w for w in terms if w.startswith("un") and w[2:] in other]:
        terms = (terms - {word}) | {word[2:]}
        negated = not negated
    return terms, negated


def contradicts(a: str, b: str) -> bool:
    """True when two claims say mostly the same thing with opposite polarity ("is safe" / "is not safe")."""
    terms_a, neg_a = _claim_terms(a)
    terms_b, neg_b = _claim_terms(b)
    # Each is folded against the other as written: folding b against an already folded a made the answer depend on
    # which claim came first ("unsafe" / "safe unsafe" contradicted one way round only).
    (terms_a, neg_a), (terms_b, neg_b) = _fold_prefix(terms_a, neg_a, terms_b), _fold_prefix(terms_b, neg_b, terms_a)
    if neg_a == neg_b or not terms_a or not terms_b:
        return False
    return len(terms_a & terms_b) / len(terms_a | terms_b) >= 0.5


def pair_agreement(a: Position, b: Position) -> float:
    """Agreement of two positions in [0, 1]: stance affinity, damped by the weaker confidence."""
    affinity = _AFFINITY.get(frozenset({a.stance, b.stance}), 0.0)
    if affinity and a.claim and b.claim and contradicts(a.claim, b.claim):
        affinity = 0.0
    weakest = min(_clamp(a.confidence), _clamp(b.confidence))
    return affinity * (0.6 + 0.4 * weakest)


def agreement(positions: Sequence[Position]) -> float:
    """Mean pairwise agreement of the table (1.0 for a table of one)."""
    pairs = list(combinations(positions, 2))
    if not pairs:
        return 1.0 if positions else 0.0
    return sum(pair_agreement(a, b) for a, b in pairs) / len(pairs)


def majority_stance(positions: Sequence[Position]) -> str | None:
    """The stance most agents hold (ties go to the more confident side), or None for an empty table."""
    if not positions:
        return None
    counts = Counter(p.stance for p in positions)
    weight = Counter()
    for p in positions:
        weight[p.stance] += _clamp(p.confidence)
    return max(counts, key=lambda s: (counts[s], weight[s], -STANCES.index(s) if s in STANCES else -99))


def stability(current: Sequence[Position], previous: Sequence[Position]) -> float:
    """How settled the table is: 1 when nobody moved, less when stances or confidences changed.

    Moving toward the current majority counts half (the table is converging, not yet converged);
    moving away from it counts nothing.
    """
    before = {p.agent_id: p for p in previous}
    majority = majority_stance(current)
    values = []
    for p in current:
        old = before.get(p.agent_id)
        if old is None:
            values.append(0.5)
        elif old.stance == p.stance:
            values.append(1.0 - min(0.5, abs(_clamp(p.confidence) - _clamp(old.confidence))))
        elif p.stance == majority:
            values.append(0.5)
        else:
            values.append(0.0)
    return sum(values) / len(values) if values else 0.0


def convergence_score(current: Sequence[Position], previous: Sequence[Position] | None = None) -> float:
    """Score a round in [0, 1]: 0.7 × stance agreement + 0.3 × stability since the previous round.

    Without a previous round the score is the agreement alone.
    """
    agreed = agreement(current)
    if previous is None:
        return round(agreed, 4)
    return round(AGREEMENT_WEIGHT * agreed + (1 - AGREEMENT_WEIGHT) * stability(current, previous), 4)


def strongest_consensus(positions: Sequence[Position]) -> tuple[str | None, list[Position]]:
    """The majority stance and the positions backing it, most confident first."""
    stance = majority_stance(positions)
    backers = sorted((p for p in positions if p.stance == stance), key=lambda p: -_clamp(p.confidence))
    return stance, backers


def unanimous(positions: Sequence[Position], min_confidence: float) -> bool:
    """Whether two or more agents all take one stance (not neutral), each with at least `min_confidence`: a round 0
    that debate rounds rarely change (initial agreement predicts the final answer; debating it costs rounds and
    can talk a right answer out of the table), so a table may skip them."""
    stances = {p.stance for p in positions}
    return (len(positions) >= 2 and len(stances) == 1 and "neutral" not in stances
            and all(_clamp(p.confidence) >= min_confidence for p in positions))


def positions_of(messages: Sequence[dict[str, Any]], round_number: int) -> list[Position]:
    """Positions of the regular agents (not the devil's advocate) in one round of a transcript."""
    return [
        Position(m["agentId"], m.get("stance") or "neutral", float(m.get("confidence", 0.5)), m.get("keyPoint") or "")
        for m in messages
        if m.get("roundNumber") == round_number and not m.get("isDevilsAdvocate")
    ]


def _clamp(value: float) -> float:
    return max(0.0, min(1.0, float(value)))


def score_convergence(
    *,
    positions: Callable[[Sequence[dict[str, Any]], int], list[Position]] = positions_of,
    transcript_key: str = "transcript",
    round_key: str = "round",
    rounds_key: str = "rounds",
    converged_key: str = "converged",
    threshold_role: str | None = "convergence_threshold",
    threshold: float = 0.85,
    event: str = "convergence",
    unanimity_role: str | None = "unanimous_confidence",
):
    """Build the node closing a round: how far the agents' stances converged, and whether the debate stops there.

    From round 1 on it scores the round's positions against the previous round's (a `convergence` event), says
    whether the score reached the threshold, and records each agent's token usage in the round. Round 0 counts as
    converged, with `stopped_by: "unanimous"` (and a `stopping` event), when the run context's `unanimity_role`
    field gives a confidence and the round is `unanimous` at it. No model is called.

    Args:
        positions: the agents' positions in one round of the transcript (`positions_of`: a round table's
            messages, the devil's advocate left out).
        transcript_key, round_key: the state keys of the transcript (messages with `roundNumber`,
            `agentId` and `usage`) and of the round just spoken.
        rounds_key, converged_key: where it writes the round's record (a list with `operator.add`) and
            whether the table converged.
        threshold_role: the run context's field giving the threshold; `threshold` when it has none (or None).
        event: the name of the event announcing the score.
        unanimity_role: the run context's field giving the confidence an early stop after a unanimous round 0
            needs (its value None, or no such field: never).

    Returns:
        The async node `(state, runtime) -> update`, named `measure_convergence`.

    Example:
        >>> import asyncio, parley
        >>> from langgraph.graph import START, StateGraph
        >>> close_round = parley.score_convergence()  # the round table's keys, threshold 0.85
        >>> graph = StateGraph(dict).add_node("close_round", close_round).add_edge(START, "close_round").compile()
        >>> def said(agent, round, stance):
        ...     return {"agentId": agent, "roundNumber": round, "stance": stance, "confidence": 0.9,
        ...             "usage": {"inputTokens": 10, "outputTokens": 5}}
        >>> transcript = [said("a", 0, "for"), said("b", 0, "against"), said("a", 1, "for"), said("b", 1, "for")]
        >>> out = asyncio.run(graph.ainvoke({"transcript": transcript, "round": 1}))
        >>> out["converged"], out["rounds"][0]["convergenceScore"]
        (True, 0.897)
    """

    async def close_round(state: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
        """Close the current round: score its convergence and record each agent's token usage."""
        round_number = state[round_key]
        transcript = state.get(transcript_key) or []
        score = None
        if round_number > 0:
            score = convergence_score(positions(transcript, round_number), positions(transcript, round_number - 1))
        usage: dict[str, dict[str, int]] = {}
        for m in transcript:
            if m.get("roundNumber") == round_number:
                row = usage.setdefault(m["agentId"], {"inputTokens": 0, "outputTokens": 0})
                row["inputTokens"] += int(m.get("usage", {}).get("inputTokens", 0))
                row["outputTokens"] += int(m.get("usage", {}).get("outputTokens", 0))
        context = getattr(runtime, "context", None)
        limit = getattr(context, threshold_role, threshold) if context and threshold_role else threshold
        converged = score is not None and score >= limit
        if score is not None:
            emit({"event": event, "roundNumber": round_number, "score": score, "threshold": limit,
                  "converged": converged})
        update: dict[str, Any] = {
            rounds_key: [{"roundNumber": round_number, "convergenceScore": score, "usage": usage}],
            converged_key: converged,
        }
        confident = getattr(context, unanimity_role, None) if context and unanimity_role else None
        if round_number == 0 and confident is not None and unanimous(positions(transcript, 0), confident):
            emit({"event": "stopping", "by": "unanimous", "round": 0, "minConfidence": confident})
            update.update({converged_key: True, "stopped_by": "unanimous"})
        return update

    close_round.__name__ = "measure_convergence"
    return mark(close_round, "score_convergence")


# The round table's: its transcript, its threshold (`RoundTableContext.convergence_threshold`).
measure_convergence = score_convergence()
