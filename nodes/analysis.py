"""The disagreement map of a panel's answers: where the models agree, where they contradict each other, what only
one of them says and what none of them addresses, reckoned by Parley itself with plain arithmetic on the words.

No model is called and nothing is random, so the same answers give the same map, byte for byte; `method` names the
algorithm ("lexical-1"), so that a later one changes the figures visibly. It reads words, not meaning: two
paraphrases with no words in common are two points, and a sentence that negates something beside the point it
shares with another may be read as taking the other side. What follows is the whole method.

**Claims.** Each answer is cut into claims: its lines (list items, numbered items, paragraphs), each line cut at
its sentence ends (`nodes.text.sentence_ends`) and at semicolons. Markdown is taken off (list and quote marks,
emphasis, code marks, links, table bars); headings, code blocks and lead-ins ending in a colon ("The options
are:") are not claims (their words still count as mentioned, for blind spots). A claim is read as
- its *terms*: its words, case-folded, without a small list of English function words (`STOPWORDS`), through a
  light stemmer (`stem`: plurals, -ing, -ed, a final e: "hire", "hired", "hiring" → "hir"); words in Chinese or
  Japanese script count by pairs of characters. A word of `ANTONYMS` ("lower", "cheaper", "disagree") is read as
  the negation of its pair ("higher", "expensive", "agree");
- which of its terms are *negated*: the term right after an odd number of negations ("not", "n't", "no",
  "never", "without", "avoid", ... `NEGATIONS`; function words between them aside), in the same clause ("but",
  "however", a colon end one): "do not use PostgreSQL" negates "use", "not only" negates nothing;
- its *numbers*, written as `nodes.answers.canonical_number` writes them ("1,000" and "1000.0" are one);
- its *verdict*: "yes" or "no" when it opens with a lone Yes or No ("Yes.", "No, ...").
A fragment with no term, number or verdict is no claim. `ANALYSIS_MAX_CLAIMS` claims of each answer are read, the
first ones, each to `ANALYSIS_CLAIM_CHARS` characters, among its first `ANALYSIS_MAX_PIECES` fragments (lines
outside code and the sentences in them, claims or not) and its first `ANALYSIS_ANSWER_CHARS` characters.

**Same point.** Two claims make the same point when the Dice coefficient of their terms, 2·|A∩B| / (|A|+|B|), is
at least `SAME_POINT` (0.5: a two-word claim shares one word with a two-word claim, a ten-word claim five words
with another of ten); when both open with a verdict (they answer the question itself); or when neither has a term
and both hold a number ("42" / "41"). On the same point they take *opposite* stances when their verdicts differ,
when they hold different numbers, or when a term they share is negated in one and not in the other ("Use
PostgreSQL." / "Do not use PostgreSQL."); otherwise they *match*.

**Pairwise agreement** (`agreement`) of answers A and B, with a_m the claims of A that match some claim of B, a_o
those that are opposed by a claim of B and match none, and b_m, b_o alike:

    agreement(A, B) = (a_m + b_m) / (|A| + |B| + a_o + b_o)

rounded to 3 decimals: the share of the two answers' claims that the other answer makes too, an opposed claim
counting twice against. Identical answers give 1.0, answers with no claim alike 0.0, "Yes." against "No." 0.0;
two answers with no claim at all 1.0 (nothing in them disagrees), one with claims against one without 0.0. The
map's `agreement` is the mean of the `pairs`' figures as listed (summed exactly, `math.fsum`), so it does not
depend on the order of the answers; with fewer than two answers there is no pair, and it is 1.0.

**Points.** The claims are clustered in panel order, then claim order: each claim joins the cluster whose first
claim (its leader) it matches best (the earliest on a tie), or starts a new one. A repeat in the same answer joins
its own point and adds no support. A cluster with the clusters whose leaders its leader opposes, each side held
by a model the other side lacks (a model alone on both sides contradicts itself, not the panel), is one
*contradiction* (the earliest cluster first; a cluster is in one contradiction at most), whose `topic` is the terms
its leaders share, as the first leader writes them ("the answer" when they share none), and whose `stances` give
each model's first claim in it, in panel order. Every other cluster is a point: made by every answering model (an
answer with no claim is not answering: it is in `pairs`, nowhere else), it is `consensus`; by two or more,
`partialCoverage` with who is `missing`; by one, a unique insight. A point taken both ways is reported once, as a
contradiction. A single answer has no pair (agreement 1.0) and no consensus: all its points are its own.

**Blind spots.** The question's terms (less question words such as "should", "considering", "best") that no
answer mentions anywhere it was read, in the question's order and as the question writes them.

**Bounds.** At most `ANALYSIS_MAX_ANSWERS` answers (a ValueError past it); each list of the map holds at most
`ANALYSIS_MAX_ITEMS` entries (the first ones) and each text at most `ANALYSIS_CLAIM_CHARS` characters (cut by
`nodes.text.clip`), model labels excepted. Two claims are compared only when they share a term (or both have
none, or both hold a verdict), and at most once: at most N·(N-1)/2 comparisons for the N claims read, N at most
`ANALYSIS_MAX_ANSWERS` × `ANALYSIS_MAX_CLAIMS`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from typing import Any

from parley.core.limits import (
    ANALYSIS_ANSWER_CHARS,
    ANALYSIS_CLAIM_CHARS,
    ANALYSIS_MAX_ANSWERS,
    ANALYSIS_MAX_CLAIMS,
    ANALYSIS_MAX_ITEMS,
    ANALYSIS_MAX_PIECES,
)
from parley.nodes.answers import canonical_number
from parley.nodes.text import clip, is_cjk, sentence_ends

__all__ = ["METHOD", "SAME_POINT", "agreement", "analyse", "stem"]

METHOD = "lexical-1"
SAME_POINT = 0.5  # the Dice coefficient of two claims' terms from which they make the same point
TOPIC_OF_THE_ANSWER = "the answer"  # the topic of opposed verdicts or numbers that share no term

STOPWORDS = frozenset(
    "a about above after again against all also am an and any are as at be because been before being below between "
    "both but by can could did do does doing down during each either else etc even ever every few for from further "
    "had has have having he her here hers herself him himself his how i if in into is it its itself just let like "
    "may me might most much must my myself of off on once only or other ought our ours ourselves out over own per "
    "quite rather really same shall she should so some such than that the their theirs them themselves then there "
    "these they this those through thus to too under until up upon us very via was we were what when where whether "
    "which while who whom whose why will with within would you your yours yourself yourselves "
    "s t d ll re ve m yes answer final".split()  # "it's": apostrophe pieces; "the final answer is 42" is 42
)
# Words a question asks with, which no answer needs to repeat to address it.
QUESTION_WORDS = frozenset(
    "consider considering considered given regarding including versus vs best better good pros cons think "
    "recommend recommended opinion way ways tell explain".split()
)
NEGATIONS = frozenset(
    "not no never none nobody nothing neither nor without cannot avoid avoids avoided avoiding".split()
)
# Words read as the negation of their pair: "costs are lower" takes the other side of "costs are higher".
ANTONYMS_WRITTEN = {
    "less": "more", "fewer": "more", "lower": "higher", "worse": "better", "decrease": "increase",
    "slower": "faster", "smaller": "larger", "cheaper": "expensive", "false": "true", "disagree": "agree",
    "unsafe": "safe", "insecure": "secure", "unlikely": "likely", "weaker": "stronger", "harder": "easier",
    "disadvantage": "advantage", "reject": "accept", "fail": "succeed",
}
_CLAUSE_ENDS = frozenset("but however although though whereas yet".split()) | {":", ";"}

_TOKEN = re.compile(r"\d[\d,]*(?:\.\d+)?|[^\W_]+|[:;]")
_IRREGULAR_NOT = re.compile(r"\b(ca|wo|sha)n['’]t\b", re.IGNORECASE)  # can't, won't, shan't
_IRREGULAR_BASE = {"ca": "can", "wo": "will", "sha": "shall"}
_NOT = re.compile(r"(?<=\w)n['’]t\b", re.IGNORECASE)  # don't, isn't, shouldn't
_VERDICT = re.compile(r"^[^\w]*(yes|no)\b(?=\s*(?:[.,!;:—–-]|$))", re.IGNORECASE)
_FENCE = re.compile(r"^\s*(?:```|~~~)")
_HEADING = re.compile(r"^\s{0,3}#{1,6}(?:\s|$)")
_LIST_MARK = re.compile(r"^\s*(?:>\s*)*(?:[-*+•·]\s+|\(?(?:\d{1,3}|[a-zA-Z])[.)]\s+(?=\S)|\[[ xX]\]\s+)*")
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MARKUP = re.compile(r"\*\*|__|~~|`+|(?<!\w)\*|\*(?!\w)|<[^<>]{0,40}>|\|")
_SPACES = re.compile(r"\s+")


@lru_cache(maxsize=8192)
def stem(word: str) -> str:
    """The light stem of a case-folded word: plurals, "-ing" and "-ed" and a final "e" taken off, a doubled last
    consonant undone ("hire", "hires", "hired", "hiring" → "hir"; "policies" → "policy"; "planned" → "plan").

    Words of two letters or fewer, and words holding anything but letters, are kept as they are. Inflections of one
    word meet, as they must for two answers to share it; that different words sometimes meet too is the price of
    a stemmer a few lines long.
    """
    if len(word) <= 2 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 2 and not word.endswith("eed"):
            word = word[: -len(suffix)]
            if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]
            break
    if len(word) >= 3 and word.endswith("e"):
        word = word[:-1]
    return word


ANTONYMS = {stem(word): stem(pair) for word, pair in ANTONYMS_WRITTEN.items()}


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim of one answer, as the map reads it."""

    seat: int  # the answer's place in panel order
    text: str  # as written, markup taken off, cut to ANALYSIS_CLAIM_CHARS
    terms: frozenset[str]
    negated: frozenset[str]  # the terms read under a negation
    numbers: frozenset[str]
    verdict: str | None  # "yes", "no" or None
    words: tuple[tuple[str, str], ...]  # (term, the word as written), each term once, in the claim's order


def _terms(text: str) -> tuple[dict[str, str], set[str], set[str]]:
    """The terms of `text` (term → its first word as written, in order), those negated, and its numbers."""
    text = _NOT.sub(" not", _IRREGULAR_NOT.sub(lambda m: _IRREGULAR_BASE[m.group(1).casefold()] + " not", text))
    terms: dict[str, str] = {}
    negated: set[str] = set()
    numbers: set[str] = set()
    parity = False  # an odd number of negations waits for the term it negates
    tokens = _TOKEN.findall(text)
    for i, token in enumerate(tokens):
        word = token.casefold()
        if word in _CLAUSE_ENDS:
            parity = False
        elif word in NEGATIONS:
            if not (word == "not" and i + 1 < len(tokens) and tokens[i + 1].casefold() == "only"):
                parity = not parity
        elif token[0].isdigit() and (number := canonical_number(token)) is not None:
            numbers.add(number)
        elif word not in STOPWORDS:
            pieces = (stem(word),) if word.isascii() or not is_cjk(word) else _cjk_pairs(word)
            for piece in pieces:
                opposite = piece in ANTONYMS
                piece = ANTONYMS.get(piece, piece)
                if piece not in terms:
                    terms[piece] = token
                    if parity != opposite:
                        negated.add(piece)
            parity = False
    return terms, negated, numbers


def _cjk_pairs(word: str) -> tuple[str, ...]:
    """Words of scripts written without spaces, as their overlapping pairs of characters (one character alone)."""
    return (word,) if len(word) == 1 else tuple(word[i : i + 2] for i in range(len(word) - 1))


def _plain(piece: str) -> str:
    """A piece of a line without its Markdown: emphasis, code marks, links, tags, table bars."""
    return _SPACES.sub(" ", _MARKUP.sub(" ", _IMAGE_OR_LINK.sub(r"\1", piece))).strip()


def _pieces(line: str) -> Iterator[str]:
    """A line cut at its sentence ends and semicolons, each piece stripped, none empty."""
    start = 0
    for end in [*sentence_ends(line), len(line)]:
        for piece in line[start:end].split(";"):
            if piece := piece.strip():
                yield piece
        start = end


@dataclass(frozen=True, slots=True)
class _Reading:
    claims: list[Claim]
    mentioned: frozenset[str]  # every term read, headings and lead-ins included


def _fragments(answer: str) -> Iterator[tuple[str, bool]]:
    """The pieces of `answer`'s lines outside code blocks, in order, each with whether it may be a claim (a heading
    may not); a line that holds no piece is one empty fragment, so that every line read counts."""
    in_code = False
    for line in answer[:ANALYSIS_ANSWER_CHARS].splitlines():
        if _FENCE.match(line):
            in_code = not in_code
        elif in_code or not line.strip():
            continue
        elif _HEADING.match(line):
            yield line, False
        else:
            empty = True
            for piece in _pieces(_LIST_MARK.sub("", line, count=1)):
                empty = False
                yield piece, True
            if empty:
                yield "", False


def _read(answer: str, seat: int = 0) -> _Reading:
    """Cut `answer` into its claims (the first ANALYSIS_MAX_CLAIMS, within its first ANALYSIS_MAX_PIECES fragments)
    and gather the terms it mentions."""
    claims: list[Claim] = []
    mentioned: set[str] = set()
    for piece, claimable in islice(_fragments(answer), ANALYSIS_MAX_PIECES):
        # Piece by piece, and only its start (Markdown may take some of it), so that a run-on line costs no more
        # than the claim read from it.
        piece = _plain(piece[: 4 * ANALYSIS_CLAIM_CHARS])
        read = piece[:ANALYSIS_CLAIM_CHARS]
        if not claimable or read.endswith(":"):  # a lead-in ("The options are:") introduces claims, it makes none
            mentioned.update(_terms(read)[0])
            continue
        verdict = _VERDICT.match(read)
        terms, negated, numbers = _terms(read[verdict.end():] if verdict else read)
        if not (terms or numbers or verdict):
            continue
        mentioned.update(terms)
        claims.append(Claim(seat=seat, text=clip(piece, ANALYSIS_CLAIM_CHARS), terms=frozenset(terms),
                            negated=frozenset(negated), numbers=frozenset(numbers),
                            verdict=verdict.group(1).casefold() if verdict else None, words=tuple(terms.items())))
        if len(claims) == ANALYSIS_MAX_CLAIMS:
            break
    return _Reading(claims, frozenset(mentioned))


def _relate(a: Claim, b: Claim) -> float:
    """How two claims stand: their likeness (0..1] when they make the same point alike, its negative when they take
    opposite stances on it, 0.0 when they make different points. Symmetric."""
    verdicts = a.verdict is not None and b.verdict is not None
    terms_a, terms_b = a.terms, b.terms
    shared = terms_a & terms_b
    if terms_a and terms_b:
        likeness = 2 * len(shared) / (len(terms_a) + len(terms_b))
        if likeness < SAME_POINT:
            if not verdicts:
                return 0.0
            likeness = SAME_POINT
    elif not terms_a and not terms_b and (verdicts or (a.numbers and b.numbers)):
        likeness = 1.0
    elif verdicts:
        likeness = SAME_POINT
    else:
        return 0.0
    if ((verdicts and a.verdict != b.verdict) or (a.numbers and b.numbers and a.numbers != b.numbers)
            or ((a.negated or b.negated) and (a.negated ^ b.negated) & shared)):
        return -likeness
    return likeness


Links = list[list[tuple[int, float]]]  # for each claim j, (i, _relate(claim i, claim j)) for the claims i < j related


def _relations(claims: Sequence[Claim]) -> Links:
    """`_relate` of every two claims that could make the same point, each pair once: those that share a term, both
    hold a verdict, or both have no term (any other two make different points)."""
    postings: dict[str, list[int]] = {}
    verdicts: list[int] = []
    bare: list[int] = []
    links: Links = []
    for j, claim in enumerate(claims):
        candidates: set[int] = set()
        for term in claim.terms:
            candidates.update(postings.get(term, ()))
            postings.setdefault(term, []).append(j)
        if claim.verdict is not None:
            candidates.update(verdicts)
            verdicts.append(j)
        if not claim.terms:
            candidates.update(bare)
            bare.append(j)
        links.append([(i, relation) for i in sorted(candidates) if (relation := _relate(claims[i], claim))])
    return links


def _agreements(claims: Sequence[Claim], seats: int, links: Links) -> list[float]:
    """`agreement` of every two of the `seats` answers whose `claims` are linked by `links`, pair by pair in panel
    order ((0, 1), (0, 2), ..., (1, 2), ...)."""
    seat_of = [claim.seat for claim in claims]
    matches = [0] * len(claims)  # for each claim, a bit for each other answer one of whose claims it matches
    opposites = [0] * len(claims)  # ... and for each answer one of whose claims opposes it
    for j, related in enumerate(links):
        for i, relation in related:
            if seat_of[i] != seat_of[j]:
                if relation > 0:
                    matches[i] |= 1 << seat_of[j]
                    matches[j] |= 1 << seat_of[i]
                else:
                    opposites[i] |= 1 << seat_of[j]
                    opposites[j] |= 1 << seat_of[i]
    figures = []
    for p in range(seats):
        for q in range(p + 1, seats):
            total = matched = opposed = 0
            for i, seat in enumerate(seat_of):
                if seat == p or seat == q:
                    other = 1 << (q if seat == p else p)
                    total += 1
                    if matches[i] & other:
                        matched += 1
                    elif opposites[i] & other:
                        opposed += 1
            figures.append(round(matched / (total + opposed), 3) if total else 1.0)
    return figures


def agreement(first: str, second: str) -> float:
    """The agreement of two answers, 0..1 to 3 decimals, as `analyse` gives it for each pair; symmetric.

    (a_m + b_m) / (|A| + |B| + a_o + b_o), over the claims each answer makes: a_m of A's claims match one of B's,
    a_o are opposed by one of B's and match none (the module's docstring says what each word means). 1.0 for
    identical answers, 0.0 for answers with nothing alike.
    """
    claims = [*_read(first, 0).claims, *_read(second, 1).claims]
    return _agreements(claims, 2, _relations(claims))[0]


def _points(links: Links) -> list[list[int]]:
    """Cluster the claims (by index), each cluster led by its first claim: a claim joins the cluster whose leader it
    matches best (the earliest on a tie), or leads a new one."""
    clusters: list[list[int]] = []
    led: dict[int, int] = {}  # a leader's claim index → its cluster
    for j, related in enumerate(links):
        best, likeness = None, 0.0
        for i, relation in related:  # in claim order, so the earliest leader wins a tie
            if relation > likeness and i in led:
                best, likeness = led[i], relation
        if best is None:
            led[j] = len(clusters)
            clusters.append([j])
        else:
            clusters[best].append(j)
    return clusters


def _contradictions(claims: Sequence[Claim], clusters: Sequence[list[int]], links: Links) -> list[list[int]]:
    """Group the clusters that take opposite stances: each group is a cluster, the first in order not yet grouped,
    with every ungrouped cluster whose leader its leader opposes, where each side is held by a model the other side
    lacks (a model alone on both sides contradicts itself, not the panel). Groups list clusters by index, in order.

    A group is one point and its opponents, not a chain: "use PostgreSQL" against "do not use it" and "do not use
    MySQL" against "use it" stay two contradictions even when a claim links them.
    """
    cluster_of = {cluster[0]: x for x, cluster in enumerate(clusters)}
    seats = [{claims[i].seat for i in cluster} for cluster in clusters]
    opponents: list[list[int]] = [[] for _ in clusters]
    for y, cluster in enumerate(clusters):
        for i, relation in links[cluster[0]]:
            x = cluster_of.get(i)
            if relation < 0 and x is not None and seats[x] - seats[y] and seats[y] - seats[x]:
                opponents[x].append(y)
                opponents[y].append(x)
    grouped: set[int] = set()
    groups = []
    for x in range(len(clusters)):
        if x in grouped:
            continue
        group = sorted({y for y in opponents[x] if y not in grouped})
        if group:
            groups.append([x, *group])
            grouped.update(groups[-1])
    return groups


def _topic(leaders: Sequence[Claim]) -> str:
    """The terms the opposed leaders share, as the first writes them; those of the first two when all of them share
    none; "the answer" when not even those do."""
    shared = frozenset.intersection(*(leader.terms for leader in leaders)) or (leaders[0].terms & leaders[1].terms)
    words = [word for term, word in leaders[0].words if term in shared]
    return clip(" ".join(words), ANALYSIS_CLAIM_CHARS) if words else TOPIC_OF_THE_ANSWER


def analyse(answers: Sequence[Mapping[str, str]], question: str = "") -> dict[str, Any]:
    """Map where a panel's answers agree and contradict each other, with no model call and no randomness.

    Args:
        answers: `{"model": <seat label>, "answer": <text>}` in panel order; an answer of None counts as empty.
        question: what the panel was asked, read for blind spots only ("" for none).

    Returns:
        A JSON-ready dict, every list in panel order, then in order of first appearance, at most
        `ANALYSIS_MAX_ITEMS` entries each (`pairs` excepted: every pair is there), every text but the model labels
        at most `ANALYSIS_CLAIM_CHARS` characters:
        `agreement` (0..1, 3 decimals, the mean of the pairs'), `pairs` (`{"models": [a, b], "agreement"}`, every
        pair), `consensus` (points every answering model makes), `contradictions` (`{"topic", "stances": [{"model",
        "stance"}]}`), `partialCoverage` (`{"point", "models", "missing"}`, points two or more make but not all),
        `uniqueInsights` (`{"model", "insight"}`), `blindSpots` (the question's terms no answer mentions) and
        `method` ("lexical-1"). The module's docstring gives the method whole.

    Raises:
        ValueError: more than `ANALYSIS_MAX_ANSWERS` answers.

        >>> analyse([{"model": "a", "answer": "Yes."}, {"model": "b", "answer": "No."}])["contradictions"]
        [{'topic': 'the answer', 'stances': [{'model': 'a', 'stance': 'Yes.'}, {'model': 'b', 'stance': 'No.'}]}]
    """
    if len(answers) > ANALYSIS_MAX_ANSWERS:
        raise ValueError(f"a disagreement map compares at most {ANALYSIS_MAX_ANSWERS} answers, not {len(answers)}")
    models = [str(item["model"]) for item in answers]
    readings = [_read(item.get("answer") or "", seat) for seat, item in enumerate(answers)]
    claims = [claim for reading in readings for claim in reading.claims]
    links = _relations(claims)

    figures = iter(_agreements(claims, len(models), links))
    pairs = [{"models": [models[p], models[q]], "agreement": next(figures)}
             for p in range(len(models)) for q in range(p + 1, len(models))]
    overall = round(math.fsum(pair["agreement"] for pair in pairs) / len(pairs), 3) if pairs else 1.0

    clusters = _points(links)
    contradictions = []
    contested: set[int] = set()
    for group in _contradictions(claims, clusters, links):
        contested.update(group)
        first: dict[int, int] = {}  # seat → its first claim in the group
        for i in sorted(i for x in group for i in clusters[x]):
            first.setdefault(claims[i].seat, i)
        contradictions.append({
            "topic": _topic([claims[clusters[x][0]] for x in group]),
            "stances": [{"model": models[seat], "stance": claims[first[seat]].text} for seat in sorted(first)],
        })

    answering = [seat for seat, reading in enumerate(readings) if reading.claims]
    consensus, partial, unique = [], [], []
    for x, cluster in enumerate(clusters):
        if x in contested:
            continue
        text = claims[cluster[0]].text
        seats = sorted({claims[i].seat for i in cluster})
        if len(seats) == len(answering) > 1:
            consensus.append(text)
        elif len(seats) > 1:
            partial.append({"point": text, "models": [models[s] for s in seats],
                            "missing": [models[s] for s in answering if s not in seats]})
        else:
            unique.append({"model": models[seats[0]], "insight": text})

    return {
        "agreement": overall,
        "pairs": pairs,
        "consensus": consensus[:ANALYSIS_MAX_ITEMS],
        "contradictions": contradictions[:ANALYSIS_MAX_ITEMS],
        "partialCoverage": partial[:ANALYSIS_MAX_ITEMS],
        "uniqueInsights": unique[:ANALYSIS_MAX_ITEMS],
        "blindSpots": blind_spots(question, readings),
        "method": METHOD,
    }


def blind_spots(question: str, readings: Sequence[_Reading]) -> list[str]:
    """The question's terms, less question words, that none of the answers mentions, as the question writes them."""
    if not question.strip():
        return []
    mentioned = frozenset().union(*(reading.mentioned for reading in readings))
    terms, _, _ = _terms(question[:ANALYSIS_ANSWER_CHARS])
    missing = [word for term, word in terms.items() if term not in mentioned and word.casefold() not in QUESTION_WORDS]
    return [clip(word, ANALYSIS_CLAIM_CHARS) for word in missing[:ANALYSIS_MAX_ITEMS]]
