"""Text shaping for turns: sentence ends in Latin and CJK text, clipping, and the streaming length gate."""

from __future__ import annotations

import pytest

from parley.nodes.text import (
    LengthGate,
    clip,
    first_sentence,
    is_cjk,
    newest_within,
    sentence_ends,
    soft_cut,
    topic_language,
)


def stream(gate: LengthGate, pieces: list[str], *, truncated: bool = False) -> list[str]:
    """Feed `pieces` until the gate is full, like the speak node; return what it released, piece by piece."""
    out = []
    for piece in pieces:
        out.append(gate.feed(piece))
        if gate.full:
            truncated = True
            break
    out.append(gate.finish(truncated=truncated))
    return out


def words(text: str) -> list[str]:
    import re

    return re.findall(r"\S+\s*", text)


def test_sentence_ends_latin_and_cjk():
    assert sentence_ends("One. Two! Three?") == [4, 9, 16]
    assert sentence_ends("Pi is 3.14 here. Done") == [16]
    assert sentence_ends("我认为。你呢？好！") == [4, 7, 9]
    assert sentence_ends("He said “stop.” Then") == [15]
    # While text may still grow, a final Latin mark is not yet a sentence end ("3." could become "3.5").
    assert sentence_ends("It is 3.", final=False) == []
    assert sentence_ends("结束。", final=False) == [3]


def test_language_of_a_topic():
    assert topic_language("远程工作是否应该成为主流？").startswith("Chinese")
    assert topic_language("リモートワークは主流になるべきか") == "Japanese"
    assert topic_language("재택근무가 표준이 되어야 할까") == "Korean"
    assert "topic" in topic_language("Should remote work be the default?")
    assert is_cjk("远程") and not is_cjk("remote")


def test_clip_prefers_a_sentence_end_then_a_marked_break():
    text = "Remote work helps. " * 10
    clipped = clip(text, 100)
    assert len(clipped) <= 100 and clipped.endswith("helps.")
    assert clip("short", 100) == "short"
    no_ends = "word " * 40
    assert len(clip(no_ends, 100)) <= 100 and clip(no_ends, 100).endswith("…")
    cjk = "远程工作" * 40
    assert len(clip(cjk, 100)) == 100 and clip(cjk, 100).endswith("…")
    assert soft_cut("甲乙丙，丁戊己，庚辛壬癸子丑寅卯", 3, 10) == "甲乙丙，丁戊己…"
    assert first_sentence("First point. Second point.") == "First point."


def test_a_reply_within_bounds_streams_through_unchanged():
    text = "Remote work widens the talent pool and cuts hours of commuting. Teams still need rituals to build trust."
    gate = LengthGate(50, 200)
    out = stream(gate, words(text))
    assert "".join(out) == gate.emitted == text


def test_text_below_the_minimum_is_released_at_once():
    gate = LengthGate(100, 200)
    assert gate.feed("Remote work ") == "Remote work "
    assert gate.feed("helps") == "helps"


def test_text_past_the_minimum_waits_for_its_sentence_to_end():
    gate = LengthGate(20, 200)
    assert gate.feed("Remote work widens the pool") == "Remote work widens t"
    assert gate.feed(" of talent") == ""  # past the minimum, mid-sentence: held back
    assert gate.feed(". Yes") == "he pool of talent."
    assert gate.finish() == " Yes"


def test_a_too_long_reply_is_cut_at_its_last_sentence_end():
    text = ("Remote work widens the talent pool. It cuts hours of commuting every week. Teams need rituals to build "
            "trust. Managers must learn to lead by outcomes rather than presence. Offices still matter for some "
            "roles, and hybrid models are common.")
    gate = LengthGate(100, 200)
    out = stream(gate, words(text))
    assert 100 <= len(gate.emitted) <= 200
    assert gate.emitted.endswith("presence.")
    assert "".join(out) == gate.emitted and text.startswith(gate.emitted)


def test_a_too_long_chinese_reply_is_cut_at_a_chinese_full_stop():
    text = "远程办公让每个人都能自由安排时间。" * 15
    gate = LengthGate(100, 200)
    out = stream(gate, [text[i:i + 7] for i in range(0, len(text), 7)])
    assert 100 <= len(gate.emitted) <= 200 and gate.emitted.endswith("。")
    assert "".join(out) == gate.emitted


def test_a_run_on_reply_without_sentence_ends_is_cut_at_a_marked_break():
    gate = LengthGate(100, 200)
    out = stream(gate, words("and then more words " * 30))
    assert 100 <= len(gate.emitted) <= 200 and gate.emitted.endswith("…")
    assert "".join(out) == gate.emitted


def test_a_reply_cut_off_by_the_token_cap_ends_at_a_sentence_end():
    text = "Remote work widens the talent pool and cuts commuting. Teams still need rituals to build trust. And then"
    gate = LengthGate(60, 200)
    out = stream(gate, words(text), truncated=True)
    assert gate.emitted.endswith("trust.")
    assert "".join(out) == gate.emitted


def test_a_continuation_appends_to_a_short_reply():
    gate = LengthGate(100, 200)
    first = stream(gate, words("Remote work helps."))
    assert gate.emitted == "Remote work helps." and len(gate.emitted) < gate.min_chars
    more = stream(gate, [" "] + words("It cuts commuting, widens the talent pool and lets people focus on deep work "
                                      "for longer stretches."))
    assert 100 <= len(gate.emitted) <= 200
    assert "".join(first + more) == gate.emitted


@pytest.mark.parametrize("bounds", [(0, 10), (10, 10), (20, 10)])
def test_bounds_must_make_sense(bounds):
    with pytest.raises(ValueError):
        LengthGate(*bounds)


def test_newest_within_keeps_the_newest_pieces_that_fit_joined():
    pieces = ["a" * 10, "b" * 10, "c" * 10]
    assert newest_within(pieces, 21) == ["b" * 10, "c" * 10]  # 10 + 1 + 10: the separator counts
    assert newest_within(pieces, 20) == ["c" * 10]
    assert newest_within(pieces, 32) == pieces
    assert newest_within(pieces, 32, sep="\n\n") == ["b" * 10, "c" * 10]
    assert newest_within([], 10) == []


def test_newest_within_clips_a_newest_piece_too_long_alone():
    kept = newest_within(["old", "The first sentence is short. The second one runs on and on."], 40)
    assert kept == ["The first sentence is short."]
