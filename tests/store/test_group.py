"""What concurrent requests ask of the database goes together (`store.group`): one command a round for the key
lookups, the workspace reads, the new run records, a workspace's reservations and refunds and the billing rows, each caller answered
as if it had asked alone."""

from __future__ import annotations

import asyncio

import pytest
from pymongo.errors import DuplicateKeyError

from parley.llm.usage import UsageLedger, UsageRecord
from parley.store import keys, runs, usage, workspaces
from parley.store.group import Group


async def test_items_that_come_while_a_round_is_in_flight_go_in_the_next_one(db):
    rounds: list[list[int]] = []
    release = asyncio.Event()

    async def send(_db, items: list[int]) -> list[int]:
        rounds.append(items)
        await release.wait()
        return [item * 10 for item in items]

    group: Group[int, int] = Group("test", send=send)
    first = asyncio.create_task(group(db, 1))
    await asyncio.sleep(0)  # the first round is in flight
    later = [asyncio.create_task(group(db, n)) for n in (2, 3)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(first, *later) == [10, 20, 30]
    assert rounds == [[1], [2, 3]]


async def test_an_error_of_one_item_reaches_its_caller_alone(db):
    async def send(_db, items: list[int]) -> list[object]:
        return [ValueError(f"bad {i}") if i < 0 else i for i in items]

    group: Group[int, int] = Group("test", send=send)
    results = await asyncio.gather(group(db, 1), group(db, -1), group(db, 2), return_exceptions=True)
    assert results[0] == 1 and results[2] == 2
    assert isinstance(results[1], ValueError) and str(results[1]) == "bad -1"


async def test_keys_asked_for_together_are_looked_up_in_one_find(counted):
    db, commands = counted
    made = [await keys.create_key(db, user=f"u{i}", workspace="w", scopes=["chat"]) for i in range(3)]
    commands.sent.clear()
    found = await asyncio.gather(*(keys.find_key(db, plaintext=plain) for _, plain in made),
                                 keys.find_key(db, plaintext=made[0][1]), keys.find_key(db, plaintext="pk_nope"))
    assert [f["user"] if f else None for f in found] == ["u0", "u1", "u2", "u0", None]
    assert commands.sent.count(("find", "api_keys")) == 1


async def test_workspaces_read_together_are_read_in_one_find_and_each_sees_writes_before_it(counted):
    db, commands = counted
    await workspaces.add_credit(db, "a", 1.0)
    await workspaces.add_credit(db, "b", 2.0)
    commands.sent.clear()
    read = await asyncio.gather(*(workspaces.get_workspace(db, w) for w in ("a", "b", "a", "never")))
    assert [w["creditUsd"] for w in read] == [1.0, 2.0, 1.0, 0.0]
    assert read[3] == {"_id": "never", "creditUsd": 0.0, "allowanceTokens": None}
    assert commands.sent.count(("find", "workspaces")) == 1
    read[0]["creditUsd"] = 99.0  # each caller gets a record of its own
    assert read[2]["creditUsd"] == 1.0
    await workspaces.add_credit(db, "a", 1.0)
    assert (await workspaces.get_workspace(db, "a"))["creditUsd"] == 2.0


async def test_a_revoked_key_is_refused_on_its_next_request(db):
    record, plain = await keys.create_key(db, user="u", workspace="w", scopes=["chat"])
    assert await keys.find_key(db, plaintext=plain) is not None
    await keys.revoke_key(db, key_id=record["_id"])
    assert await keys.find_key(db, plaintext=plain) is None


async def test_reservations_that_fit_take_their_sum_in_one_update(counted):
    db, commands = counted
    await workspaces.add_credit(db, "w", 1.0)
    commands.sent.clear()
    taken = await asyncio.gather(*(workspaces.reserve_credit(db, "w", 0.1) for _ in range(5)))
    assert taken == [True] * 5
    assert commands.sent.count(("update", "workspaces")) == 1
    assert (await workspaces.get_workspace(db, "w"))["creditUsd"] == pytest.approx(0.5)


async def test_reservations_past_the_balance_are_served_in_order_as_if_alone(db):
    await workspaces.add_credit(db, "w", 0.25)
    taken = await asyncio.gather(*(workspaces.reserve_credit(db, "w", 0.1) for _ in range(4)))
    assert taken == [True, True, False, False]  # first come, first served; nothing below zero
    assert (await workspaces.get_workspace(db, "w"))["creditUsd"] == pytest.approx(0.05)


async def test_reservations_of_two_workspaces_are_each_their_own(db):
    await workspaces.add_credit(db, "rich", 1.0)
    await workspaces.add_credit(db, "poor", 0.1)
    taken = await asyncio.gather(workspaces.reserve_credit(db, "rich", 0.3), workspaces.reserve_credit(db, "poor", 0.3),
                                 workspaces.reserve_credit(db, "rich", 0.3))
    assert taken == [True, False, True]
    assert (await workspaces.get_workspace(db, "rich"))["creditUsd"] == pytest.approx(0.4)
    assert (await workspaces.get_workspace(db, "poor"))["creditUsd"] == pytest.approx(0.1)


async def test_refunds_of_a_workspace_go_back_in_one_update_and_overruns_are_charged_each(counted):
    db, commands = counted
    await workspaces.add_credit(db, "w", 1.0)
    commands.sent.clear()
    await asyncio.gather(*(workspaces.settle_credit(db, "w", reserved=0.2, actual=0.05) for _ in range(4)),
                         workspaces.settle_credit(db, "w", reserved=0.1, actual=0.3))
    assert (await workspaces.get_workspace(db, "w"))["creditUsd"] == pytest.approx(1.0 + 4 * 0.15 - 0.2)
    assert commands.sent.count(("update", "workspaces")) == 2  # the four refunds, then the overrun


async def test_runs_started_together_are_stored_in_one_insert_and_a_taken_id_fails_alone(counted):
    db, commands = counted
    common = dict(kind="panel", workspace="w", user="u", title="t", input={}, ref=None, worker="me",
                  lease_seconds=5)
    await runs.create_run(db, run_id="taken", **common)
    commands.sent.clear()
    results = await asyncio.gather(*(runs.create_run(db, run_id=r, **common) for r in ("a", "taken", "b")),
                                   return_exceptions=True)
    assert isinstance(results[1], DuplicateKeyError)
    assert [results[0]["_id"], results[2]["_id"]] == ["a", "b"]
    assert commands.sent.count(("insert", "runs")) == 1
    assert {r["_id"] async for r in db.runs.find({})} == {"a", "b", "taken"}


async def test_billing_rows_of_requests_that_end_together_are_stored_in_one_insert(counted):
    db, commands = counted
    commands.sent.clear()

    def ledger(model: str) -> UsageLedger:
        book = UsageLedger()
        book.add(UsageRecord(model=model, input_tokens=3, output_tokens=4, cost=0.01, priced=True))
        return book

    await asyncio.gather(*(usage.record_usage(db, workspace="w", user="u", request_id=f"r{i}", mode="debate",
                                              ledger=ledger(f"m{i}")) for i in range(6)))
    assert commands.sent.count(("insert", "usage")) == 1
    assert sorted([row["model"] async for row in db.usage.find({})]) == [f"m{i}" for i in range(6)]
