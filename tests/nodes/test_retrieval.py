"""Passage retrieval: chunking and BM25 ranking of an agent's documents."""

from __future__ import annotations

import pytest

from parley.nodes.retrieval import chunk_text, retrieve, tokenize

LEASE = (
    "The Lyon lease for the Part-Dieu office costs 42,000 euros a year, with a three-year minimum term "
    "and a six-month deposit. Breaking the lease early costs the remaining rent."
)
FILLER = " ".join(f"Quarterly marketing newsletter item {i} about brand colours and social posts." for i in range(60))


def test_chunks_overlap_and_cover_the_text():
    words = [f"w{i}" for i in range(250)]
    chunks = chunk_text(" ".join(words), words=100, overlap=20)
    assert [len(c.split()) for c in chunks] == [100, 100, 90]
    assert chunks[1].split()[0] == "w80" and chunks[-1].split()[-1] == "w249"
    assert chunk_text("short text") == ["short text"]
    assert chunk_text("   ") == []
    with pytest.raises(ValueError):
        chunk_text("x", words=10, overlap=10)


def test_retrieve_picks_the_relevant_passage_with_its_title():
    documents = [
        {"title": "Marketing newsletter", "text": FILLER},
        {"title": "Lyon lease terms", "text": LEASE},
    ]
    passages = retrieve("How much does the Lyon office lease cost per year?", documents, k=2)
    assert passages[0].title == "Lyon lease terms"
    assert "42,000 euros" in passages[0].text
    assert all(p.title != "Marketing newsletter" for p in passages)  # no shared word, never returned


def test_retrieve_works_on_a_tiny_corpus_and_respects_k():
    # With two chunks BM25Okapi would give a term in one of them an idf of zero; this must still rank.
    documents = [{"title": "A", "text": "Lyon rent is high."}, {"title": "B", "text": "Paris rent is higher."}]
    assert [p.title for p in retrieve("Lyon", documents, k=3)] == ["A"]
    assert len(retrieve("rent", documents, k=1)) == 1
    assert retrieve("", documents) == [] and retrieve("Lyon", []) == []


def test_tokenize_drops_stopwords_and_case():
    assert tokenize("Should WE open the Lyon office?") == ["open", "lyon", "office"]
