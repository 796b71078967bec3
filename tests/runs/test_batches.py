"""Several runs' event batches and usage rows go to the database in one command (`runs.engine.BatchStore`,
`store.runs.append_batches`), and a run whose event numbers were taken fails alone."""

from __future__ import annotations

import asyncio

import pytest
from pymongo import AsyncMongoClient, monitoring

import store
from llm.usage import UsageRecord
from runs.engine import BatchStore
from store import runs as run_store


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent.append((event.command_name, event.command.get(event.command_name)))

    def succeeded(self, event) -> None:
        pass

    def failed(self, event) -> None:
        pass


@pytest.fixture
async def counted(parley_env):
    commands = Commands()
    client = AsyncMongoClient(parley_env.mongodb_uri, tz_aware=True, event_listeners=[commands])
    database = client[parley_env.mongodb_db]
    await store.ensure_indexes(database)
    commands.sent.clear()
    yield database, commands
    await client.close()


def events(*seqs: int) -> list[dict]:
    return [{"seq": seq, "event": "chunk", "data": {"content": f"#{seq}"}, "origin": None} for seq in seqs]


def usage(model: str) -> UsageRecord:
    return UsageRecord(model=model, input_tokens=3, output_tokens=5, cost=0.0, priced=False)


async def stored_seqs(db, run_id: str) -> list[int]:
    return [row["seq"] for row in await run_store.all_events(db, run_id=run_id)]


async def test_a_conflicting_run_loses_its_own_events_from_the_taken_number_on_and_no_others(db):
    await run_store.append_events(db, run_id="taken", events=events(1))  # another worker stored #1
    conflicted = await run_store.append_batches(db, [("first", events(0, 1, 2)), ("taken", events(0, 1, 2)),
                                                     ("last", events(0, 1))])
    assert conflicted == {"taken"}
    assert await stored_seqs(db, "first") == [0, 1, 2]
    assert await stored_seqs(db, "taken") == [0, 1]  # #0 of this batch, #1 of the other worker; not #2
    assert await stored_seqs(db, "last") == [0, 1]
    assert [r["data"]["content"] for r in await run_store.all_events(db, run_id="taken")] == ["#0", "#1"]


async def test_writes_that_come_together_are_sent_together(counted):
    db, commands = counted
    batches = BatchStore(db)
    await asyncio.gather(*(batches.write(f"run{i}", events(0, 1), [usage(f"m{i}")]) for i in range(10)))
    assert commands.sent.count(("insert", "run_events")) == 1
    assert commands.sent.count(("insert", "run_usage")) == 1
    for i in range(10):
        assert await stored_seqs(db, f"run{i}") == [0, 1]
        assert [u["model"] for u in await run_store.list_usage(db, run_id=f"run{i}")] == [f"m{i}"]


async def test_a_write_that_comes_while_one_is_in_flight_goes_in_the_next_command(counted):
    db, commands = counted
    batches = BatchStore(db)
    first = asyncio.create_task(batches.write("a", events(0), []))
    await asyncio.sleep(0)  # the first is being sent
    await asyncio.gather(first, batches.write("b", events(0), []), batches.write("c", events(0), []))
    assert commands.sent.count(("insert", "run_events")) == 2
    assert [await stored_seqs(db, r) for r in "abc"] == [[0], [0], [0]]


async def test_only_the_run_whose_numbers_were_taken_sees_the_conflict(db):
    await run_store.append_events(db, run_id="taken", events=events(0))
    batches = BatchStore(db)
    results = await asyncio.gather(batches.write("taken", events(0, 1), [usage("lost")]),
                                   batches.write("fine", events(0, 1), [usage("kept")]), return_exceptions=True)
    assert isinstance(results[0], run_store.EventConflict)
    assert results[1] is None
    assert await stored_seqs(db, "taken") == [0]
    assert await run_store.list_usage(db, run_id="taken") == []  # a run that lost its numbers bills nothing here
    assert [u["model"] for u in await run_store.list_usage(db, run_id="fine")] == ["kept"]
