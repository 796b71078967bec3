"""Passage retrieval over an agent's documents: chunk them, rank the chunks with BM25, keep the best few.

Pure functions, so any node (or a caller outside a graph) can use them. BM25Plus is used rather than
BM25Okapi because an agent often has only a handful of chunks, and Okapi's idf is zero or negative for
a term found in half of a tiny corpus, which would hide exactly the passage that matters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rank_bm25 import BM25Plus

CHUNK_WORDS = 90
CHUNK_OVERLAP = 20

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Words that carry no topic; without removing them a question's "the"/"we" would favour long chunks.
_STOPWORDS = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being it its this
    that these those we you they he she i our your their his her my me us them do does did done have has had
    should would could can will shall may might must not no so than then there here what which who whom how
    why when where into over under about after before up down out off again further once all any both each
    more most other some such only own same too very just also per le la les de des du un une et ou en""".split()
)


@dataclass(frozen=True)
class Passage:
    """One retrieved chunk of a document, with the title it came from and its BM25 score."""

    title: str
    text: str
    score: float


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens without stopwords."""
    return [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]


def chunk_text(text: str, *, words: int = CHUNK_WORDS, overlap: int = CHUNK_OVERLAP) -> list[str]:
    """Split `text` into windows of about `words` words that overlap by `overlap` words.

    Paragraphs shorter than a window stay whole, so a short document is a single chunk.
    """
    if overlap >= words:
        raise ValueError("overlap must be smaller than the chunk size")
    tokens = text.split()
    if len(tokens) <= words:
        return [" ".join(tokens)] if tokens else []
    step = words - overlap
    chunks = []
    for start in range(0, len(tokens), step):
        chunks.append(" ".join(tokens[start : start + words]))
        if start + words >= len(tokens):
            break
    return chunks


def retrieve(query: str, documents: list[dict], *, k: int = 3) -> list[Passage]:
    """Return the `k` chunks of `documents` (each `{title, text}`) most relevant to `query`, best first.

    A chunk sharing no word with the query is never returned, however few chunks there are.
    """
    chunks: list[tuple[str, str]] = [
        (str(doc.get("title") or "Untitled"), chunk)
        for doc in documents
        for chunk in chunk_text(str(doc.get("text") or ""))
    ]
    terms = tokenize(query)
    if not chunks or not terms or k <= 0:
        return []
    # The title is indexed with its chunk: a document called "Lyon lease" is about leases throughout.
    corpus = [tokenize(f"{title} {chunk}") or ["\u2205"] for title, chunk in chunks]
    scores = BM25Plus(corpus).get_scores(terms)
    query_terms = set(terms)
    ranked = sorted(
        (i for i in range(len(chunks)) if query_terms & set(corpus[i])),
        key=lambda i: (-scores[i], i),
    )
    return [Passage(chunks[i][0], chunks[i][1], float(scores[i])) for i in ranked[:k]]
