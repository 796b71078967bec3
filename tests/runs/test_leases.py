"""Leases and take-overs: a worker keeps the runs it executes however busy its event loop, another worker takes
a run over only once its holder is gone, and an idle worker asks the database next to nothing.

A second engine ("the rival") runs in the test's own event loop beside the Parley server (its own loop, in
a thread), on the same database, with a short lease, so that a lease that is not renewed is taken over
within the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
from prometheus_client import REGISTRY

from parley import store
from parley.api.main import create_app
from parley.core.settings import Settings
from parley.llm.factory import ModelFactory
from parley.runs.checkpoints import mongodb_saver
from parley.runs.held import Holding
from parley.runs.leases import LeaseKeeper
from parley.runs.live import EventWriter
from parley.services.engine import ParleyRunEngine
from parley.store import runs as run_store
from tests.support.duel import script_duel
from tests.support.servers import ServerThread

LEASE, HEARTBEAT = 2.0, 0.25
PANEL = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]


def short_leases(settings: Settings) -> Settings:
    settings.parley_run_lease, settings.parley_run_heartbeat, settings.parley_run_poll = LEASE, HEARTBEAT, 0.1
    return settings


@contextlib.asynccontextmanager
async def engine(settings: Settings, worker: str) -> AsyncIterator[ParleyRunEngine]:
    """A started run engine of its own on the test's database, in the test's event loop."""
    client, db = store.connect(settings.mongodb_uri, settings.mongodb_db)
    saver = mongodb_saver(settings.mongodb_uri, settings.mongodb_db)
    runs = ParleyRunEngine(db, saver=saver, factory=ModelFactory(settings), settings=settings, worker=worker)
    await runs.start()
    try:
        yield runs
    finally:
        await runs.stop()
        saver.close()
        await client.close()


async def run_elsewhere(db, run_id: str = "run_elsewhere") -> None:
    """Store a run that another worker ("elsewhere") executes, under a lease that outlasts the test."""
    await run_store.create_run(db, run_id=run_id, kind="duel", workspace="ws1", user="u", title="t", input={},
                               ref=None, worker="elsewhere", lease_seconds=60)


def runs_commands() -> dict[str, float]:
    """Commands on `runs` counted so far (`store.monitor`), by command."""
    return {command: REGISTRY.get_sample_value("parley_db_operations_total",
                                               {"collection": "runs", "command": command}) or 0.0
            for command in ("find", "update", "findAndModify", "insert")}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


DUEL = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 1}


async def test_a_run_whose_event_loop_is_blocked_keeps_its_lease(parley_env, make_key, llm, sync_db, monkeypatch):
    settings = short_leases(parley_env)
    script_duel(llm)
    key = make_key(["debate"])
    blocked: list[float] = []
    add = EventWriter.add

    def stalling_add(self, emit, origin=None):  # a node that holds the event loop for more than two leases
        if emit.event == "chunk" and not blocked:
            started = time.monotonic()
            time.sleep(2.5 * LEASE)
            blocked.append(time.monotonic() - started)
        add(self, emit, origin)

    monkeypatch.setattr(EventWriter, "add", stalling_add)
    async with engine(settings, "rival") as rival:
        with ServerThread(create_app(settings)) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
                resp = await http.post("/api/debate", json=DUEL, headers=auth(key))
        assert resp.status_code == 200
        assert not rival.held.ids()
    assert blocked and blocked[0] > LEASE
    assert "event: done" in resp.text and "event: retract" not in resp.text
    run = sync_db.runs.find_one({"_id": resp.headers["x-run-id"]})
    assert run["status"] == "completed" and run["claims"] == 1 and run["worker"] != "rival", run


async def test_a_second_engine_never_claims_a_run_whose_holder_keeps_renewing(parley_env, make_key, llm, sync_db):
    settings = short_leases(parley_env)
    script_duel(llm, opponent_turn={"hold": "opponent"})
    key = make_key(["debate"])
    async with engine(settings, "rival") as rival:
        with ServerThread(create_app(settings)) as server:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
                answer = asyncio.create_task(http.post("/api/debate", json=DUEL, headers=auth(key)))
                await asyncio.to_thread(llm.wait_held, "opponent")
                run_id = sync_db.runs.find_one({"kind": "duel"})["_id"]
                held_since = sync_db.runs.find_one({"_id": run_id})["heartbeatAt"]
                # The holder waits on its model call for three leases: its lease is renewed throughout.
                while sync_db.runs.find_one({"_id": run_id})["heartbeatAt"] < held_since + timedelta(seconds=3 * LEASE):
                    await asyncio.sleep(HEARTBEAT)
                    assert rival.held.ids() == []
                llm.release("opponent")
                resp = await answer
        assert not rival.held.ids()
    assert "event: done" in resp.text and "event: retract" not in resp.text
    run = sync_db.runs.find_one({"_id": run_id})
    assert run["status"] == "completed" and run["claims"] == 1 and run["worker"] != "rival", run


async def test_an_idle_engine_asks_the_database_once_a_lease(parley_env):
    settings = parley_env.model_copy(update={"parley_run_lease": 0.5, "parley_run_heartbeat": 0.05,
                                             "parley_run_poll": 0.05})
    before = runs_commands()
    async with engine(settings, "idle"):
        started = time.monotonic()
        await asyncio.sleep(1.0)  # twenty heartbeats, two leases
        elapsed = time.monotonic() - started
        after = runs_commands()
    asked = {command: after[command] - before[command] for command in after}
    # Holding nothing, it renews nothing; with no run anywhere, it looks for one to take over once a lease.
    assert asked["update"] == 0 and asked["findAndModify"] == 0 and asked["insert"] == 0, asked
    assert 1 <= asked["find"] <= elapsed / settings.parley_run_lease + 1, asked


async def test_a_claim_takes_a_run_only_from_a_holder_that_is_gone_and_only_once(db):
    lease = 5.0
    at = run_store.now()
    for run_id in ("gone", "renewed", "short", "released", "mine"):
        await run_store.create_run(db, run_id=run_id, kind="duel", workspace="ws1", user="u", title="t", input={},
                                   ref=None, worker="w0", lease_seconds=lease)
    past = at - timedelta(seconds=2 * lease)
    await db.runs.update_many({}, {"$set": {"leaseUntil": past, "heartbeatAt": past - timedelta(seconds=lease)}})
    # A holder with a lease of one second, which it renewed half a second ago: not gone by a 5 s lease.
    await db.runs.update_one({"_id": "short"}, {"$set": {"heartbeatAt": at - timedelta(seconds=0.5)}})
    await run_store.release(db, run_id="released", worker="w0", lease=1)

    first = await run_store.next_expiring(db, exclude=["mine"])
    assert first is not None and first["_id"] != "mine"
    # Two workers claiming what they read at once: one gets it.
    claims = await asyncio.gather(*(run_store.claim_expired(db, run=first, worker=w, lease_seconds=lease)
                                    for w in ("w1", "w2")))
    won = [c for c in claims if c is not None]
    assert len(won) == 1 and won[0]["claims"] == 2 and won[0]["worker"] in ("w1", "w2")

    read = await db.runs.find_one({"_id": "renewed"}, {"leaseUntil": 1, "heartbeatAt": 1})
    await db.runs.update_one({"_id": "renewed"}, {"$set": {"leaseUntil": run_store.now() + timedelta(seconds=lease),
                                                           "heartbeatAt": run_store.now()}})
    assert await run_store.claim_expired(db, run=read, worker="w1", lease_seconds=lease) is None  # it came back

    short = await db.runs.find_one({"_id": "short"}, {"leaseUntil": 1, "heartbeatAt": 1})
    assert run_store.claimable_at(short, lease) > run_store.now()
    assert await run_store.claim_expired(db, run=short, worker="w1", lease_seconds=lease) is None

    released = await db.runs.find_one({"_id": "released"}, {"leaseUntil": 1, "heartbeatAt": 1})
    assert released["heartbeatAt"] is None
    assert (await run_store.claim_expired(db, run=released, worker="w1", lease_seconds=lease))["worker"] == "w1"

    # The runs a worker executes are never offered to it, however expired their lease.
    everything = ["gone", "renewed", "short", "released"]
    assert (await run_store.next_expiring(db, exclude=everything))["_id"] == "mine"
    assert await run_store.next_expiring(db, exclude=[*everything, "mine"]) is None


async def test_the_lease_thread_extends_only_the_leases_that_end_soon_and_reads_every_run(parley_env, db):
    lease, heartbeat = 10.0, 0.05
    at = run_store.now()
    for run_id in ("young", "old", "cancelled"):
        await run_store.create_run(db, run_id=run_id, kind="duel", workspace="ws1", user="u", title="t", input={},
                                   ref=None, worker="w0", lease_seconds=lease)
    young, cancelled = await db.runs.find_one({"_id": "young"}), await db.runs.find_one({"_id": "cancelled"})
    # "old" began with a lease that ends within three heartbeats; "cancelled" is as young as "young".
    await db.runs.update_one({"_id": "old"}, {"$set": {"leaseUntil": at + timedelta(seconds=0.1)}})
    await db.runs.update_one({"_id": "cancelled"}, {"$set": {"cancelRequested": True}})
    loop = asyncio.get_running_loop()
    tasks = {run_id: loop.create_future() for run_id in ("young", "old", "cancelled")}
    holdings = {"young": Holding(tasks["young"], young["leaseUntil"]),
                "old": Holding(tasks["old"], at + timedelta(seconds=0.1)),
                "cancelled": Holding(tasks["cancelled"], cancelled["leaseUntil"])}
    answers: list[dict] = []
    answered_at: list = []  # when each answer reached the loop

    def renewed(_sent, held) -> None:
        answers.append(held)
        answered_at.append(run_store.now())

    keeper = LeaseKeeper(parley_env.mongodb_uri, parley_env.mongodb_db, worker="w0", lease=lease, heartbeat=heartbeat,
                         held=lambda: holdings, renewed=renewed, failed=lambda exc, _ok_at: answers.append({"failed": exc}))
    keeper.start()
    try:
        while len(answers) < 5:  # five heartbeats
            await asyncio.sleep(heartbeat)
    finally:
        await asyncio.to_thread(keeper.stop)
    assert all(set(held) == {"young", "old", "cancelled"} for held in answers), answers
    assert all(held["cancelled"].cancel and not held["young"].cancel for held in answers), answers
    rows = {row["_id"]: row async for row in db.runs.find({})}
    assert rows["young"]["leaseUntil"] == young["leaseUntil"] and rows["young"]["heartbeatAt"] == young["heartbeatAt"]
    assert rows["cancelled"]["leaseUntil"] == cancelled["leaseUntil"]
    # Extended by the first heartbeat, to a whole lease: not again while most of it is left.
    assert rows["old"]["heartbeatAt"] <= answered_at[0], (rows["old"], answered_at)
    assert rows["old"]["leaseUntil"] == rows["old"]["heartbeatAt"] + timedelta(seconds=lease), rows["old"]


async def test_waiting_for_a_run_that_ends_here_reads_nothing_of_it(parley_env, make_key, llm, sync_db, monkeypatch):
    parley_env.parley_debate_models = list(PANEL)
    parley_env.parley_arbitrator_model = "anthropic:claude-opus-4-5"
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    read: list[str] = []
    for name in ("get_run", "run_status"):
        original = getattr(run_store, name)

        async def reading(*args, _original=original, **kwargs):
            read.append(kwargs["run_id"])
            return await _original(*args, **kwargs)

        monkeypatch.setattr(run_store, name, reading)
    body = {"model": "router/debate", "messages": [{"role": "user", "content": "CAP?"}]}
    with ServerThread(create_app(parley_env)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            resp = await http.post("/v1/chat/completions", json=body, headers=auth(make_key(["chat"])))
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"]
    assert resp.headers["x-run-id"] not in read, read


async def test_a_follower_of_a_run_elsewhere_backs_off_while_nothing_comes(parley_env, monkeypatch):
    settings = parley_env.model_copy(update={"parley_run_lease": 5.0, "parley_run_heartbeat": 0.4,
                                             "parley_run_poll": 0.05})
    polls: list[float] = []
    events_after = run_store.events_after

    async def counted(*args, **kwargs):
        polls.append(time.monotonic())
        return await events_after(*args, **kwargs)

    monkeypatch.setattr(run_store, "events_after", counted)
    async with engine(settings, "follower") as runs:
        await run_elsewhere(runs.db)
        got: list = []

        async def listen() -> None:
            async for batch in runs.follow("run_elsewhere"):
                got.extend(batch)

        listener = asyncio.create_task(listen())
        started = time.monotonic()
        await asyncio.sleep(2.0)
        quiet, elapsed = len(polls), time.monotonic() - started
        await run_store.append_events(runs.db, run_id="run_elsewhere",
                                      events=[{"seq": 0, "event": "message", "data": {}, "origin": None}])
        while not got:
            await asyncio.sleep(0.05)
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
    # 0.05, 0.1, 0.2 s, then every 0.4 s: not every 0.05 s (forty looks in two seconds).
    assert quiet <= 3 + elapsed / 0.4 + 1, quiet
    assert [e.event for e in got] == ["message"]


ONE_ANSWER = {"version": 1, "name": "One answer", "state": {"q": {"type": "string"}, "a": {"type": "string"}},
              "nodes": [{"id": "a", "type": "llm", "inputs": {"prompt": "{q}"}, "output_key": "a"}],
              "edges": [], "entry": "a", "finish": ["a"]}


async def crashed_run(db, run_id: str, *, crashes: int) -> None:
    """A workflow run whose worker stopped while executing it (its lease ran out with a heartbeat on it), after
    `crashes` such stops in a row before."""
    await run_store.create_run(
        db, run_id=run_id, kind="workflow", workspace="ws1", user="u", title="t", ref=None, worker="gone",
        lease_seconds=LEASE, input={"workflow": ONE_ANSWER, "initial": {"q": "Why?"}, "workflowId": None,
                                    "workspaceAgents": None, "bill": {"usage": "workflow", "takes_allowance": True}})
    past = run_store.now() - timedelta(seconds=10 * LEASE)
    await db.runs.update_one({"_id": run_id}, {"$set": {"leaseUntil": past, "heartbeatAt": past, "claims": 1 + crashes,
                                                        "crashes": crashes}})


async def test_a_claim_counts_the_crashes_of_a_run_in_a_row(db):
    """A run taken over from a worker whose lease ran out counts one crash more; one that was handed over (released,
    or parked to wait for a person) starts counting again."""
    await crashed_run(db, "crashed", crashes=1)
    run = await run_store.next_expiring(db, exclude=[])
    assert (await run_store.claim_expired(db, run=run, worker="w1", lease_seconds=LEASE))["crashes"] == 2
    await run_store.release(db, run_id="crashed", worker="w1", lease=2)
    released = await db.runs.find_one({"_id": "crashed"}, {"leaseUntil": 1, "heartbeatAt": 1})
    assert (await run_store.claim_expired(db, run=released, worker="w2", lease_seconds=LEASE))["crashes"] == 0


async def test_a_run_whose_workers_keep_stopping_is_failed_not_resumed_again(parley_env, db, llm):
    """A poison run (its worker stopped while executing it three times in a row) is failed with a clear error by the
    worker that takes it over, without running a step or calling a model; one that crashed fewer times goes on."""
    settings = short_leases(parley_env)
    llm.script(reply="An answer.")
    await crashed_run(db, "poison", crashes=2)
    await crashed_run(db, "unlucky", crashes=1)
    async with engine(settings, "w1") as runs:
        poison = await asyncio.wait_for(runs.wait("poison"), 30)
        unlucky = await asyncio.wait_for(runs.wait("unlucky"), 30)
    assert poison["status"] == "failed" and poison["crashes"] == 3
    assert poison["error"]["code"] == "run_crashed" and "3 times in a row" in poison["error"]["message"]
    assert unlucky["status"] == "completed" and unlucky["crashes"] == 2
    assert [r["messages"][-1]["content"] for r in llm.requests] == ["Why?"]  # the poison run called no model
