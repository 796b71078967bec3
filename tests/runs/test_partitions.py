"""Scale-out across hosts: three `parley serve` workers, each in a network namespace of its own with its own address
(`tests.support.hosts`), on one database and one scripted model server, lose each other while a run executes.

- a host's worker killed mid-run: the run resumes on another, and a client that reconnects to another host with the
  last id it saw (`Last-Event-ID`) sees every event once;
- a host cut from the database mid-run for longer than a lease, its model call in flight: another worker takes the
  run over; the cut-off worker stops its run within a lease, calls the model no more, ends its listeners' streams
  cleanly, and once the link is back nothing it wrote is stored: the run's record, checkpoints, events and usage
  are each the new holder's, once;
- a host cut from its clients only: its runs finish there, readable from any other host.
- a host's worker frozen (SIGSTOP) with its call in flight until another has finished the run, then thawed: what it
  writes is refused, it calls the model no more, and the stored run is the new holder's.

The test makes namespaces, so it runs as root; anywhere else it fails, saying so.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter

import httpx
import pytest
from pymongo import AsyncMongoClient

from parley.runs.checkpoints import COLLECTION
from parley.runs.events import listener_view
from parley.store.runs import list_usage, page_events
from tests.support.hosts import LEASE, STEP_COUNT, Cluster, cluster, last_id, step_of
from tests.support.servers import run_sync
from tests.support.workers import apply_retracts

STEPS_DONE = [f"s{k}" for k in range(1, STEP_COUNT + 1)]


@pytest.fixture
def hosts(tmp_path):
    """Make three hosts (inside the test, so that a machine where it cannot fails the test, not its setup)."""
    made = []

    def make() -> Cluster:
        context = cluster(tmp_path)
        found = context.__enter__()
        made.append(context)
        return found

    yield make
    for context in made:
        context.__exit__(None, None, None)


def node_ends(events) -> list[str]:
    """The steps whose end `events` (as a client got them, or as stored) announce, in order."""
    return [(e.json() if hasattr(e, "json") else e.data)["node"] for e in events if e.event == "node_end"]


def record(hosts: Cluster, run_id: str) -> dict:
    return hosts.db.runs.find_one({"_id": run_id})


def stored_once(hosts: Cluster, run_id: str) -> None:
    """The run's stored events and usage hold every step once."""
    rows = page_events(hosts.db.run_events.find({"runId": run_id}).sort("seq", 1))
    seqs = [row["seq"] for row in rows]
    assert len(seqs) == len(set(seqs))
    assert node_ends(listener_view(rows, after=-1)) == STEPS_DONE
    usage = run_sync(lambda: _usage(hosts, run_id))
    assert sorted(row["node"] for row in usage) == STEPS_DONE, usage


async def _usage(hosts: Cluster, run_id: str) -> list[dict]:
    client = AsyncMongoClient(hosts.uri, tz_aware=True)
    try:
        return await list_usage(client[hosts.db_name], run_id=run_id)
    finally:
        await client.close()


def seen_once(events) -> None:
    """What a client that applies `retract` keeps holds every step once, in order, and no id twice."""
    kept = apply_retracts(events)
    ids = [e.id for e in kept if e.id]
    assert len(ids) == len(set(ids)), ids
    assert node_ends(kept) == STEPS_DONE, [e.event for e in events]
    assert kept[-1].event == "done"


def test_a_run_resumes_on_another_host_when_its_worker_is_killed(hosts):
    net = hosts()
    net.script_steps()
    first, other = net.workers[0], net.workers[1]
    run_id = net.start_steps(first)
    events: list = []
    following = threading.Thread(target=net.follow_run, args=(first, run_id), kwargs={"into": events})
    following.start()
    net.wait_for_call(first, 2)
    net.wait_step_saved(run_id, 1)  # so that only the call in flight can be asked again
    first.kill()
    following.join(30)
    assert not following.is_alive()
    net.follow_run(other, run_id, after=last_id(events), into=events)

    seen_once(events)
    done = record(net, run_id)
    assert done["status"] == "completed" and not first.named(done["worker"]) and done["lease"] == 2
    stored_once(net, run_id)
    asked = Counter(step for _, _, body in net.llm.calls if (step := step_of(body)))
    assert set(asked) == set(range(1, STEP_COUNT + 1)) and sum(asked.values()) <= STEP_COUNT + 1, asked


def test_a_host_cut_from_the_database_loses_its_run_and_nothing_it_writes_is_stored(hosts):
    net = hosts()
    net.script_steps()
    cut_off = net.workers[0]
    host = net.host_of(cut_off)
    run_id = net.start_steps(cut_off)
    events: list = []
    following = threading.Thread(target=net.follow_run, args=(cut_off, run_id), kwargs={"into": events})
    following.start()
    net.wait_for_call(cut_off, 2)  # its second call is in flight (the model link stays up)
    net.wait_step_saved(run_id, 1)
    cut_at = time.monotonic()
    net.net.cut(host, net.net.db)
    try:
        taker = net.wait_for(lambda: net.worker_named(record(net, run_id)["worker"]) not in (None, cut_off) and
                             net.worker_named(record(net, run_id)["worker"]), "another worker taking the run over")
        following.join(3 * LEASE)  # the cut-off worker's listeners are told, and their streams end
        assert not following.is_alive(), "the cut-off worker's stream did not end"
        time.sleep(max(0.0, cut_at + 2.5 * LEASE - time.monotonic()))  # the link stays down for longer than a lease
    finally:
        net.net.heal(host, net.net.db)
    healed_at = time.monotonic()
    ended = events[-1]
    assert ended.event == "error" and ended.json()["code"] == "storage_unavailable", ended  # a clean end, told why
    net.follow_run(taker, run_id, after=last_id(events), into=events)  # the client goes to another host
    time.sleep(LEASE)  # time for the cut-off worker to write whatever it would once the link is back

    seen_once(events)
    done = record(net, run_id)
    assert done["status"] == "completed" and taker.named(done["worker"]) and done["lease"] == 2
    checkpoints = list(net.db[COLLECTION].find({"thread_id": run_id}, {"lease": 1}))
    assert checkpoints and {doc["lease"] for doc in checkpoints} == {2}
    stored_once(net, run_id)
    # It called the model no more once a lease had passed, and nothing since the link came back.
    assert net.calls(cut_off, after=cut_at + LEASE) == [], net.calls(cut_off, after=cut_at)
    assert net.calls(cut_off, after=healed_at) == []
    asked = Counter(step for _, _, body in net.llm.calls if (step := step_of(body)))
    assert sum(asked.values()) <= STEP_COUNT + 1, asked  # at most the call in flight made twice
    log = cut_off.log.read_text()
    assert f"run {run_id}: lease lost" in log, log[-3000:]
    assert cut_off.proc.poll() is None  # it lives on, and serves again
    with net.net.client(timeout=10) as client:
        seen = client.get(f"{cut_off.url}/v1/runs/{run_id}", headers=net.headers).json()
    assert seen["status"] == "completed" and taker.named(seen["worker"])


def test_a_host_cut_from_its_clients_finishes_its_runs_readable_from_any_other(hosts):
    net = hosts()
    net.script_steps()
    alone, other, third = net.workers
    run_id = net.start_steps(alone)
    net.net.cut(net.host_of(alone), net.net.clients)
    with net.net.client(timeout=1) as client, pytest.raises(httpx.HTTPError):
        client.get(f"{alone.url}/healthz")
    events = net.follow_run(other, run_id)

    seen_once(events)
    done = record(net, run_id)
    assert done["status"] == "completed" and alone.named(done["worker"]) and done["claims"] == 1
    stored_once(net, run_id)
    with net.net.client(timeout=10) as client:
        for worker in (other, third):
            seen = client.get(f"{worker.url}/v1/runs/{run_id}", headers=net.headers).json()
            assert seen["status"] == "completed" and alone.named(seen["worker"])
    net.net.heal(net.host_of(alone), net.net.clients)


def test_a_host_frozen_for_longer_than_a_lease_writes_nothing_once_it_thaws(hosts):
    """A worker stopped (SIGSTOP: a long pause, a suspended VM) while its model call is in flight comes back holding a
    run another worker took over: whatever it goes on to write is refused (or its next lease renewal stops it
    first), it starts no model call, and the stored run is the new holder's."""
    net = hosts()
    net.script_steps()
    frozen = net.workers[0]
    run_id = net.start_steps(frozen)
    net.wait_for_call(frozen, 2)
    net.wait_step_saved(run_id, 1)
    frozen.proc.send_signal(signal.SIGSTOP)
    try:
        taker = net.wait_for(lambda: net.worker_named(record(net, run_id)["worker"]) not in (None, frozen) and
                             net.worker_named(record(net, run_id)["worker"]), "another worker taking the run over")
        net.wait_for(lambda: record(net, run_id)["status"] == "completed", "the run ending on the taker", timeout=60)
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    thawed_at = time.monotonic()
    net.wait_for(lambda: f"run {run_id}: lease lost" in frozen.log.read_text() or
                 "write was refused" in frozen.log.read_text(), "the thawed worker giving the run up")
    time.sleep(LEASE)  # time for it to write whatever it would

    done = record(net, run_id)
    assert done["status"] == "completed" and taker.named(done["worker"]) and done["lease"] == 2
    checkpoints = list(net.db[COLLECTION].find({"thread_id": run_id}, {"lease": 1}))
    assert checkpoints and {doc["lease"] for doc in checkpoints} == {2}
    stored_once(net, run_id)
    assert net.calls(frozen, after=thawed_at) == []
    with net.net.client(timeout=10) as client:
        metrics = client.get(f"{frozen.url}/metrics").text
    refused = sum(float(line.split()[-1]) for line in metrics.splitlines()
                  if line.startswith("parley_run_fenced_writes_total{"))
    print(f"writes refused on the thawed worker: {refused:g}")  # 0 when its lease renewal stopped it first
