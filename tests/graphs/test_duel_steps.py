"""Duel nodes against the scripted model: opponent choice and its fallback, turn length rules, judging."""

from __future__ import annotations

import pytest

from parley.graphs.duel import graph
from parley.graphs.duel.personas import CHINESE, ENGLISH
from parley.graphs.duel.steps import DuelContext, TurnInterrupted, combine_verdicts
from parley.llm.factory import ModelFactory
from tests.support.duel import (
    CHINESE_OPPONENT,
    CHINESE_OPPONENT_REPLY,
    CHINESE_USER_REPLY,
    CONTINUE_MARK,
    JUDGE_MARK,
    OPPONENT,
    OPPONENT_REPLY,
    SELECT_MARK,
    USER_REPLY,
    judgement,
    script_duel,
)

TOPIC = "Should remote work be the default?"
ADA = {"name": "Ada", "bio": "Engineer who ships from home",
       "softMemory": {"traits": ["rational"], "interests": ["tools"]}}


async def run_duel(settings, *, topic: str = TOPIC, profile: dict | None = None, rounds: int = 1, **knobs):
    """Run the duel graph; return its custom events and its final state."""
    context = DuelContext(models=ModelFactory(settings), rounds=rounds, **knobs)
    events, state = [], {}
    inputs = {"topic": topic, "user_profile": profile or ADA}
    async for mode, payload in graph.astream(inputs, context=context, stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(payload)
        else:
            state = payload
    return events, state


def turn_chunks(events: list[dict]) -> list[str]:
    """The concatenated chunks of each turn, in order."""
    turns, current = [], None
    for event in events:
        if event["event"] == "start":
            current = []
        elif event["event"] == "chunk":
            current.append(event["content"])
        elif event["event"] == "message":
            turns.append("".join(current))
    return turns


def requests_with(llm, mark: str) -> list[dict]:
    return [r for r in llm.requests if any(mark in (m.get("content") or "") for m in r["messages"])]


# --- select opponent -----------------------------------------------------------------------


async def test_the_model_picks_the_opponent(parley_env, llm):
    script_duel(llm)
    _, state = await run_duel(parley_env)
    assert state["opponent_profile"] == OPPONENT
    prompt = requests_with(llm, SELECT_MARK)[0]["messages"][1]["content"]
    assert TOPIC in prompt and "Engineer who ships from home" in prompt and "rational" in prompt


@pytest.mark.parametrize("answer", [
    {"status": 500},  # the model is down
    {"json": "I would pick a sceptic."},  # not a JSON object
    {"json": {"name": "Someone"}},  # JSON missing required fields
    {"json": {**OPPONENT, "name": "  "}},  # a blank name
    {"json": {**OPPONENT, "name": "Ada"}},  # the user themself
])
async def test_an_unusable_opponent_falls_back_to_a_built_in_persona(parley_env, llm, answer):
    llm.script(match=SELECT_MARK, **answer)  # the first matching rule answers, so this one wins
    script_duel(llm)
    events, state = await run_duel(parley_env)
    assert state["opponent_profile"]["name"] in {p.name for p in ENGLISH}
    assert TOPIC in state["opponent_profile"]["stance"]
    assert set(state["opponent_profile"]) == {"name", "title", "bio", "stance", "traits"}
    assert [e["name"] for e in events if e["event"] == "start"][1] == state["opponent_profile"]["name"]
    assert state["synthesis"]["winner"] in {"user", "opponent", "tie"}


async def test_a_chinese_topic_falls_back_to_a_chinese_persona(parley_env, llm):
    llm.script(match=SELECT_MARK, status=500)
    _, state = await run_duel(parley_env, topic="远程工作是否应该成为主流？", profile={"name": "张三"})
    assert state["opponent_profile"]["name"] in {p.name for p in CHINESE}
    assert "远程工作是否应该成为主流？" in state["opponent_profile"]["stance"]


# --- speak ---------------------------------------------------------------------------------


async def test_turns_stream_and_their_chunks_make_the_message(parley_env, llm):
    script_duel(llm)
    events, state = await run_duel(parley_env, rounds=2)
    kinds = [e["event"] for e in events if e["event"] != "chunk"]
    assert kinds == ["opponent"] + ["start", "message"] * 4 + ["synthesizing"]
    assert events[0]["opponentProfile"] == state["opponent_profile"]
    assert [m["role"] for m in state["messages"]] == ["user", "opponent"] * 2
    assert [m["content"] for m in state["messages"]] == [USER_REPLY, OPPONENT_REPLY] * 2
    assert turn_chunks(events) == [m["content"] for m in state["messages"]]
    assert sum(e["event"] == "chunk" for e in events) > 8  # streamed in pieces, not whole turns
    starts = [e for e in events if e["event"] == "start"]
    assert [(s["round"], s["rounds"]) for s in starts] == [(1, 2), (1, 2), (2, 2), (2, 2)]
    turn = requests_with(llm, "You are Ada,")[0]
    assert turn["temperature"] == 0.8 and turn["stream"] is True
    assert turn["max_completion_tokens"] == 100  # room for 200 Latin characters


async def test_a_too_long_turn_is_cut_at_a_sentence_end(parley_env, llm):
    long_reply = ("Remote work widens the talent pool. It cuts hours of commuting every single week. Teams need "
                  "rituals to build trust. Managers must learn to lead by outcomes rather than by presence. Offices "
                  "still matter for some roles, and hybrid models are now common.")
    script_duel(llm, user_reply=long_reply)
    events, state = await run_duel(parley_env)
    content = state["messages"][0]["content"]
    assert 100 <= len(content) <= 200 and content.endswith("presence.") and long_reply.startswith(content)
    assert turn_chunks(events)[0] == content


async def test_a_too_short_turn_is_continued_once(parley_env, llm):
    llm.script(match=CONTINUE_MARK, reply="It cuts commuting, widens the talent pool and gives people long "
                                          "stretches of focus.")
    script_duel(llm, user_reply="Remote work helps.")
    events, state = await run_duel(parley_env)
    content = state["messages"][0]["content"]
    assert content.startswith("Remote work helps. It cuts commuting") and 100 <= len(content) <= 200
    assert turn_chunks(events)[0] == content
    retry = requests_with(llm, CONTINUE_MARK)
    assert len(retry) == 1
    assert retry[0]["messages"][-2] == {"role": "assistant", "content": "Remote work helps."}


async def test_a_turn_still_short_after_its_retry_is_kept(parley_env, llm):
    llm.script(match=CONTINUE_MARK, reply="Really.")
    script_duel(llm, user_reply="Remote work helps.")
    _, state = await run_duel(parley_env)
    assert state["messages"][0]["content"] == "Remote work helps. Really."
    assert len(requests_with(llm, CONTINUE_MARK)) == 1


async def test_a_chinese_topic_gets_chinese_turns_within_bounds(parley_env, llm):
    long_chinese = "远程办公让每个人都能自由安排时间。" * 15
    script_duel(llm, user_name="张三", opponent=CHINESE_OPPONENT, user_reply=long_chinese,
                opponent_reply=CHINESE_OPPONENT_REPLY)
    events, state = await run_duel(parley_env, topic="远程工作是否应该成为主流？", profile={"name": "张三"})
    user, opponent = state["messages"]
    assert 100 <= len(user["content"]) <= 200 and user["content"].endswith("。")
    assert opponent["content"] == CHINESE_OPPONENT_REPLY
    assert turn_chunks(events) == [user["content"], opponent["content"]]
    turn = requests_with(llm, "You are 张三,")[0]
    assert "in Chinese" in turn["messages"][0]["content"]
    assert turn["max_completion_tokens"] == 300  # CJK: about one token a character
    assert "Chinese" in requests_with(llm, SELECT_MARK)[0]["messages"][0]["content"]
    assert len(CHINESE_USER_REPLY) <= 200


async def test_each_turn_repeats_the_seats_previous_prompt_then_adds_the_new_turns(parley_env, llm):
    script_duel(llm)
    _, state = await run_duel(parley_env, rounds=8)
    assert len(state["messages"]) == 16
    prompts = [r["messages"] for r in requests_with(llm, "You are Ada,")]
    assert len(prompts) == 8
    for earlier, later in zip(prompts, prompts[1:]):
        # Cache-friendly: all but the ask of the previous call, byte for byte, then the two new turns, then the ask.
        assert later[: len(earlier) - 1] == earlier[:-1]
        assert len(later) == len(earlier) + 2
    last = prompts[-1]
    assert last[0]["role"] == "system" and "You are Ada," in last[0]["content"]
    assert [m["content"] for m in last[1:-1]] == [f"{m['name']}: {m['content']}" for m in state["messages"][:14]]
    assert last[-1]["content"].startswith("Round 8 of 8") and "last turn" in last[-1]["content"]
    assert prompts[0][-1]["content"].startswith("Round 1 of 8. You open the debate")


async def test_a_small_window_cuts_the_oldest_turns_and_keeps_persona_and_ask(parley_env, llm):
    from parley.llm.providers import BUILTIN_PROVIDERS

    llm.script(match="You are Ada,", replies=[f"({i}) {USER_REPLY}" for i in range(1, 9)])
    script_duel(llm)
    small = {**BUILTIN_PROVIDERS, "openai": BUILTIN_PROVIDERS["openai"].model_copy(update={"context_window": 700})}
    context = DuelContext(models=ModelFactory(parley_env, providers=small), rounds=8)
    state = await graph.ainvoke({"topic": TOPIC, "user_profile": ADA}, context=context)
    assert len(state["messages"]) == 16
    last = requests_with(llm, "You are Ada,")[-1]["messages"]
    assert last[0]["role"] == "system" and last[-1]["content"].startswith("Round 8 of 8")
    assert state["messages"][13]["content"] in last[-2]["content"]  # the newest turns stay
    assert not any(state["messages"][0]["content"] in m["content"] for m in last)  # the oldest went


async def test_a_failure_before_the_first_token_is_retried(parley_env, llm):
    llm.script(match="You are Ada,", status=503, times=1)
    script_duel(llm)
    events, state = await run_duel(parley_env)
    assert state["messages"][0]["content"] == USER_REPLY
    assert len(requests_with(llm, "You are Ada,")) == 2
    assert [e["role"] for e in events if e["event"] == "start"][:2] == ["user", "user"]  # announced per attempt


async def test_a_failure_mid_stream_is_not_retried(parley_env, llm):
    script_duel(llm, opponent_turn={"drop_after": 3})
    events: list[dict] = []
    with pytest.raises(TurnInterrupted, match="Margaret Hale's turn failed after it began streaming"):
        async for mode, payload in graph.astream(
            {"topic": TOPIC, "user_profile": ADA}, context=DuelContext(models=ModelFactory(parley_env), rounds=1),
            stream_mode=["custom"],
        ):
            events.append(payload)
    assert len(requests_with(llm, "You are Margaret Hale,")) == 1
    assert [e["event"] for e in events][-1] == "chunk"
    assert sum(e["event"] == "message" for e in events) == 1  # only the user's turn completed


# --- judge and synthesize ------------------------------------------------------------------


async def test_agreeing_judges_give_the_winner(parley_env, llm):
    script_duel(llm)
    _, state = await run_duel(parley_env)
    synthesis = state["synthesis"]
    assert set(synthesis) == {"consensus", "disagreements", "winner", "winnerReason", "conclusion", "recommendations"}
    assert synthesis["winner"] == "user"
    assert synthesis["winnerReason"] == "Ada gave more concrete evidence."  # de-anonymised
    assert synthesis["conclusion"] == "Remote work works where teams build deliberate rituals."
    assert synthesis["recommendations"] == ["Pilot hybrid schedules", "Measure outcomes, not hours"]
    orders = sorted((v["order"], v["speakerA"], v["winner"]) for v in state["verdicts"])
    assert orders == [("as_debated", "user", "user"), ("swapped", "opponent", "user")]
    judges = requests_with(llm, JUDGE_MARK)
    assert len(judges) == 2 and all(r["temperature"] == 0.3 for r in judges)
    for request in judges:
        transcript = request["messages"][1]["content"]
        assert "Ada" not in transcript and "Margaret Hale" not in transcript
        assert "Speaker A:" in transcript and "Speaker B:" in transcript
    firsts = sorted(r["messages"][1]["content"].split("Speaker A: ", 1)[1][:20] for r in judges)
    assert firsts == sorted([USER_REPLY[:20], OPPONENT_REPLY[:20]])  # each side opened once


async def test_judges_that_disagree_once_swapped_make_a_tie(parley_env, llm):
    # Both judges favour whoever is "A": position bias, which the swap exposes.
    script_duel(llm, as_debated=judgement("A"), swapped=judgement("A"))
    _, state = await run_duel(parley_env)
    synthesis = state["synthesis"]
    assert synthesis["winner"] == "tie"
    assert "disagreed" in synthesis["winnerReason"]
    assert "as debated: Ada; swapped: Margaret Hale" in synthesis["winnerReason"]
    assert sorted(v["winner"] for v in state["verdicts"]) == ["opponent", "user"]


async def test_the_conclusion_is_cut_to_100_characters(parley_env, llm):
    conclusion = ("Remote work succeeds when organisations invest in rituals. " * 5).strip()
    script_duel(llm, as_debated=judgement("A", conclusion=conclusion), swapped=judgement("B", conclusion=conclusion))
    _, state = await run_duel(parley_env)
    assert len(state["synthesis"]["conclusion"]) <= 100
    assert state["synthesis"]["conclusion"].endswith("rituals.")
    assert all(len(v["conclusion"]) <= 100 for v in state["verdicts"])


async def test_an_unparsable_judgement_is_retried(parley_env, llm):
    llm.script(match=JUDGE_MARK, json={"winner": "Ada, clearly"}, times=1)
    script_duel(llm)
    _, state = await run_duel(parley_env)
    assert state["synthesis"]["winner"] == "user"
    assert len(requests_with(llm, JUDGE_MARK)) == 3


def test_a_tie_reason_follows_the_topic_language():
    verdicts = [{**judgement("tie"), "order": "as_debated", "winner": "user"},
                {**judgement("tie"), "order": "swapped", "winner": "tie"}]
    synthesis = combine_verdicts(verdicts, names={"user": "张三", "opponent": "李明"}, topic="远程工作？",
                                 conclusion_max_chars=100)
    assert synthesis["winner"] == "tie" and "判为平局" in synthesis["winnerReason"] and "张三" in synthesis["winnerReason"]


async def test_a_judge_unreadable_twice_abstains_and_the_result_is_a_tie(parley_env, llm):
    # Three unreadable answers across the two parallel judges: one judge is unreadable twice.
    llm.script(match=JUDGE_MARK, json={"winner": "Ada, clearly"}, times=3)
    script_duel(llm)
    _, state = await run_duel(parley_env)
    assert state["synthesis"]["winner"] == "tie"
    assert any("could not be read" in v["winnerReason"] for v in state["verdicts"])
    assert len(requests_with(llm, JUDGE_MARK)) == 4
