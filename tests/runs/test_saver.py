"""The run checkpointer (`runs.checkpoints.RunSaver`) on the embedded database: what it stores and sends, and
LangGraph graphs resumed from it (parallel tasks, nested graphs)."""

from __future__ import annotations

import asyncio
import operator
import uuid
from datetime import UTC, datetime
from typing import Annotated, TypedDict

import bson
import pytest
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import START, StateGraph
from pymongo import MongoClient, monitoring

from parley.runs.checkpoint_docs import _unpack
from parley.runs.checkpoints import COLLECTION, RunSaver, mongodb_saver
from parley.runs.survival import EventBarrier, saved_graphs
from parley.store import INDEXES


class Commands(monitoring.CommandListener):
    """Every command sent to a database named `saver_*` (registered for the session: pymongo has no way to
    unregister a listener)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, dict]] = []  # (database, command name, command)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.database_name.startswith("saver_"):
            self.sent.append((event.database_name, event.command_name, event.command))

    def succeeded(self, event) -> None: ...

    def failed(self, event) -> None: ...

    def of(self, db_name: str, name: str) -> list[dict]:
        return [command for db, n, command in self.sent if db == db_name and n == name]


COMMANDS = Commands()
monitoring.register(COMMANDS)


@pytest.fixture
def db_name(mongo_uri):
    name = "saver_" + uuid.uuid4().hex[:12]
    yield name
    MongoClient(mongo_uri).drop_database(name)


@pytest.fixture
async def saver(mongo_uri, db_name):
    saver = mongodb_saver(mongo_uri, db_name)
    yield saver
    await saver.aclose()


@pytest.fixture
def stored(mongo_uri, db_name):
    client = MongoClient(mongo_uri)
    yield client[db_name][COLLECTION]
    client.close()


def config(thread: str = "run-1", ns: str = "", checkpoint_id: str | None = None) -> dict:
    conf = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint(step: int, values: dict, versions: dict) -> dict:
    return {"v": 4, "id": str(uuid6(clock_seq=step)), "ts": datetime.now(UTC).isoformat(),
            "channel_values": values, "channel_versions": versions, "versions_seen": {"node": dict(versions)},
            "updated_channels": None}


FIRST = {"speaker": "Claire", "text": "the first turn, long enough to be recognised in a command " * 4}
SECOND = {"speaker": "Malik", "text": "a reply"}


async def test_a_checkpoint_round_trips_with_its_writes_and_only_the_latest_is_kept(saver, db_name, stored):
    values = {"topic": "tides", "transcript": [FIRST], "a.b": 1, "$x": {"k": 2}, "%2E": 3}
    versions = {"topic": 1, "transcript": 1, "a.b": 1, "$x": 1, "%2E": 1}
    one = checkpoint(0, values, versions)
    saved_at = await saver.aput(config(), one, {"source": "loop", "step": 0}, versions)
    assert saved_at == config(checkpoint_id=one["id"])
    await saver.aput_writes(saved_at, [("transcript", [SECOND])], "task-a", "path-a")
    await saver.aput_writes(saved_at, [("__error__", "boom")], "task-b", "path-b")

    got = await saver.aget_tuple(config())
    assert got.checkpoint == one and got.metadata["step"] == 0 and got.parent_config is None
    assert got.pending_writes == [("task-a", "transcript", [SECOND]), ("task-b", "__error__", "boom")]

    # The next checkpoint changes the transcript only: the one update that saves it sends the new turn, not
    # the first one again, and keeps the channels it does not name.
    before = len(COMMANDS.of(db_name, "update"))
    two = checkpoint(1, {**values, "transcript": [FIRST, SECOND]}, {**versions, "transcript": 2})
    await saver.aput(saved_at, two, {"source": "loop", "step": 1}, {"transcript": 2})
    updates = COMMANDS.of(db_name, "update")[before:]
    assert len(updates) == 1 and len(updates[0]["updates"]) == 1
    update = updates[0]["updates"][0]["u"]
    assert not any(name.startswith("values.transcript") and name != "values.transcript.v" for name in update["$set"])
    pushed = update["$push"]["values.transcript.parts"]
    assert [saver.serde.loads_typed(tuple(item)) for item in _unpack(pushed)] == [SECOND]

    got = await saver.aget_tuple(config())
    assert got.checkpoint == two
    assert got.parent_config == config(checkpoint_id=one["id"])
    assert got.pending_writes == []  # those against the first checkpoint are no longer needed
    assert await saver.aget_tuple(config(checkpoint_id=one["id"])) is None  # older checkpoints are not kept
    assert (await saver.aget_tuple(config(checkpoint_id=two["id"]))).checkpoint == two
    assert [t.checkpoint["id"] async for t in saver.alist(config())] == [two["id"]]
    assert [t.checkpoint["id"] async for t in saver.alist(config(), filter={"step": 0})] == []

    graphs = await saved_graphs(saver, "run-1", [""])
    assert graphs[""].ids == {one["id"], two["id"]} and graphs[""].latest == two["id"]
    assert stored.count_documents({}) == 1

    before = len(COMMANDS.of(db_name, "delete"))
    await saver.adelete_thread("run-1")
    assert len(COMMANDS.of(db_name, "delete")) == before + 1
    assert stored.count_documents({}) == 0
    assert await saver.aget_tuple(config()) is None


def test_the_sync_interface_stores_and_reads_the_same(mongo_uri, db_name, stored):
    saver = RunSaver(mongo_uri, db_name, expire_after=3600)
    try:
        versions = {"transcript": 1, "topic": 1}
        one = checkpoint(0, {"transcript": [FIRST], "topic": "tides"}, versions)
        at = saver.put(config(), one, {"source": "input", "step": -1}, versions)
        saver.put_writes(at, [("transcript", [SECOND])], "task-a")
        two = checkpoint(1, {"transcript": [FIRST, SECOND], "topic": "tides"}, {**versions, "transcript": 2})
        saver.put_writes(config(checkpoint_id=two["id"]), [("topic", "reefs")], "task-c")  # before its checkpoint
        saver.put(at, two, {"source": "loop", "step": 0}, {"transcript": 2})
        got = saver.get_tuple(config())
        assert got.checkpoint == two and got.pending_writes == [("task-c", "topic", "reefs")]
        assert [t.checkpoint["id"] for t in saver.list(config())] == [two["id"]]
        assert saver.saved("run-1", [""])[""].written == {two["id"]: {"task-c"}}
        expires = stored.find_one({})["expiresAt"].replace(tzinfo=UTC)
        assert 3500 < (expires - datetime.now(UTC)).total_seconds() <= 3600
        saver.delete_thread("run-1")
        assert stored.count_documents({}) == 0
    finally:
        saver.close()


async def test_writes_keep_their_checkpoint_whatever_order_they_come_in(saver):
    versions = {"n": 1}
    one = checkpoint(0, {"n": 1}, versions)
    two = checkpoint(1, {"n": 2}, {"n": 2})
    await saver.aput_writes(config(checkpoint_id=one["id"]), [("n", 5)], "early")  # before any checkpoint
    at = await saver.aput(config(), one, {}, versions)
    assert (await saver.aget_tuple(config())).pending_writes == [("early", "n", 5)]
    await saver.aput_writes(config(checkpoint_id=two["id"]), [("n", 7)], "next")  # its checkpoint is on its way
    await saver.aput_writes(at, [("n", 6)], "late")  # against the first, after the step moved on
    await saver.aput(at, two, {}, {"n": 2})
    assert (await saver.aget_tuple(config())).pending_writes == [("next", "n", 7)]


async def test_a_regular_write_saved_again_keeps_its_first_value_and_a_special_one_its_last(saver):
    at = await saver.aput(config(), checkpoint(0, {"n": 1}, {"n": 1}), {}, {"n": 1})
    await saver.aput_writes(at, [("n", 1), ("m", 2)], "task")
    await saver.aput_writes(at, [("n", 10), ("m", 20)], "task")
    await saver.aput_writes(at, [("__error__", "first")], "task")
    await saver.aput_writes(at, [("__error__", "again")], "task")
    assert (await saver.aget_tuple(config())).pending_writes == [
        ("task", "__error__", "again"), ("task", "n", 1), ("task", "m", 2)]


async def test_a_list_that_did_not_grow_by_appending_and_a_stale_parent_are_saved_whole(saver, mongo_uri, db_name):
    versions = {"log": 1, "k": 1}
    at = await saver.aput(config(), checkpoint(0, {"log": ["a", "b"], "k": 1}, versions), {}, versions)
    two = checkpoint(1, {"log": ["b"], "k": 1}, {"log": 2, "k": 1})
    at2 = await saver.aput(at, two, {}, {"log": 2})
    assert (await saver.aget_tuple(config())).checkpoint == two
    # Another process (nothing remembered) goes on from the stored checkpoint.
    other = mongodb_saver(mongo_uri, db_name)
    try:
        three = checkpoint(2, {"log": ["b", "c"], "k": 1}, {"log": 3, "k": 1})
        await other.aput(at2, three, {}, {"log": 3})
        assert (await other.aget_tuple(config())).checkpoint == three
        # A save from a parent that is not the stored checkpoint replaces every channel.
        fork = checkpoint(3, {"log": ["z"], "k": 9}, {"log": 4, "k": 2})
        await other.aput(at, fork, {}, {"log": 4})
        assert (await other.aget_tuple(config())).checkpoint == fork
    finally:
        await other.aclose()


class Fanned(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


@pytest.mark.parametrize("durability", ["async", "sync"])
async def test_a_graph_resumed_after_a_failure_does_not_run_its_finished_parallel_task_again(saver, durability):
    calls = {"fast": 0, "flaky": 0}

    async def fast(state: Fanned) -> Fanned:
        calls["fast"] += 1
        return {"log": ["fast"]}

    async def flaky(state: Fanned) -> Fanned:
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise RuntimeError("worker died")
        return {"log": ["flaky"]}

    builder = StateGraph(Fanned)
    builder.add_node("fast", fast)
    builder.add_node("flaky", flaky)
    builder.add_edge(START, "fast")
    builder.add_edge(START, "flaky")
    graph = builder.compile(checkpointer=saver)
    with pytest.raises(RuntimeError, match="worker died"):
        await graph.ainvoke({"log": ["asked"]}, config(), durability=durability)
    pending = (await saver.aget_tuple(config())).pending_writes
    assert ("log", ["fast"]) in [(channel, value) for _, channel, value in pending]  # the finished task's result

    state = await graph.ainvoke(None, config(), durability=durability)
    assert calls == {"fast": 1, "flaky": 2}
    assert sorted(state["log"]) == ["asked", "fast", "flaky"]


async def test_a_nested_graph_saves_under_its_own_namespace_and_resumes_inside_it(saver, db_name, stored):
    calls = {"first": 0, "second": 0}

    async def first(state: Fanned) -> Fanned:
        calls["first"] += 1
        return {"log": ["first"]}

    async def second(state: Fanned) -> Fanned:
        calls["second"] += 1
        if calls["second"] == 1:
            raise RuntimeError("worker died")
        return {"log": ["second"]}

    inner = StateGraph(Fanned)
    inner.add_node("first", first)
    inner.add_node("second", second)
    inner.add_edge(START, "first")
    inner.add_edge("first", "second")
    outer = StateGraph(Fanned)
    outer.add_node("debate", inner.compile())
    outer.add_edge(START, "debate")
    graph = outer.compile(checkpointer=saver)

    with pytest.raises(RuntimeError):
        await graph.ainvoke({"log": ["asked"]}, config())
    namespaces = sorted(doc["checkpoint_ns"] for doc in stored.find({"thread_id": "run-1"}))
    assert len(namespaces) == 2 and namespaces[0] == "" and namespaces[1].startswith("debate:")
    graphs = await saved_graphs(saver, "run-1", namespaces)
    assert all(graphs[ns].latest in graphs[ns].ids for ns in namespaces)

    state = await graph.ainvoke(None, config())
    assert calls == {"first": 1, "second": 2}  # the nested graph went on from its own checkpoint
    assert state["log"] == ["asked", "asked", "first", "second"]

    before = len(COMMANDS.of(db_name, "delete"))
    await saver.adelete_thread("run-1")
    assert len(COMMANDS.of(db_name, "delete")) == before + 1 and stored.count_documents({}) == 0


def test_the_checkpoints_have_a_thread_index_and_a_ttl_index():
    declared = [(keys, options) for collection, keys, options in INDEXES if collection == COLLECTION]
    assert ([("thread_id", 1)], {}) in declared
    assert ([("expiresAt", 1)], {"expireAfterSeconds": 0}) in declared


async def test_what_is_saved_together_is_compressed_together(saver, stored):
    previous = [{"agentName": f"agent {i}", "keyPoint": f"point {i} " * 60} for i in range(6)]
    sends = [{"seat": i, "previous": previous} for i in range(6)]  # each repeats the others' positions
    versions = {"tasks": 1}
    at = await saver.aput(config(), checkpoint(0, {"tasks": sends}, versions), {}, versions)
    await saver.aput_writes(at, [("tasks", send) for send in sends], "router")
    doc = stored.find_one({})
    part, written = doc["values"]["tasks"]["parts"][0], doc["writes"][0]["part"]
    serialized = len(bson.encode({"sends": sends}))
    assert "z" in part and len(part["z"]) < serialized / 5
    assert "z" in written and len(written["z"]) < serialized / 5
    got = await saver.aget_tuple(config())
    assert got.checkpoint["channel_values"]["tasks"] == sends
    assert got.pending_writes == [("router", "tasks", send) for send in sends]


async def test_the_same_checkpoint_saved_again_keeps_its_parent_its_writes_and_its_one_id(saver):
    one = checkpoint(0, {"n": 1}, {"n": 1})
    at = await saver.aput(config(), one, {}, {"n": 1})
    two = checkpoint(1, {"n": 2}, {"n": 2})
    at2 = await saver.aput(at, two, {"step": 1}, {"n": 2})
    await saver.aput_writes(at2, [("n", 3)], "task")
    await saver.aput(at2, {**two, "channel_values": {"n": 2}}, {"step": 1, "again": True}, {})  # LangGraph's exit save
    got = await saver.aget_tuple(config())
    assert got.parent_config == at and got.metadata["again"] and got.pending_writes == [("task", "n", 3)]
    assert (await saver.asaved("run-1", [""]))[""].ids == {one["id"], two["id"]}


async def test_a_save_holds_what_the_checkpoint_held_when_saved_even_if_a_list_grows_in_place_meanwhile(saver):
    barrier = saver.barriers["run-1"] = EventBarrier()
    barrier.received_one()  # an event not stored yet: the saves wait for it
    log = ["a", "b"]
    first = asyncio.create_task(saver.aput(config(), checkpoint(0, {"log": log}, {"log": 1}), {}, {"log": 1}))
    await asyncio.sleep(0.05)
    assert not first.done()
    log.append("c")  # a Topic that accumulates extends its list in place
    barrier.stored_upto(1)
    at = await first
    assert (await saver.aget_tuple(config())).checkpoint["channel_values"]["log"] == ["a", "b"]
    log.append("d")
    await saver.aput(at, checkpoint(1, {"log": log}, {"log": 2}), {}, {"log": 2})
    assert (await saver.aget_tuple(config())).checkpoint["channel_values"]["log"] == ["a", "b", "c", "d"]
