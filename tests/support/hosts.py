"""Parley workers as hosts that can lose each other: each `parley serve` in a network namespace of its own
(`tests.support.netns`), all on one embedded database and one scripted model server that listen on the bridge's
addresses; for the partition tests (tests/runs/test_partitions.py) and their bench (bench/partitions.py).

A run of `STEPS` (a workflow of five model calls, each streamed slowly enough that one is always in flight) is what
they execute: `start_steps` starts one on a host and hangs up, `follow_run` follows one from a host (from the
clients' address), resuming after the last id seen (`Last-Event-ID`).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pymongo import AsyncMongoClient, MongoClient
from pymongo.database import Database

from parley import store
from parley.core.embedded import database_server
from parley.store.keys import create_key
from parley.store.runs import page_events
from tests.support.netns import Network
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import run_sync
from tests.support.sse import SseEvent, iter_sse
from tests.support.workers import FAST_FAILOVER, Worker, wait_until_saved

STEP_COUNT = 5
STEPS = {
    "version": 1, "name": "Five steps",
    "state": {"q": {"type": "string"}, **{f"s{k}": {"type": "string"} for k in range(1, STEP_COUNT + 1)}},
    "nodes": [{"id": f"s{k}", "type": "llm", "output_key": f"s{k}",
               "inputs": {"prompt": f"Step {k} of {STEP_COUNT}. Go on from: " + ("{q}" if k == 1 else f"{{s{k - 1}}}")}}
              for k in range(1, STEP_COUNT + 1)],
    "edges": [{"from": f"s{k}", "to": f"s{k + 1}"} for k in range(1, STEP_COUNT)],
    "entry": "s1", "finish": [f"s{STEP_COUNT}"],
}
# Ten words a step, a word every 0.15 s: a call takes about a second and a half, so one is in flight at any moment.
STEP_REPLY = "one two three four five six seven eight nine ten"
STEP_TOKEN_DELAY = 0.15
LEASE = float(FAST_FAILOVER["PARLEY_RUN_LEASE"])


def step_of(body: dict) -> int | None:
    """The step a model request is for (`Step K of N.` in its prompt)."""
    text = body["messages"][-1]["content"]
    for k in range(1, STEP_COUNT + 1):
        if f"Step {k} of {STEP_COUNT}." in text:
            return k
    return None


@dataclass
class Cluster:
    """The hosts' network, model server, database and workers (one per host, in order), and an admin key."""

    net: Network
    llm: ScriptedLLM
    uri: str
    db_name: str
    workers: list[Worker]
    key: str
    _client: MongoClient | None = field(default=None, repr=False)

    @property
    def db(self) -> Database:
        """The database, for assertions (from this machine: never cut)."""
        if self._client is None:
            self._client = MongoClient(self.uri, tz_aware=True)
        return self._client[self.db_name]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def worker_named(self, name: str | None) -> Worker | None:
        return next((w for w in self.workers if w.named(name)), None)

    def host_of(self, worker: Worker):
        return self.net.hosts[self.workers.index(worker)]

    def script_steps(self) -> None:
        self.llm.script(reply=STEP_REPLY, token_delay=STEP_TOKEN_DELAY)

    def start_steps(self, worker: Worker) -> str:
        """Start a run of `STEPS` on `worker` and hang up at once (the run goes on); return its id."""
        with self.net.client(timeout=30) as client, client.stream(
                "POST", f"{worker.url}/v1/workflows/runs/stream", headers=self.headers,
                json={"workflow": STEPS, "input": {"q": "Where do we start?"}}) as started:
            assert started.status_code == 200, started.read()
            return started.headers["x-run-id"]

    def calls(self, worker: Worker, *, after: float = 0.0) -> list[int | None]:
        """The steps `worker`'s host asked of the model after `after` (`time.monotonic()`), in order."""
        address = self.host_of(worker).address
        return [step_of(body) for at, peer, body in self.llm.calls if peer == address and at > after]

    def wait_for_call(self, worker: Worker, step: int, timeout: float = 30) -> float:
        """Wait until `worker`'s host asked the model for `step`; return when it did (monotonic)."""
        address = self.host_of(worker).address
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, peer, body in self.llm.calls:
                if peer == address and step_of(body) == step:
                    return at
            time.sleep(0.02)
        raise AssertionError(f"{worker.url} did not ask for step {step} in {timeout} s")

    def wait_step_saved(self, run_id: str, step: int, timeout: float = 30) -> None:
        """Wait until step `step`'s results are saved in the run's checkpoints (a run resumed after that does not run
        it again: LangGraph saves a step just after its events are stored, and a kill or cut may land between)."""
        def stored() -> list[int]:
            rows = page_events(self.db.run_events.find({"runId": run_id}).sort("seq", 1))
            return [row["seq"] for row in rows if row["event"] == "node_end" and row["data"].get("node") == f"s{step}"]

        seqs = self.wait_for(stored, f"step {step}'s end stored", timeout)
        wait_until_saved(self.db, run_id, [str(seq) for seq in seqs], timeout)

    def wait_for(self, check: Callable[[], object], what: str, timeout: float = 30) -> object:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if found := check():
                return found
            time.sleep(0.05)
        raise AssertionError(f"{what}: not within {timeout} s")

    def follow_run(self, worker: Worker, run_id: str, *, after: str | None = None, timeout: float = 60,
                   into: list[SseEvent] | None = None, times: list[float] | None = None) -> list[SseEvent]:
        """The run's events from `worker` (after id `after`, sent as `Last-Event-ID`) until its stream ends, appended
        to `into` as they come (and when each came, `time.monotonic()`, to `times`); a stream broken by its host's
        death ends the list."""
        events = into if into is not None else []
        headers = {**self.headers, **({"Last-Event-ID": after} if after is not None else {})}
        try:
            with self.net.client(timeout=timeout) as client, client.stream(
                    "GET", f"{worker.url}/v1/runs/{run_id}/events", headers=headers) as resp:
                assert resp.status_code == 200, resp.read()
                for event in iter_sse(resp.iter_lines()):
                    events.append(event)
                    if times is not None:
                        times.append(time.monotonic())
        except httpx.HTTPError:  # the host died, or is cut off: the stream is broken
            pass
        return events

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def last_id(events: list[SseEvent]) -> str | None:
    ids = [e.id for e in events if e.id]
    return ids[-1] if ids else None


@contextmanager
def cluster(home: Path, count: int = 3, env: dict[str, str] | None = None) -> Iterator[Cluster]:
    """`count` hosts, each with a `parley serve` worker (fast failover, `FAST_FAILOVER`; checkpoints kept at a run's
    end, to be read), on one database and one scripted model server; everything removed on the way out."""
    with ExitStack() as stack:
        net = stack.enter_context(Network(count))
        llm = stack.enter_context(ScriptedLLM(host=net.model))
        server = database_server(home / "db", host=net.db).start(timeout=90)
        stack.callback(server.stop)
        db_name = "hosts_" + uuid.uuid4().hex[:10]
        environment = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "sk-test", "MONGODB_URI": server.url,
                       "MONGODB_DB": db_name, "PARLEY_RUN_KEEP_CHECKPOINTS": "true", **(env or {})}
        for name in ("OPENAI_MODEL", "PARLEY_DEBATE_MODELS", "PARLEY_ARBITRATOR_MODEL"):
            if os.environ.get(name):
                environment[name] = ""
        workers: list[Worker] = []
        for host in net.hosts:
            worker = Worker(home, environment, host=host)
            workers.append(worker)
            stack.callback(worker.stop)
        for worker in workers:
            worker.wait_ready()

        async def make_key() -> str:
            client: AsyncMongoClient = AsyncMongoClient(server.url)
            try:
                database = client[db_name]
                await store.ensure_indexes(database)
                return (await create_key(database, user="alice", workspace="ws1", scopes=["admin"]))[1]
            finally:
                await client.close()

        found = Cluster(net, llm, server.url, db_name, workers, run_sync(make_key))
        stack.callback(found.close)
        yield found
