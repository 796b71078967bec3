"""The round table's reading of what its models write holds for any answer: a stance is one of four with a confidence
in [0, 1] and a bounded key point (or a ValidationError), an unreadable one falls back to neutral, and the fallback
synthesis and prompts are built from any transcript, the same one every run (graphs/roundtable/steps.py)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from parley.graphs.roundtable.steps import (
    MemoryNotes,
    StatedPosition,
    SynthesisDraft,
    agent_insights,
    describe_consensus,
    fallback_synthesis,
    format_positions,
    keep_notes,
)
from parley.nodes.convergence import STANCES
from parley.nodes.text import first_sentence
from tests.support.strategies import PROPERTY, json_values, strings, text

texts_or_values = st.one_of(text, json_values)
stance_answers = st.fixed_dictionaries({
    "stance": st.one_of(st.sampled_from([*STANCES, "For", "yes", ""]), json_values),
    "confidence": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**30), 10**30),
                            st.booleans(), json_values),
    "keyPoint": texts_or_values,
}) | json_values

SEATS = [{"id": f"agent-{i}", "name": f"Agent {i}", "role": ""} for i in range(3)] + [
    {"id": "devils-advocate", "name": "Devil's advocate", "role": "critic"}]


@st.composite
def transcripts(draw) -> list[dict]:
    """Messages as `_record_turn` writes them: any text where a model wrote it."""
    messages = []
    for _ in range(draw(st.integers(0, 10))):
        seat = draw(st.integers(0, len(SEATS) - 1))
        messages.append({
            "agentId": SEATS[seat]["id"], "agentName": draw(strings(max_size=12)), "agentRole": draw(strings(max_size=8)),
            "content": draw(text), "stance": draw(st.sampled_from(STANCES)),
            "confidence": round(draw(st.floats(0, 1)), 3), "keyPoint": draw(text.map(lambda t: t[:200])),
            "roundNumber": draw(st.integers(0, 3)), "isDevilsAdvocate": seat == len(SEATS) - 1, "seat": seat,
        })
    return messages


@PROPERTY
@given(answer=stance_answers)
def test_a_stated_position_is_bounded_or_a_validation_error(answer):
    try:
        position = StatedPosition.model_validate(answer)
    except ValidationError:
        return
    assert position.stance in STANCES
    assert 0.0 <= position.confidence <= 1.0 and len(position.keyPoint) <= 200


@PROPERTY
@given(answer=text)
def test_any_text_as_a_stance_synthesis_or_notes_is_read_or_a_validation_error(answer):
    for schema in (StatedPosition, SynthesisDraft, MemoryNotes):
        try:
            schema.model_validate_json(answer)
        except ValidationError:
            pass


@PROPERTY
@given(content=text)
def test_an_unreadable_stance_falls_back_to_neutral_whatever_the_answer(content):
    # What `_record_turn`'s fallback builds: it must itself validate, for any answer the agent streamed.
    position = StatedPosition(stance="neutral", confidence=0.0, keyPoint=first_sentence(content.strip(), 200))
    assert position.keyPoint == first_sentence(content.strip(), 200)


@PROPERTY
@given(answer=st.fixed_dictionaries({
    "summary": texts_or_values, "debateEvolution": texts_or_values, "devilsAdvocateMainAttack": texts_or_values,
    "consensus": st.lists(texts_or_values, max_size=6), "riskPoints": st.lists(texts_or_values, max_size=6),
    "recommendedAction": texts_or_values, "conditions": st.lists(texts_or_values, max_size=6),
    "confidenceLevel": st.sampled_from(["low", "medium", "high", "High", ""]),
    "urgency": st.sampled_from(["low", "medium", "high", "none"]),
}), notes=st.lists(texts_or_values, max_size=6), most=st.integers(0, 5))
def test_a_synthesis_and_notes_are_bounded_or_a_validation_error(answer, notes, most):
    try:
        draft = SynthesisDraft.model_validate(answer)
    except ValidationError:
        pass
    else:
        assert len(draft.summary) <= 400 and len(draft.debateEvolution) <= 200 and len(draft.recommendedAction) <= 200
        for items in (draft.consensus, draft.riskPoints, draft.conditions):
            assert len(items) <= 4 and all(len(item) <= 120 for item in items)
    try:
        kept = MemoryNotes.model_validate({"notes": notes})
    except ValidationError:
        return
    memories = keep_notes({"agent": {"id": "a"}}, SimpleNamespace(memory_notes=most), kept)["memories"][0]["notes"]
    assert len(memories) <= min(most, 3) and all(note and note == note.strip() for note in memories)


@PROPERTY
@given(transcript=transcripts())
def test_the_fallback_synthesis_names_the_final_majority_first_given_on_ties(transcript):
    draft = fallback_synthesis(SEATS, transcript)
    final_round = max((m["roundNumber"] for m in transcript), default=0)
    stances = [m["stance"] for m in transcript if m["roundNumber"] == final_round and not m["isDevilsAdvocate"]]
    leaning = next((s for s in stances if stances.count(s) == max(map(stances.count, stances))), "neutral")
    assert f"leaned {leaning} ({stances.count(leaning)} of {len(stances)} seats)" in draft.summary
    assert len(draft.summary) <= 400 and len(draft.debateEvolution) <= 200


@PROPERTY
@given(transcript=transcripts(), chars=st.integers(0, 300), round_number=st.integers(0, 3))
def test_prompts_and_insights_are_built_from_any_transcript(transcript, chars, round_number):
    lines = format_positions(transcript, chars=chars, me="agent-0")
    assert lines == "(nobody has spoken yet)" if not transcript else len(lines.splitlines()) >= len(transcript)
    assert isinstance(describe_consensus(transcript, round_number), str)
    insights = agent_insights(SEATS, transcript)
    spoke = [seat for seat in SEATS if any(m["agentId"] == seat["id"] for m in transcript)]
    assert [i["name"] for i in insights] == [seat["name"] for seat in spoke]
    for insight, seat in zip(insights, spoke):
        said = sorted((m for m in transcript if m["agentId"] == seat["id"]), key=lambda m: m["roundNumber"])
        assert insight["shifted"] == (said[0]["stance"] != said[-1]["stance"])
