"""Several runs' event batches and usage rows go to the database in one command (`store.runs.store_batch`,
`store.runs.append_batches`), and a run whose event numbers were taken fails alone."""

from __future__ import annotations

import asyncio

import pytest

from parley.core.limits import MAX_EVENT_PAGE_BYTES
from parley.llm.usage import UsageRecord
from parley.store import runs as run_store


def events(*seqs: int) -> list[dict]:
    return [{"seq": seq, "event": "chunk", "data": {"content": f"#{seq}"}, "origin": None} for seq in seqs]


def usage(model: str) -> UsageRecord:
    return UsageRecord(model=model, input_tokens=3, output_tokens=5, cost=0.0, priced=False)


async def stored_seqs(db, run_id: str) -> list[int]:
    return [row["seq"] for row in await run_store.all_events(db, run_id=run_id)]


async def test_a_conflicting_run_loses_its_page_and_no_other_run_its_own(db):
    await run_store.append_events(db, run_id="taken", events=events(0))  # another worker stored #0
    conflicted = await run_store.append_batches(db, [("first", events(0, 1, 2)), ("taken", events(0, 1, 2)),
                                                     ("last", events(0, 1))])
    assert list(conflicted) == ["taken"] and isinstance(conflicted["taken"], run_store.EventConflict)
    assert await stored_seqs(db, "first") == [0, 1, 2]
    assert await stored_seqs(db, "taken") == [0]  # the other worker's #0; nothing of this batch
    assert await stored_seqs(db, "last") == [0, 1]


async def test_a_batch_is_one_document_and_reads_back_event_by_event(counted):
    db, commands = counted
    await run_store.append_events(db, run_id="r", events=events(0, 1, 2))
    await run_store.append_events(db, run_id="r", events=events(3, 4))
    assert await db.run_events.count_documents({"runId": "r"}) == 2
    assert [r["data"]["content"] for r in await run_store.all_events(db, run_id="r")] == ["#0", "#1", "#2", "#3", "#4"]
    assert [r["seq"] for r in await run_store.events_after(db, run_id="r", after=1)] == [2, 3, 4]
    assert [r["seq"] for r in await run_store.events_after(db, run_id="r", after=2)] == [3, 4]
    assert await run_store.events_after(db, run_id="r", after=4) == []
    assert await run_store.last_seq(db, run_id="r") == 4


async def test_a_fence_keeps_the_earlier_execution_from_storing_more(db):
    await run_store.append_events(db, run_id="r", events=events(0, 1, 2))
    assert await run_store.fence_events(db, run_id="r") == 2
    # The earlier execution's next page starts where its last ended: it is refused, whatever its length.
    conflicted = await run_store.append_batches(db, [("r", events(3, 4, 5, 6))])
    assert list(conflicted) == ["r"]
    # The execution that fenced it numbers its events past the fence (the engine leaves a gap).
    await run_store.append_events(db, run_id="r", events=events(260, 261))
    assert await stored_seqs(db, "r") == [0, 1, 2, 260, 261]
    assert [r["seq"] for r in await run_store.events_after(db, run_id="r", after=2)] == [260, 261]


async def test_a_fence_goes_after_a_page_stored_while_it_was_being_put_up(db):
    await run_store.append_events(db, run_id="r", events=events(0))
    await db.run_events.insert_one({"runId": "r", "seq": 1, "last": 1, "events": []})  # a fence another worker put up
    await run_store.append_events(db, run_id="r", events=events(2, 3))  # written by a third, after that one
    assert await run_store.fence_events(db, run_id="r") == 3
    assert list(await run_store.append_batches(db, [("r", events(4))])) == ["r"]


async def test_events_are_voided_inside_their_pages(db):
    await run_store.append_events(db, run_id="r", events=events(0, 1, 2))
    await run_store.append_events(db, run_id="r", events=events(3, 4))
    await run_store.mark_void(db, run_id="r", seqs=[2, 3])
    assert [(r["seq"], r.get("void", False)) for r in await run_store.all_events(db, run_id="r")] == [
        (0, False), (1, False), (2, True), (3, True), (4, False)]


async def test_events_stored_a_document_each_before_pages_read_as_ever(db):
    await db.run_events.insert_many([{"runId": "old", "seq": s, "event": "chunk", "data": {"content": f"#{s}"},
                                      "origin": None} for s in range(3)])
    await db.migrations.delete_many({})
    await run_store.migrate_events(db)
    await run_store.mark_void(db, run_id="old", seqs=[1])
    assert [(r["seq"], r.get("void", False)) for r in await run_store.all_events(db, run_id="old")] == [
        (0, False), (1, True), (2, False)]
    assert [r["seq"] for r in await run_store.events_after(db, run_id="old", after=0)] == [1, 2]
    assert await run_store.fence_events(db, run_id="old") == 2


async def test_writes_that_come_together_are_sent_together(counted):
    db, commands = counted
    await asyncio.gather(*(run_store.store_batch(db, run_id=f"run{i}", events=events(0, 1), usage=[usage(f"m{i}")])
                           for i in range(10)))
    assert commands.sent.count(("insert", "run_events")) == 1
    assert commands.sent.count(("insert", "run_usage")) == 0  # each run's usage rows ride in its page
    for i in range(10):
        assert await stored_seqs(db, f"run{i}") == [0, 1]
        assert [u["model"] for u in await run_store.list_usage(db, run_id=f"run{i}")] == [f"m{i}"]


async def test_a_write_that_comes_while_one_is_in_flight_goes_in_the_next_command(counted):
    db, commands = counted
    first = asyncio.create_task(run_store.store_batch(db, run_id="a", events=events(0), usage=[]))
    await asyncio.sleep(0)  # the first is being sent
    await asyncio.gather(first, *(run_store.store_batch(db, run_id=r, events=events(0), usage=[]) for r in "bc"))
    assert commands.sent.count(("insert", "run_events")) == 2
    assert [await stored_seqs(db, r) for r in "abc"] == [[0], [0], [0]]


async def test_only_the_run_whose_numbers_were_taken_sees_the_conflict(db):
    await run_store.append_events(db, run_id="taken", events=events(0))
    results = await asyncio.gather(run_store.store_batch(db, run_id="taken", events=events(0, 1), usage=[usage("lost")]),
                                   run_store.store_batch(db, run_id="fine", events=events(0, 1), usage=[usage("kept")]),
                                   return_exceptions=True)
    assert isinstance(results[0], run_store.EventConflict)
    assert results[1] is None
    assert await stored_seqs(db, "taken") == [0]
    assert await run_store.list_usage(db, run_id="taken") == []  # a run that lost its numbers bills nothing here
    assert [u["model"] for u in await run_store.list_usage(db, run_id="fine")] == ["kept"]


async def test_usage_that_comes_without_events_is_stored_on_its_own_and_read_with_the_rest(db):
    await run_store.store_batch(db, run_id="r", events=events(0), usage=[usage("a")])
    await run_store.store_batch(db, run_id="r", events=[], usage=[usage("b")])
    await run_store.store_batch(db, run_id="r", events=events(1), usage=[usage("c")])
    assert [u["model"] for u in await run_store.list_usage(db, run_id="r")] == ["a", "b", "c"]
    assert await db.run_usage.count_documents({"runId": "r"}) == 1


def big(seq: int, size: int) -> dict:
    return {"seq": seq, "event": "human", "data": {"content": "x" * size}, "origin": None}


async def test_a_page_larger_than_a_document_may_be_is_split(db):
    """4,500 inputs once made a 19 MB page that MongoDB refused, and the events were lost: a batch over the page
    size is stored as several pages, in order, and reads back whole."""
    batch = [big(seq, 3 * 1024 * 1024) for seq in range(7)]  # 21 MB in all
    assert await run_store.append_batches(db, [("r", batch), ("other", events(0))]) == {}
    pages = await db.run_events.find({"runId": "r"}).sort("seq", 1).to_list()
    assert len(pages) > 1 and [(p["seq"], p["last"]) for p in pages][0][0] == 0 and pages[-1]["last"] == 6
    assert [r["seq"] for r in await run_store.all_events(db, run_id="r")] == list(range(7))
    assert await stored_seqs(db, "other") == [0]


async def test_an_event_larger_than_a_page_is_refused_loudly_and_alone(db):
    with pytest.raises(run_store.EventTooLarge) as caught:
        await run_store.append_events(db, run_id="r", events=[big(0, 10), big(1, MAX_EVENT_PAGE_BYTES)])
    assert caught.value.seq == 1 and caught.value.size > MAX_EVENT_PAGE_BYTES
    assert await stored_seqs(db, "r") == []  # none of that batch: the writer stores it again without that event
    refused = await run_store.append_batches(db, [("r", [big(0, MAX_EVENT_PAGE_BYTES)]), ("other", events(0))])
    assert isinstance(refused["r"], run_store.EventTooLarge) and await stored_seqs(db, "other") == [0]


async def test_one_rule_says_which_event_is_too_large_and_every_other_is_stored_whole(db):
    """`oversized_event` (what a run checks before it says it completed) and the pages agree: an event that takes
    nearly a page is stored on a page of its own, even when the batch begins with another large one (each was once
    refused when the first event's size was counted against every other's room), and one a byte over is refused."""
    most = MAX_EVENT_PAGE_BYTES - MAX_EVENT_PAGE_BYTES // run_store.EVENT_PAGE_RESERVE_SHARE
    fits = big(1, most - 200)
    while run_store.event_bytes(fits) < most:  # grow to exactly the most an event may take
        fits = big(1, len(fits["data"]["content"]) + most - run_store.event_bytes(fits))
    batch = [big(0, 5 * 1024 * 1024), fits, big(2, 10)]
    assert run_store.oversized_event("r", batch) is None
    assert await run_store.append_batches(db, [("r", batch)], {"r": [usage("openai:gpt-5")] * 50}) == {}
    assert [r["data"] for r in await run_store.all_events(db, run_id="r")] == [e["data"] for e in batch]
    over = big(3, len(fits["data"]["content"]) + 1)
    assert run_store.oversized_event("r", [over]).seq == 3
    assert isinstance((await run_store.append_batches(db, [("r", [over])]))["r"], run_store.EventTooLarge)
