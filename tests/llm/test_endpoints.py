"""An endpoint's capacity (`llm.endpoints`): calls beyond what it answers at once wait in line in Parley, their read
timeout and deadline counted from when they are sent, and each that waits is told to the run."""

from __future__ import annotations

import asyncio
import threading

import pytest
from langchain_core.messages import HumanMessage

from parley.core.settings import Settings
from parley.llm.endpoints import QUEUE_WATCH, Endpoint, Queued
from parley.llm.factory import ModelFactory


async def _calls(place: Endpoint, limit: int | None, n: int, seconds: float = 0.02) -> tuple[list[int], int]:
    """`n` calls at once through `place`'s slots: the order they were sent in, and the most sent at once."""
    sent, busy, most = [], 0, 0

    async def call(i: int) -> None:
        nonlocal busy, most
        async with place.slot(limit, model="m"):
            sent.append(i)
            busy += 1
            most = max(most, busy)
            await asyncio.sleep(seconds)
            busy -= 1

    await asyncio.gather(*(call(i) for i in range(n)))
    return sent, most


async def test_calls_beyond_the_capacity_wait_in_line_first_come_first_sent():
    place, heard = Endpoint(), []
    token = QUEUE_WATCH.set(heard.append)
    try:
        sent, most = await _calls(place, 1, 4)
    finally:
        QUEUE_WATCH.reset(token)
    assert most == 1 and sent == [0, 1, 2, 3]
    assert heard == [Queued("m", 1), Queued("m", 2), Queued("m", 3)]  # the first is sent at once
    assert place.sending == 0 and place.waiting == 0

    assert (await _calls(place, 2, 6))[1] == 2
    assert (await _calls(place, None, 6))[1] == 6  # no capacity: every call is sent at once


async def test_a_place_is_given_back_however_the_call_ends():
    place = Endpoint()
    held, go = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with place.slot(1):
            held.set()
            await go.wait()
            raise ValueError("the call failed")

    first = asyncio.create_task(holder())
    await held.wait()
    waiting = asyncio.create_task(_calls(place, 1, 1))  # in line behind the first
    cancelled = asyncio.create_task(_calls(place, 1, 1))
    await asyncio.sleep(0.01)
    assert place.waiting == 2
    cancelled.cancel()  # a call cancelled while it waits leaves the line
    await asyncio.sleep(0.01)
    assert place.waiting == 1
    go.set()
    with pytest.raises(ValueError):
        await first
    assert (await waiting)[0] == [0]
    with pytest.raises(asyncio.CancelledError):
        await cancelled

    async def cancelled_while_sent() -> None:
        async with place.slot(1):
            await asyncio.sleep(30)

    task = asyncio.create_task(cancelled_while_sent())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert place.sending == 0 and place.waiting == 0
    assert (await _calls(place, 1, 2))[1] == 1


def test_the_line_is_shared_by_every_event_loop_of_the_process():
    # The factory's clients are per event loop (a second server's loop, `asyncio.run` twice): the endpoint is not.
    place, busy, most, lock = Endpoint(), [0], [0], threading.Lock()

    async def calls() -> None:
        async def call() -> None:
            async with place.slot(1):
                with lock:
                    busy[0] += 1
                    most[0] = max(most[0], busy[0])
                await asyncio.sleep(0.02)
                with lock:
                    busy[0] -= 1

        await asyncio.gather(*(call() for _ in range(5)))

    threads = [threading.Thread(target=asyncio.run, args=(calls(),)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert most[0] == 1 and place.sending == 0 and place.waiting == 0


@pytest.mark.parametrize("streamed", [True, False])
async def test_the_embedded_models_calls_are_sent_one_at_a_time_each_timed_from_its_sending(parley_env, llm,
                                                                                          streamed):
    # Each answer takes 0.6 s, and a call may wait 1 s for data and take 1.5 s in all: counted from the queueing,
    # the third of three calls (sent after 1.2 s) would fail.
    llm.script(latency=0.6)
    settings = Settings(**{**parley_env.model_dump(), "parley_request_timeout": 1.0,
                           "parley_model_call_deadline": 1.5})
    factory = ModelFactory(settings, local_base_url=llm.base_url)
    chat = factory.chat("local:smollm2", max_tokens=20)
    heard: list[Queued] = []
    token = QUEUE_WATCH.set(heard.append)
    try:
        ask = (lambda i: _streamed(chat, i)) if streamed else (lambda i: chat.ainvoke([HumanMessage(f"Seat {i}?")]))
        answers = await asyncio.gather(*(ask(i) for i in range(3)))
    finally:
        QUEUE_WATCH.reset(token)
    assert all(answers) and len(llm.requests) == 3
    assert llm.most_at_once == 1
    assert sorted(q.position for q in heard) == [1, 2] and {q.model for q in heard} == {"local:smollm2"}
    (_, first_end), *_, (last_start, last_end) = llm.spans
    assert last_end - first_end > 1.0  # the last call was answered more than a read timeout after the first


async def _streamed(chat, i: int) -> str:
    return "".join([chunk.content async for chunk in chat.astream([HumanMessage(f"Seat {i}?")])])


async def test_a_hosted_providers_calls_still_go_at_once(parley_env, llm):
    llm.script(latency=0.3)
    chat = ModelFactory(parley_env).chat("openai:gpt-4o-mini", max_tokens=20)
    heard: list[Queued] = []
    token = QUEUE_WATCH.set(heard.append)
    try:
        await asyncio.gather(*(chat.ainvoke([HumanMessage(f"Seat {i}?")]) for i in range(3)))
    finally:
        QUEUE_WATCH.reset(token)
    assert llm.most_at_once == 3 and not heard


async def test_providers_json_sets_an_endpoints_capacity(parley_env, llm):
    parley_env.parley_home.mkdir(parents=True, exist_ok=True)
    parley_env.providers_file.write_text('{"vllm": {"base_url": "%s", "max_concurrent": 2}}' % llm.base_url)
    factory = ModelFactory(parley_env)
    assert factory.provider("vllm:qwen").max_concurrent == 2 and factory.provider("openai:x").max_concurrent is None
    assert factory.provider("local:smollm2").max_concurrent == 1
    llm.script(latency=0.3)
    chat = factory.chat("vllm:qwen", max_tokens=20)
    await asyncio.gather(*(chat.ainvoke([HumanMessage(f"Seat {i}?")]) for i in range(4)))
    assert llm.most_at_once == 2
