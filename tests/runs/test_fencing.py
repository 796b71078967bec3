"""Fencing: once another worker took a run over, nothing the execution that held it before writes is accepted, and
that execution stops at once, starting no model call.

The stale execution runs in an engine whose lease renewals are frozen (as a worker is, stopped or cut off from the
database, for longer than a lease): its lease runs out while its model call is held at the scripted server, a second
engine takes the run over and finishes it, and then the held call is let through, and then the renewals.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

from prometheus_client import REGISTRY

from parley import store
from parley.llm.factory import ModelFactory
from parley.llm.usage import UsageRecord
from parley.runs.checkpoints import COLLECTION, mongodb_saver
from parley.runs.engine import Caller
from parley.runs.events import listener_view
from parley.services.engine import ParleyRunEngine
from parley.store import runs as run_store
from parley.store import webhooks as webhook_store
from tests.runs.test_leases import engine, short_leases

THREE_STEPS = {
    "version": 1, "name": "Three steps",
    "state": {"q": {"type": "string"}, "a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}},
    "nodes": [{"id": "a", "type": "llm", "inputs": {"prompt": "{q}"}, "output_key": "a"},
              {"id": "b", "type": "llm", "inputs": {"prompt": "Step B after: {a}"}, "output_key": "b"},
              {"id": "c", "type": "llm", "inputs": {"prompt": "Step C after: {b}"}, "output_key": "c"}],
    "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}], "entry": "a", "finish": ["c"]}


def fenced_writes() -> float:
    return sum(REGISTRY.get_sample_value("parley_run_fenced_writes_total", {"what": what}) or 0.0
               for what in ("events", "usage", "checkpoint"))


async def test_a_worker_whose_run_was_taken_over_writes_nothing_more_and_stops(parley_env, llm, db, monkeypatch):
    settings = short_leases(parley_env)
    settings.parley_run_keep_checkpoints = True  # kept at the run's end, to read whose they are
    llm.script(match="Step B after", reply="The stale answer to B.", hold="stale", times=1)
    llm.script(match="Step B after", reply="Answer to B.")
    llm.script(match="Step C after", reply="Answer to C.")
    llm.script(reply="Answer to A.")
    before = fenced_writes()

    frozen, thawed = threading.Event(), threading.Event()
    renew = run_store.renew_leases

    def renew_unless_frozen(db_, **kwargs):  # the lease thread's call: the stale worker's waits while frozen
        if kwargs["worker"] == "stale" and frozen.is_set():
            thawed.wait(60)
        return renew(db_, **kwargs)

    monkeypatch.setattr(run_store, "renew_leases", renew_unless_frozen)
    client, stale_db = store.connect(settings.mongodb_uri, settings.mongodb_db)
    saver = mongodb_saver(settings.mongodb_uri, settings.mongodb_db)
    stale = ParleyRunEngine(stale_db, saver=saver, factory=ModelFactory(settings), settings=settings, worker="stale")
    await stale.start()
    try:
        record = await stale.submit(
            "workflow", caller=Caller("u", "ws1"), title="t",
            input={"workflow": THREE_STEPS, "initial": {"q": "Why?"}, "workflowId": None, "workspaceAgents": None,
                   "bill": {"usage": "workflow", "takes_allowance": True}})
        run_id = record["_id"]
        await asyncio.to_thread(llm.wait_held, "stale")
        frozen.set()
        async with engine(settings, "taker") as taker:
            done = await asyncio.wait_for(taker.wait(run_id), 30)
            assert done["status"] == "completed" and done["worker"] == "taker" and done["lease"] == 2
            llm.release("stale")  # the stale execution's call ends now: everything it writes next is refused
            for _ in range(200):  # the stale execution stops once a write of its is refused
                if run_id not in stale.held:
                    break
                await asyncio.sleep(0.05)
            assert run_id not in stale.held, "the stale execution went on after its writes were refused"
    finally:
        thawed.set()
        await stale.stop()
        await saver.aclose()
        await client.close()

    asked = Counter(r["messages"][-1]["content"].split(":")[0] for r in llm.requests)
    assert asked == {"Why?": 1, "Step B after": 2, "Step C after": 1}  # the held call repeated, and no more
    assert fenced_writes() > before
    final = await db.runs.find_one({"_id": run_id})
    assert final["status"] == "completed" and final["worker"] == "taker" and final["lease"] == 2
    docs = await db[COLLECTION].find({"thread_id": run_id}).to_list()
    assert docs and {doc["lease"] for doc in docs} == {2}
    # Every event once, none of the stale execution's after the take-over: one start and one end of each step.
    shown = listener_view(await run_store.all_events(db, run_id=run_id), after=-1)
    assert len({e.seq for e in shown}) == len(shown)
    assert "The stale answer to B." not in str([e.data for e in shown])
    # Three calls billed: A (before the take-over), then B and C; the stale B's usage is refused with its events.
    assert len(await run_store.list_usage(db, run_id=run_id)) == 3


async def test_usage_rows_and_webhook_bodies_of_an_older_lease_are_refused(db):
    row = UsageRecord(model="m", input_tokens=1, output_tokens=2, cost=0.0, priced=False)
    await run_store.add_usage(db, run_id="r", records=[row], lease=1)
    await run_store.fence_usage(db, run_id="r", lease=2)
    try:
        await run_store.add_usage(db, run_id="r", records=[row], lease=1)
    except run_store.Fenced:
        pass
    else:
        raise AssertionError("a usage row of an older lease was stored")
    await run_store.add_usage(db, run_id="r", records=[row], lease=2)
    assert len(await run_store.list_usage(db, run_id="r")) == 2

    await db.webhooks.insert_one({"_id": "whk_1", "workspace": "ws1", "active": True, "events": ["run.completed"],
                                  "kinds": None})
    args = {"workspace": "ws1", "event": "run.completed", "kind": "duel", "run_id": "r", "key": "r\nrun.completed",
            "gate": {"status": "completed"}}
    [delivery] = await webhook_store.enqueue(db, body="by lease 2", lease=2, **args)
    await webhook_store.enqueue(db, body="by lease 1", lease=1, **args)  # a stale worker's: refused, not raised
    assert (await db.webhook_deliveries.find_one({"_id": delivery}))["body"] == "by lease 2"
    await webhook_store.enqueue(db, body="by lease 3", lease=3, **args)
    assert (await db.webhook_deliveries.find_one({"_id": delivery}))["body"] == "by lease 3"
