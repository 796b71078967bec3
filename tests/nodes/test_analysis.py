"""The disagreement map of a panel's answers (nodes/analysis.py): what it finds in answers written to agree,
contradict or cover part of a question, the pairwise agreement's formula, and, for any text, that its figures stay
in [0, 1], do not depend on the order of the answers, come out the same every time and stay within the bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parley.core.limits import (
    ANALYSIS_CLAIM_CHARS,
    ANALYSIS_MAX_ANSWERS,
    ANALYSIS_MAX_CLAIMS,
    ANALYSIS_MAX_ITEMS,
    ANALYSIS_MAX_PIECES,
)
from parley.nodes import analysis
from parley.nodes.analysis import METHOD, agreement, analyse, stem
from tests.support.strategies import PROPERTY, long_runs, text

ROOT = Path(__file__).resolve().parents[2]
# The most characters a map's JSON may hold (labels and keys of about 60 characters allowed for): each list's entries,
# a contradiction's stances one per answer, and the pairs.
MAP_CHARS = ANALYSIS_MAX_ITEMS * (ANALYSIS_MAX_ANSWERS + 4) * (ANALYSIS_CLAIM_CHARS + 60) + 60 * 28
KEYS = ["agreement", "pairs", "consensus", "contradictions", "partialCoverage", "uniqueInsights", "blindSpots",
        "method"]


def panel(*texts: str) -> list[dict[str, str]]:
    """Answers seated as models "a", "b", "c", ... in the order given."""
    return [{"model": chr(97 + i), "answer": t} for i, t in enumerate(texts)]


# --- what the map finds -------------------------------------------------------------------------------------------

ADVICE = """## Recommendation

Here is what I would do:

1. **Use PostgreSQL** for the orders.
2. Back up the database every night.
- Keep the schema in migrations; review them weekly.

```sql
SELECT 1;
```
"""


def test_identical_answers_agree_fully_and_every_point_is_consensus():
    """Three copies of one Markdown answer: agreement 1.0 for the map and every pair, each claim (list marks,
    emphasis and the semicolon's split applied; heading, lead-in and code left out) in consensus, nothing else."""
    found = analyse(panel(ADVICE, ADVICE, ADVICE))
    assert list(found) == KEYS
    assert found["agreement"] == 1.0
    assert [p["agreement"] for p in found["pairs"]] == [1.0, 1.0, 1.0]
    assert [p["models"] for p in found["pairs"]] == [["a", "b"], ["a", "c"], ["b", "c"]]
    assert found["consensus"] == ["Use PostgreSQL for the orders.", "Back up the database every night.",
                                  "Keep the schema in migrations", "review them weekly."]
    assert found["contradictions"] == found["partialCoverage"] == found["uniqueInsights"] == []
    assert found["blindSpots"] == [] and found["method"] == METHOD == "lexical-1"


@pytest.mark.parametrize(("first", "second", "topic"), [
    ("Yes.", "No.", "the answer"),
    ("42", "41", "the answer"),
    ("The final answer is 42.", "41", "the answer"),
    ("Use PostgreSQL.", "Do not use PostgreSQL.", "Use PostgreSQL"),
    ("You shouldn't use PostgreSQL here.", "Use PostgreSQL here.", "use PostgreSQL"),
    ("Avoid MongoDB.", "Use MongoDB.", "MongoDB"),
    ("Costs are lower in Lyon.", "Costs are higher in Lyon.", "Costs lower Lyon"),
    ("The office costs 1,000 euros a month.", "The office costs 1200 euros a month.", "office costs euros month"),
])
def test_opposite_stances_are_a_contradiction_with_both_stances(first, second, topic):
    """A verdict, a number, a negation (written out, contracted, "avoid") or an antonym against its plain form: one
    contradiction naming the shared words, each model's claim as written, and no agreement between the two."""
    found = analyse(panel(first, second))
    assert found["contradictions"] == [{"topic": topic, "stances": [{"model": "a", "stance": first},
                                                                    {"model": "b", "stance": second}]}]
    assert found["agreement"] == 0.0
    assert found["consensus"] == found["partialCoverage"] == found["uniqueInsights"] == []


@pytest.mark.parametrize(("first", "second"), [
    ("42", "42.0"),
    ("Yes.", "yes"),
    ("Not only is PostgreSQL fast, it is reliable.", "PostgreSQL is fast and reliable."),
    ("PostgreSQL handles JSON well, and you do not need MongoDB.", "PostgreSQL handles JSON well."),
    ("Costs are not lower in Lyon.", "Costs are higher in Lyon."),
])
def test_the_same_stance_written_differently_is_consensus(first, second):
    """Equal numbers, a verdict in either case, "not only", a negation beside the shared point and a negated antonym
    take no opposite side: the point is agreed."""
    found = analyse(panel(first, second))
    assert found["contradictions"] == []
    assert found["consensus"] == [first]


def test_a_contradicted_point_is_reported_once_as_a_contradiction():
    """Two models for PostgreSQL and one against: a contradiction with the three stances in panel order, not also
    partial coverage; the backups all three advise are the consensus."""
    found = analyse(panel("Use PostgreSQL. Back up nightly.",
                          "Back up nightly. Use PostgreSQL.",
                          "Do not use PostgreSQL. Back up nightly."))
    assert found["consensus"] == ["Back up nightly."]
    assert found["contradictions"] == [{"topic": "Use PostgreSQL", "stances": [
        {"model": "a", "stance": "Use PostgreSQL."},
        {"model": "b", "stance": "Use PostgreSQL."},
        {"model": "c", "stance": "Do not use PostgreSQL."},
    ]}]
    assert found["partialCoverage"] == found["uniqueInsights"] == []


def test_a_model_on_both_sides_contradicts_itself_not_the_panel():
    """When one model says a thing and its opposite, and another says only the thing, nobody in the panel takes the
    other side alone: no contradiction, and the point both make is agreed."""
    found = analyse(panel("Use PostgreSQL. Do not use PostgreSQL.", "Use PostgreSQL."))
    assert found["contradictions"] == []
    assert found["consensus"] == ["Use PostgreSQL."]
    assert found["uniqueInsights"] == [{"model": "a", "insight": "Do not use PostgreSQL."}]


def test_a_point_two_of_three_make_is_partial_coverage_naming_the_missing_model():
    """Models a and c mention the hiring pool, b does not: partial coverage listing a and c, with b missing; the
    point all three make is consensus."""
    found = analyse(panel("Open the Lyon office. Lyon has a large hiring pool.",
                          "Open the Lyon office.",
                          "The hiring pool in Lyon is large. Open the Lyon office."))
    assert found["consensus"] == ["Open the Lyon office."]
    assert found["partialCoverage"] == [{"point": "Lyon has a large hiring pool.", "models": ["a", "c"],
                                         "missing": ["b"]}]
    assert found["uniqueInsights"] == [] and found["contradictions"] == []


def test_a_point_one_model_alone_makes_is_its_unique_insight():
    """Each claim no other model makes is listed once under the model that made it, in panel then claim order;
    a repeat within one answer is no second insight."""
    found = analyse(panel("Open the Lyon office. Rents in Lyon are half of Paris.",
                          "Open the Lyon office. Mind the TGV strikes. Mind the TGV strikes!"))
    assert found["consensus"] == ["Open the Lyon office."]
    assert found["uniqueInsights"] == [{"model": "a", "insight": "Rents in Lyon are half of Paris."},
                                       {"model": "b", "insight": "Mind the TGV strikes."}]


def test_blind_spots_are_the_question_terms_no_answer_mentions():
    """The question asks about cost and hiring; the answers discuss cost only: "hiring" is the blind spot (question
    words such as "should" and "considering" are none); a heading counts as a mention; no question, no blind spot."""
    question = "Should we open an office in Lyon, considering cost and hiring?"
    answers = panel("Yes, open the Lyon office: costs are lower.", "## Offices\nThe cost is fine. Open it in Lyon.")
    assert analyse(answers, question)["blindSpots"] == ["hiring"]
    assert analyse(answers, "")["blindSpots"] == []
    assert analyse(panel("We hired two people.", "Hiring is easy."), question)["blindSpots"] == [
        "open", "office", "Lyon", "cost"]
    assert analyse(panel("# Hiring\nOpen an office in Lyon: cost is fine."), question)["blindSpots"] == []


def test_stemming_joins_the_forms_of_a_word():
    """Plurals, -ing, -ed and a final e meet at one stem, so differently inflected claims make the same point."""
    assert {stem(w) for w in ("hire", "hires", "hired", "hiring")} == {"hir"}
    assert stem("policies") == stem("policy") and stem("planned") == stem("plans") == "plan"
    assert stem("running") == stem("runs") and stem("costs") == "cost" and stem("is") == "is"
    assert analyse(panel("We hired engineers quickly.", "Hiring engineers is quick."))["consensus"]


# --- the pairwise agreement ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("first", "second", "expected"), [
    ("Use PostgreSQL. It scales well.", "Use PostgreSQL. It scales well.", 1.0),
    # a_m = b_m = 1 (the scaling), a_o = b_o = 1: 2 / (2 + 2 + 2)
    ("Use PostgreSQL. It scales well.", "Do not use PostgreSQL. It scales well.", 0.333),
    # a_m = 1 of 3 claims, b_m = 1 of 1: 2 / (3 + 1)
    ("Use PostgreSQL. Rent an office. Hire locally.", "Use PostgreSQL.", 0.5),
    # two matches on b's side, one on a's: (1 + 2) / (1 + 2)
    ("Use PostgreSQL.", "Use PostgreSQL. You should use PostgreSQL!", 1.0),
    ("The sky is blue.", "Bananas grow fast.", 0.0),
    ("Yes.", "No.", 0.0),
    ("", "", 1.0),
    ("Use PostgreSQL.", "", 0.0),
])
def test_agreement_is_the_share_of_claims_the_other_makes_an_opposed_claim_counting_twice(first, second, expected):
    """(a_m + b_m) / (|A| + |B| + a_o + b_o), to 3 decimals, whichever answer is read first, and the same figure
    in the map's `pairs` and its mean."""
    assert agreement(first, second) == agreement(second, first) == expected
    found = analyse(panel(first, second))
    assert found["pairs"] == [{"models": ["a", "b"], "agreement": expected}]
    assert found["agreement"] == expected


def test_the_map_agreement_is_the_mean_of_the_pairs():
    """Three answers: the map's figure is the mean of the three pairs' figures as listed, to 3 decimals."""
    texts = ["Use PostgreSQL. It scales well.", "Use PostgreSQL.", "Do not use PostgreSQL. It scales well."]
    found = analyse(panel(*texts))
    figures = [p["agreement"] for p in found["pairs"]]
    assert figures == [agreement(texts[p], texts[q]) for p, q in combinations(range(3), 2)] == [0.667, 0.333, 0.0]
    assert found["agreement"] == round(sum(figures) / 3, 3) == 0.333


def test_one_answer_or_none_have_no_pair_and_a_failed_answer_is_not_answering():
    """One answer: agreement 1.0, no pair, all its points its own; no answer: an empty map; an empty (failed)
    answer is in the pairs but is not counted missing from a point the others make."""
    alone = analyse(panel("Use PostgreSQL. Back up nightly."))
    assert alone["agreement"] == 1.0 and alone["pairs"] == [] and alone["consensus"] == []
    assert alone["uniqueInsights"] == [{"model": "a", "insight": "Use PostgreSQL."},
                                       {"model": "a", "insight": "Back up nightly."}]
    assert analyse([]) == {"agreement": 1.0, "pairs": [], "consensus": [], "contradictions": [],
                           "partialCoverage": [], "uniqueInsights": [], "blindSpots": [], "method": METHOD}
    failed = analyse([{"model": "a", "answer": "Use PostgreSQL."}, {"model": "b", "answer": None},
                      {"model": "c", "answer": "Use PostgreSQL."}])
    assert failed["consensus"] == ["Use PostgreSQL."] and failed["partialCoverage"] == []
    assert [p["agreement"] for p in failed["pairs"]] == [0.0, 1.0, 0.0]


def test_more_answers_than_the_bound_are_refused():
    """Past ANALYSIS_MAX_ANSWERS answers the map is a ValueError naming the bound, not a slow reply."""
    analyse(panel(*["Use PostgreSQL."] * ANALYSIS_MAX_ANSWERS))
    with pytest.raises(ValueError, match=f"at most {ANALYSIS_MAX_ANSWERS} answers"):
        analyse(panel(*["Use PostgreSQL."] * (ANALYSIS_MAX_ANSWERS + 1)))


# --- bounds, cost, purity -----------------------------------------------------------------------------------------

def _long_answer(seat: int, *, alike: bool) -> str:
    """About 4,000 words in 400 sentences, and an unbroken 20,000-character run. Not `alike`: the first four seats
    write sentences no other seat writes, the last four the same sentences two by two. `alike`: each sentence is
    written by three other seats with another number (the first four seats on 32 subjects, the last four on 32
    others)."""
    if alike:
        subjects = [k + seat // 4 * 32 for k in range(400)]
        sentences = [f"Alpha{j} beta{j} gamma{j} needs {seat} units." for j in subjects]
    else:
        author = seat if seat < 4 else seat // 2 * 2
        sentences = [f"Claim{author}x{k} about topic{author}y{k} and detail{author}z{k}." for k in range(400)]
    return " ".join(sentences) + " " + "x" * 20_000


def _check_bounded(found: dict) -> None:
    """Every list of the map within ANALYSIS_MAX_ITEMS entries, every text within ANALYSIS_CLAIM_CHARS."""
    texts = [*found["consensus"], *found["blindSpots"], *(p["point"] for p in found["partialCoverage"]),
             *(u["insight"] for u in found["uniqueInsights"]), *(c["topic"] for c in found["contradictions"]),
             *(s["stance"] for c in found["contradictions"] for s in c["stances"])]
    assert all(len(t) <= ANALYSIS_CLAIM_CHARS for t in texts)
    assert all(len(found[key]) <= ANALYSIS_MAX_ITEMS for key in KEYS[2:-1])


def test_the_map_of_long_answers_is_bounded():
    """Eight answers of 4,000 words and a question as long: each list cut to ANALYSIS_MAX_ITEMS (the first points),
    each text to ANALYSIS_CLAIM_CHARS, the whole map within MAP_CHARS."""
    question = " ".join(f"zebra{k}" for k in range(5_000)) + " why" * 10_000
    distinct = analyse(panel(*(_long_answer(seat, alike=False) for seat in range(8))), question)
    alike = analyse(panel(*(_long_answer(seat, alike=True) for seat in range(8))), question)
    assert len(distinct["uniqueInsights"]) == len(distinct["blindSpots"]) == ANALYSIS_MAX_ITEMS
    assert len(distinct["partialCoverage"]) == ANALYSIS_MAX_ITEMS and distinct["partialCoverage"][0]["models"] == [
        "e", "f"]
    assert len(alike["contradictions"]) == ANALYSIS_MAX_ITEMS
    assert [len(c["stances"]) for c in alike["contradictions"]] == [4] * ANALYSIS_MAX_ITEMS
    for found in (distinct, alike):
        _check_bounded(found)
        assert len(json.dumps(found, ensure_ascii=False)) < MAP_CHARS


@pytest.fixture
def comparisons(monkeypatch) -> list[int]:
    """Count the map's claim comparisons (`_relate` calls) in the one-item list returned."""
    count = [0]
    relate = analysis._relate

    def counted(a, b):
        count[0] += 1
        return relate(a, b)

    monkeypatch.setattr(analysis, "_relate", counted)
    return count


def test_comparisons_are_bounded_by_the_claims_read(comparisons):
    """Eight answers of 500 sentences on one subject, all alike: the map reads ANALYSIS_MAX_CLAIMS claims of each and
    compares each two of them at most once, whatever the answers' length."""
    answers = panel(*["The cache makes the service fast. " * 500] * 8)
    found = analyse(answers)
    claims = 8 * ANALYSIS_MAX_CLAIMS
    assert 0 < comparisons[0] <= claims * (claims - 1) // 2
    assert found["consensus"] == ["The cache makes the service fast."] and found["agreement"] == 1.0


def test_claims_sharing_no_word_are_not_compared(comparisons):
    """Two answers with no word in common: no claim of one is compared with a claim of the other (nor with another
    of its own answer, as no two of them share a word)."""
    found = analyse(panel("Alpha beta gamma. Delta epsilon zeta.", "Eta theta iota. Kappa lambda mu."))
    assert comparisons[0] == 0 and found["agreement"] == 0.0


def test_fragments_past_the_bound_are_not_read():
    """An answer that opens with ANALYSIS_MAX_PIECES empty list items and lone dots makes no claim after them: the
    map reads that many fragments, claims or not, and stops (30,000 characters of dots cost no more than a claim)."""
    filler = "- \n. . .\n" * (ANALYSIS_MAX_PIECES // 4)
    assert analyse(panel(filler + "Use PostgreSQL.", "Use PostgreSQL."))["uniqueInsights"] == [
        {"model": "b", "insight": "Use PostgreSQL."}]
    fewer = "- \n. . .\n" * (ANALYSIS_MAX_PIECES // 4 - 1)
    assert analyse(panel(fewer + "Use PostgreSQL.", "Use PostgreSQL."))["consensus"] == ["Use PostgreSQL."]


def _fresh_python(code: str, **env: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_module_loads_no_model_http_storage_or_graph_code():
    """Importing nodes/analysis.py loads neither LangGraph, LangChain, an HTTP library nor a MongoDB driver."""
    code = ("import json, sys; import parley.nodes.analysis; print(json.dumps(sorted({m.split('.')[0] for m in "
            "sys.modules} & {'langgraph', 'langchain_core', 'langchain', 'httpx', 'requests', 'aiohttp', 'fastapi', "
            "'starlette', 'pymongo', 'motor'})))")
    assert json.loads(_fresh_python(code)) == []


def test_the_map_is_the_same_byte_for_byte_in_another_process():
    """Two processes with different string hashing (so different set orders) write the same map, byte for byte."""
    code = ("import json; from parley.nodes.analysis import analyse; from tests.nodes.test_analysis import panel; "
            "print(json.dumps(analyse(panel('Use PostgreSQL. Costs are lower. Hiring is easy. 42', "
            "'Do not use PostgreSQL. Costs are higher. Hiring is easy. 41', 'Back up nightly. Hiring is hard.'), "
            "'Which database, and what about hiring and rent?')))")
    first, second = _fresh_python(code, PYTHONHASHSEED="1"), _fresh_python(code, PYTHONHASHSEED="2")
    assert first == second and json.loads(first)["contradictions"]


# --- for any text ---------------------------------------------------------------------------------------------

# Pieces the method reads (negations, verdicts, numbers, antonyms, list and emphasis marks, sentence ends, CJK), so
# that random answers often match, contradict and repeat each other.
PIECES = ["Use", "use", "PostgreSQL", "not", "no", "never", "avoid", "don't", "not only", "Yes.", "No,", "42", "41",
          "1,000", "cost", "costs", "lower", "higher", "hiring", "Lyon", "scales", "but", "- ", "1. ", "**", "\n",
          ". ", "; ", ": ", "# ", "```", "答案是", "是", "We", "should"]
answer_texts = st.one_of(st.lists(st.sampled_from(PIECES), max_size=30).map(" ".join), text)
panels = st.lists(answer_texts, max_size=ANALYSIS_MAX_ANSWERS)


@PROPERTY
@given(first=answer_texts, second=answer_texts)
def test_agreement_is_in_the_unit_interval_symmetric_and_full_with_itself(first, second):
    value = agreement(first, second)
    assert 0.0 <= value <= 1.0 and value == round(value, 3)
    assert value == agreement(second, first)
    assert agreement(first, first) == 1.0


@PROPERTY
@given(texts=panels, question=answer_texts, shuffle=st.randoms(use_true_random=False))
def test_the_map_is_repeatable_well_formed_and_its_agreement_order_free(texts, question, shuffle):
    answers = panel(*texts)
    found = analyse(answers, question)
    assert json.dumps(analyse([dict(a) for a in answers], question)) == json.dumps(found, allow_nan=False)
    assert list(found) == KEYS and 0.0 <= found["agreement"] <= 1.0
    expected = [agreement(answers[p]["answer"], answers[q]["answer"]) for p, q in combinations(range(len(texts)), 2)]
    assert [pair["agreement"] for pair in found["pairs"]] == expected
    seats = [a["model"] for a in answers]
    for contradiction in found["contradictions"]:
        stanced = [s["model"] for s in contradiction["stances"]]
        assert len(stanced) >= 2 and stanced == sorted(set(stanced), key=seats.index)
    for point in found["partialCoverage"]:
        assert len(point["models"]) >= 2 and point["missing"] and not set(point["models"]) & set(point["missing"])
    _check_bounded(found)
    reordered = list(answers)
    shuffle.shuffle(reordered)
    again = analyse(reordered, question)
    assert again["agreement"] == found["agreement"]
    figures = {frozenset(p["models"]): p["agreement"] for p in found["pairs"]}
    assert {frozenset(p["models"]): p["agreement"] for p in again["pairs"]} == figures


@PROPERTY
@given(texts=st.lists(st.one_of(long_runs, answer_texts.map(lambda t: t * 200)), min_size=1,
                      max_size=ANALYSIS_MAX_ANSWERS))
def test_huge_answers_give_a_bounded_map(texts):
    found = analyse(panel(*texts), texts[0])
    _check_bounded(found)
    assert len(json.dumps(found, ensure_ascii=False)) < MAP_CHARS
