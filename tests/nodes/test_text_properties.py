"""Text cutting holds for any text a model writes: a cut is never longer than its limit, is a prefix of the text
(with an ellipsis when it broke mid-sentence), and a streamed reply never takes back what it released
(nodes/text.py)."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from parley.nodes.text import ELLIPSIS, LengthGate, clip, first_sentence, newest_within, sentence_ends, soft_cut
from tests.support.strategies import PROPERTY, text

limits = st.integers(0, 300)


def is_cut_of(cut: str, whole: str) -> bool:
    """`cut` is a prefix of `whole`, or a prefix marked with an ellipsis."""
    return whole.startswith(cut) or (cut.endswith(ELLIPSIS) and whole.startswith(cut[: -len(ELLIPSIS)]))


@PROPERTY
@given(body=text, start=st.integers(0, 50), final=st.booleans())
def test_sentence_ends_are_increasing_offsets_within_the_text(body, start, final):
    ends = sentence_ends(body, start=start, final=final)
    assert ends == sorted(set(ends))
    assert all(start < end <= len(body) for end in ends)
    assert set(ends) <= set(sentence_ends(body, start=start))  # a text still growing has no more ends


@PROPERTY
@given(body=text, lo=st.integers(-5, 300), hi=limits)
def test_soft_cut_stays_within_its_limit_and_is_a_cut_of_the_text(body, lo, hi):
    cut = soft_cut(body, lo, hi)
    assert len(cut) <= hi
    assert is_cut_of(cut, body)
    if len(body) <= hi:
        assert cut == body
    elif 0 <= lo < hi:
        assert len(cut) >= lo  # the best break between lo and hi, else a hard cut at hi
    assert soft_cut(body, lo, hi) == cut


@PROPERTY
@given(body=text, limit=limits)
def test_clip_and_first_sentence_stay_within_their_limit(body, limit):
    clipped = clip(body, limit)
    assert len(clipped) <= limit and is_cut_of(clipped, body.strip())
    first = first_sentence(body, limit)
    assert len(first) <= limit and is_cut_of(first, body.strip())


@PROPERTY
@given(pieces=st.lists(text, max_size=8), most=limits, sep=st.sampled_from(["\n", "", " | ", "\n\n"]))
def test_newest_within_keeps_the_newest_pieces_that_fit(pieces, most, sep):
    kept = newest_within(pieces, most, sep=sep)
    assert len(sep.join(kept)) <= most
    if not pieces:
        assert kept == []
    elif len(pieces[-1]) > most:  # not even the newest fits: it alone, clipped
        assert kept == [clip(pieces[-1], most)]
    else:  # the newest that fit, in order; one more would not have
        assert kept and kept == pieces[len(pieces) - len(kept):]
        assert len(kept) == len(pieces) or len(sep.join(pieces[-len(kept) - 1:])) > most


@PROPERTY
@given(pieces=st.lists(text, max_size=12), bounds=st.tuples(st.integers(1, 300), st.integers(1, 300)),
       truncated=st.booleans())
def test_a_streamed_reply_never_takes_back_what_it_released(pieces, bounds, truncated):
    low, high = sorted(bounds)
    assume(low < high)
    gate = LengthGate(low, high)
    released = ""
    for piece in pieces:
        released += gate.feed(piece)
        assert released == gate.emitted and len(released) <= high
        if gate.full:
            truncated = True
            break
    released += gate.finish(truncated=truncated)
    assert released == gate.emitted
    assert len(released) <= high
