"""Followers of a run executing on another worker: woken by a change stream where the database has one (a replica
set), polling where it has none (the embedded database, a standalone server: see test_leases.py)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from parley.core.embedded import database_server
from parley.store import runs as run_store
from tests.runs.test_leases import engine, run_elsewhere

# Far longer than the test waits: a follower that only polled would not see the event in time.
SLOW_POLL = 30.0


@pytest.fixture(scope="module")
def replica_set_uri(tmp_path_factory):
    """The embedded server as a one-node replica set (as it runs without `--standalone`), for this module."""
    server = database_server(tmp_path_factory.mktemp("replica-set"))
    server.command.remove("--standalone")
    server.start(timeout=90)
    try:
        yield server.url
    finally:
        server.stop()


async def test_a_follower_elsewhere_is_woken_by_the_change_stream(parley_env, replica_set_uri, monkeypatch):
    settings = parley_env.model_copy(update={"mongodb_uri": replica_set_uri, "parley_run_lease": 3 * SLOW_POLL,
                                             "parley_run_heartbeat": SLOW_POLL, "parley_run_poll": SLOW_POLL})
    reads: list[int] = []
    waiting = asyncio.Event()  # the follower found nothing and looked at the run's status: it waits next
    events_after, run_status = run_store.events_after, run_store.run_status

    async def counted(*args, **kwargs):
        reads.append(kwargs["after"])
        return await events_after(*args, **kwargs)

    async def looked(*args, **kwargs):
        try:
            return await run_status(*args, **kwargs)
        finally:
            waiting.set()

    monkeypatch.setattr(run_store, "events_after", counted)
    monkeypatch.setattr(run_store, "run_status", looked)
    async with engine(settings, "follower") as runs:
        await run_elsewhere(runs.db)
        got: list = []

        async def listen() -> None:
            async with contextlib.aclosing(runs.follow("run_elsewhere")) as batches:
                async for batch in batches:
                    got.extend(batch)
                    return

        listener = asyncio.create_task(listen())
        await asyncio.wait_for(waiting.wait(), 10)
        assert runs.watch.live
        # Stored after the follower's read: only the change stream tells it before its next poll, 30 s on.
        await run_store.append_events(runs.db, run_id="run_elsewhere",
                                      events=[{"seq": 0, "event": "message", "data": {}, "origin": None}])
        await asyncio.wait_for(listener, 10)
        assert [e.event for e in got] == ["message"]
        assert reads == [-1, -1], reads  # the first look, then one read once woken
        assert not runs.watch.live  # closed once no one follows a run from the database


async def test_followers_poll_a_database_without_change_streams(parley_env):
    async with engine(parley_env, "follower") as runs:  # the suite's embedded database: a standalone server
        async with runs.watch.subscription("run_x"):
            assert runs.watch.unsupported and not runs.watch.live
