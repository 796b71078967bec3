"""The `speak` node on the scripted model server: the one chunk shape, the length rules, a model that fails."""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypedDict

import pytest
from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph

from parley.core.settings import Settings
from parley.nodes.context import RunContext
from parley.llm.factory import ModelFactory
from parley.llm.tools import ToolSet
import parley.nodes.speak as speak_module
from parley.nodes.events import EVENT_SINK
from parley.nodes.speak import (
    CHUNK_KEYS,
    TOOL_CALL_KEYS,
    LengthRule,
    Turn,
    TurnInterrupted,
    chunk_event,
    is_chunk,
    say,
    send_turn,
    speak,
)

LONG = ("Cities grow when people can reach work. Trams carry more riders than buses do. "
        "Bike lanes cost little and pay back fast. Parking minimums raise rents for everyone. "
        "Zoning reform lets housing follow the jobs. Every one of these choices compounds over decades.")


class State(TypedDict, total=False):
    topic: str
    round: int
    answer: str
    said: list[str]


@pytest.fixture
def context(llm, tmp_path) -> RunContext:
    settings = Settings(openai_base_url=llm.base_url, openai_api_key="sk-test", openai_model="openai:gpt-4o-mini",
                        parley_home=tmp_path, _env_file=None)
    return RunContext(models=ModelFactory(settings))


def ask(state: dict, ctx: RunContext) -> list:
    return [SystemMessage("You are Ada, a planner."), HumanMessage(f"Speak on: {state['topic']}")]


def one_node_graph(node) -> Any:
    builder = StateGraph(State, context_schema=RunContext)
    builder.add_node("speak", node)
    builder.add_edge(START, "speak")
    builder.add_edge("speak", END)
    return builder.compile()


async def run(node, context: RunContext, **state: Any) -> tuple[list[dict], dict]:
    events, final = [], {}
    async for mode, payload in one_node_graph(node).astream(
        {"topic": "trams", **state}, context=context, stream_mode=["custom", "values"]
    ):
        if mode == "custom":
            events.append(payload)
        else:
            final = payload
    return events, final


ADA = {"id": "ada", "name": "Ada"}


async def test_chunks_come_in_the_one_shape_and_make_the_turn(llm, context):
    llm.script(match="Speak on: trams", reply="Trams carry more riders than buses do, and for longer.")
    node = speak(name="ada_turn", prompt=ask, speaker=ADA, round=lambda state, ctx: state["round"], writes="answer",
                 model="openai:gpt-4o", temperature=0.3, label="ada")
    events, state = await run(node, context, round=2)

    assert len(events) > 3 and all(is_chunk(e) and set(e) == set(CHUNK_KEYS) for e in events)
    assert all(e["speaker"] == ADA and e["round"] == 2 for e in events)
    assert "".join(e["content"] for e in events) == state["answer"]
    assert state["answer"] == "Trams carry more riders than buses do, and for longer."
    request = llm.requests[-1]
    assert request["model"] == "gpt-4o" and request["stream"] is True and request["temperature"] == 0.3
    assert [r.label for r in context.ledger.records] == ["ada"]
    assert node.__name__ == "ada_turn" and node.capability == "speak"


async def test_a_long_turn_is_cut_at_a_sentence_end_within_its_bounds(llm, context):
    llm.script(match="Speak on: trams", reply=LONG)
    node = speak(name="turn", prompt=ask, speaker=ADA, writes="answer", length=LengthRule(60, 130))
    events, state = await run(node, context)

    text = state["answer"]
    assert 60 <= len(text) <= 130 and text.endswith(".") and LONG.startswith(text)
    assert "".join(e["content"] for e in events) == text  # nothing sent was taken back
    assert len(llm.requests) == 1


async def test_a_short_turn_is_continued_in_the_same_turn(llm, context):
    llm.script(match="Say more", reply="Bike lanes cost little and pay back fast.")
    llm.script(match="Speak on: trams", reply="Trams work.")
    node = speak(name="turn", prompt=ask, speaker=ADA, writes="answer",
                 length=LengthRule(30, 200, more=lambda said: f"Say more than {len(said)} characters."))
    events, state = await run(node, context)

    assert state["answer"] == "Trams work. Bike lanes cost little and pay back fast."
    assert "".join(e["content"] for e in events) == state["answer"]
    follow_up = llm.requests[-1]["messages"]
    assert follow_up[-2] == {"role": "assistant", "content": "Trams work."}
    assert follow_up[-1]["content"] == "Say more than 11 characters."


async def test_a_short_turn_without_a_continuation_stays_short(llm, context):
    llm.script(match="Speak on: trams", reply="Trams work.")
    node = speak(name="turn", prompt=ask, speaker=ADA, writes="answer", length=LengthRule(30, 200))
    _, state = await run(node, context)
    assert state["answer"] == "Trams work." and len(llm.requests) == 1


async def test_prepare_writes_reads_and_knobs_from_the_context(llm, context):
    llm.script(match="Speak on: trams", reply="Yes to trams.")
    seen: dict[str, Any] = {}

    class Input(TypedDict):
        topic: str

    async def record(turn: Turn, state: dict, ctx: RunContext) -> dict:
        seen.update(turn=turn, state=state, ctx=ctx)
        return {"said": [f"{turn.speaker['name']}: {turn.text}"]}

    node = speak(name="turn", prompt=ask, reads=Input, writes=record,
                 prepare=lambda state, ctx: {"mood": "calm"},
                 speaker=lambda state, ctx: {"id": "ada", "name": f"Ada ({state['mood']})"},
                 model=lambda state, ctx: ctx.model_id())
    _, state = await run(node, context)

    assert state["said"] == ["Ada (calm): Yes to trams."]
    assert seen["turn"].model == "openai:gpt-4o-mini" and seen["ctx"] is context
    assert set(seen["state"]) == {"topic", "mood"}  # the node reads its input schema's keys, plus what prepare gave


async def test_a_model_that_stops_mid_stream_interrupts_the_turn(llm, context):
    llm.script(match="Speak on: trams", reply=LONG, drop_after=3)
    node = speak(name="turn", prompt=ask, speaker=ADA, writes="answer")
    events: list[dict] = []
    with pytest.raises(TurnInterrupted, match="Ada's turn failed after it began streaming") as caught:
        async for payload in one_node_graph(node).astream({"topic": "trams"}, context=context, stream_mode="custom"):
            events.append(payload)
    assert events and all(is_chunk(e) for e in events)  # what went out before it broke
    assert caught.value.__cause__ is not None and not isinstance(caught.value.__cause__, TurnInterrupted)


async def test_a_stream_ended_without_a_finish_is_not_taken_for_a_whole_turn(llm, context):
    llm.script(match="Speak on: trams", reply=LONG, end_after=3)
    node = speak(name="turn", prompt=ask, speaker=ADA, writes="answer")
    with pytest.raises(TurnInterrupted):
        await one_node_graph(node).ainvoke({"topic": "trams"}, context=context)


async def test_with_resend_a_failure_mid_stream_is_raised_as_it_is(llm, context):
    llm.script(match="Speak on: trams", reply=LONG, drop_after=3)
    node = speak(name="turn", prompt=ask, speaker=ADA, writes="answer", resend=True)
    with pytest.raises(Exception) as caught:
        await one_node_graph(node).ainvoke({"topic": "trams"}, context=context)
    assert not isinstance(caught.value, TurnInterrupted)


async def test_a_failure_before_any_token_is_the_model_s_own(llm, context):
    llm.script(match="Speak on: trams", status=400)
    node = speak(name="turn", prompt=ask, speaker=ADA, writes="answer")
    events: list[dict] = []
    with pytest.raises(Exception) as caught:
        async for payload in one_node_graph(node).astream({"topic": "trams"}, context=context, stream_mode="custom"):
            events.append(payload)
    assert not isinstance(caught.value, TurnInterrupted) and "400" in str(caught.value)
    assert events == []


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


async def test_a_speaker_offered_tools_streams_its_calls_and_hands_them_to_writes(llm, context):
    llm.script(reply="Let me look.", tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "c1"}],
               with_tools=True)
    seen: dict[str, Turn] = {}

    def keep(turn: Turn, state: dict, ctx: RunContext) -> dict:
        seen["turn"] = turn
        return {"answer": turn.text}

    node = speak(name="turn", prompt=ask, speaker=ADA, writes=keep, tools=ToolSet.from_request([WEATHER]), round=1)
    events, state = await run(node, context)

    calls = [e for e in events if e["event"] == "tool_call"]
    assert all(tuple(e) == TOOL_CALL_KEYS and e["speaker"] == ADA and e["round"] == 1 and e["index"] == 0
               for e in calls)
    assert (calls[0]["id"], calls[0]["name"]) == ("c1", "get_weather") and len(calls) > 2
    assert all(e["id"] is None and e["name"] is None for e in calls[1:])  # later pieces only add arguments
    assert json.loads("".join(e["arguments"] for e in calls)) == {"city": "Paris"}
    assert state["answer"] == "Let me look." and "".join(e["content"] for e in events if is_chunk(e)) == "Let me look."
    [call] = seen["turn"].tool_calls
    assert call["id"] == "c1" and call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert llm.requests[-1]["tools"] == [WEATHER]


async def test_a_held_turn_sends_nothing_until_it_is_sent_whole(llm, context):
    llm.script(reply="Trams, then bikes.", tool_calls=[{"name": "get_weather", "arguments": {"city": "Lyon"}}])

    async def held(state: dict, runtime: Any) -> dict:
        turn = await say(context.chat(tools=ToolSet.from_request([WEATHER])), ask(state, context), speaker=ADA,
                         hold=True)
        send_turn(turn)
        return {"answer": turn.text}

    events, _ = await run(held, context)
    # No piece streamed: the text in one chunk, the call in one piece, both once the turn was sent.
    assert events[0]["event"] == "chunk" and events[0]["content"] == "Trams, then bikes."
    assert [e["event"] for e in events] == ["chunk", "tool_call"] and json.loads(events[1]["arguments"]) == {
        "city": "Lyon"}


async def test_a_turn_asked_whole_is_one_request_and_one_chunk_with_its_calls(llm, context):
    llm.script(reply="Trams, then bikes.", tool_calls=[{"name": "get_weather", "arguments": {"city": "Lyon"}}])

    async def whole(state: dict, runtime: Any) -> dict:
        turn = await say(context.chat(tools=ToolSet.from_request([WEATHER])), ask(state, context), speaker=ADA,
                         whole=True)
        return {"answer": turn.text, "said": [json.dumps(call) for call in turn.tool_calls]}

    events, state = await run(whole, context)
    assert llm.requests[-1].get("stream") is not True  # asked once, not streamed
    assert [e["event"] for e in events] == ["chunk", "tool_call"]
    assert events[0]["content"] == state["answer"] == "Trams, then bikes."
    assert json.loads(events[1]["arguments"]) == {"city": "Lyon"} and events[1]["name"] == "get_weather"
    [call] = [json.loads(c) for c in state["said"]]
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Lyon"}
    [record] = context.ledger.records
    assert record.output_tokens > 0 and not record.estimated and record.tool_calls == 1


async def test_a_turn_asked_whole_keeps_its_length_rule(llm, context):
    llm.script(match="Speak on: trams", reply=LONG)

    async def whole(state: dict, runtime: Any) -> dict:
        turn = await say(context.chat(), ask(state, context), speaker=ADA, length=LengthRule(60, 130), whole=True)
        return {"answer": turn.text}

    events, state = await run(whole, context)
    text = state["answer"]
    assert 60 <= len(text) <= 130 and text.endswith(".") and LONG.startswith(text)
    assert "".join(e["content"] for e in events) == text and len(llm.requests) == 1


class _Buffered:
    """A chat model whose chunks were all read already: its stream never waits."""

    async def astream(self, messages: list) -> Any:
        for i in range(50):
            yield AIMessageChunk(content=f"w{i} ")


@pytest.mark.parametrize("share, interleaved", [(0.0, True), (60.0, False)])
async def test_chunks_already_read_give_the_loop_up_every_fair_share(monkeypatch, share, interleaved):
    monkeypatch.setattr(speak_module, "STREAM_FAIR_SHARE", share)
    ticks, seen = [0], []

    async def tick() -> None:  # another run's work, waiting for the loop
        while True:
            ticks[0] += 1
            await asyncio.sleep(0)

    sink = EVENT_SINK.set(lambda event: seen.append(ticks[0]))
    ticker = asyncio.create_task(tick())
    try:
        await asyncio.sleep(0)
        turn = await say(_Buffered(), [], speaker=ADA)
    finally:
        ticker.cancel()
        EVENT_SINK.reset(sink)
    assert turn.text == "".join(f"w{i} " for i in range(50)) and len(seen) == 50
    # Given up after each chunk (a share of 0), the other task runs between any two; within its share, never.
    assert (len(set(seen)) == 50) is interleaved and (len(set(seen)) == 1) is not interleaved


def test_chunk_event_is_the_one_shape():
    event = chunk_event({"id": "user", "name": "Ada", "extra": 1}, "Hi", round=3)
    assert event == {"event": "chunk", "speaker": {"id": "user", "name": "Ada"}, "round": 3, "content": "Hi"}
    assert tuple(event) == CHUNK_KEYS and is_chunk(event)
    assert not is_chunk({"event": "chunk", "content": "Hi"})  # a wire shape, already projected
