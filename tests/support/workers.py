"""Parley workers as real processes (`parley serve`) on one database, for tests that kill one of them."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from pymongo.database import Database

from parley.core.embedded import free_port
from parley.runs.checkpoints import COLLECTION, read_saved
from parley.runs.survival import namespaces, survives
from parley.runs.live import origin_of
from parley.store.runs import page_events
from tests.support.netns import Host
from tests.support.sse import SseEvent, iter_sse

ROOT = Path(__file__).resolve().parents[2]

# Quick failover for tests: a lease of two seconds, renewed twice a second, the database polled ten times.
FAST_FAILOVER = {"PARLEY_RUN_LEASE": "2", "PARLEY_RUN_HEARTBEAT": "0.5", "PARLEY_RUN_POLL": "0.1"}


class Worker:
    """One `parley serve` process, with the environment of the test (database, scripted model) it runs in; on
    `host` (`tests.support.netns`: inside its network namespace, listening on its address) when given."""

    def __init__(self, home: Path, env: dict[str, str] | None = None, host: Host | None = None) -> None:
        self.port = free_port()
        self.address = host.address if host is not None else "127.0.0.1"
        self.url = f"http://{self.address}:{self.port}"
        self.log = home / f"worker-{self.port}.log"
        environment = {**os.environ, **FAST_FAILOVER, "PARLEY_HOME": str(home), **(env or {})}
        command = [sys.executable, "-m", "parley.cli.main", "serve", "--host", self.address, "--port", str(self.port)]
        with self.log.open("w") as log:  # `ip netns exec` execs the command: the process is the worker itself
            self.proc = subprocess.Popen(host.command(command) if host is not None else command,
                                         cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)

    def named(self, worker: str | None) -> bool:
        """Whether `worker`, as run records name a worker (`core.workers.WORKER`: host, pid and a random part), is
        this one."""
        return worker is not None and worker.startswith(f"{socket.gethostname()}:{self.proc.pid}:")

    def wait_ready(self, timeout: float = 90) -> Worker:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"parley serve did not come up:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL: the worker dies at once, in the middle of whatever it was doing."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@contextmanager
def running_workers(home: Path, env: dict[str, str] | None = None, count: int = 2) -> Iterator[list[Worker]]:
    """`count` workers with `env` added to the test's environment, each ready; all stopped on the way out."""
    started = [Worker(home, env) for _ in range(count)]
    try:
        yield [worker.wait_ready() for worker in started]
    finally:
        for worker in started:
            worker.stop()


def follow(url: str, key: str) -> Iterator[SseEvent]:
    """The events of a run's SSE stream as they arrive."""
    with httpx.stream("GET", url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as resp:
        assert resp.status_code == 200, resp.read()
        yield from iter_sse(resp.iter_lines())


def apply_retracts(events: list[SseEvent]) -> list[SseEvent]:
    """What a client that honours `retract` keeps: every event but the retractions and those they list."""
    void = {str(seq) for e in events if e.event == "retract" for seq in e.json()["seqs"]}
    return [e for e in events if e.event != "retract" and e.id not in void]


def duel_messages_once(events: list[SseEvent], user_reply: str, opponent_reply: str, rounds: int = 5) -> list[dict]:
    """The messages of a duel whose run moved to another worker, as a client that applies `retract` sees them,
    checked: every turn once, in order, and each turn's chunks its message."""
    kept = apply_retracts(events)
    messages = [e.json() for e in kept if e.event == "message"]
    assert [(m["role"], m["content"]) for m in messages] == [("user", user_reply), ("opponent", opponent_reply)] * rounds
    assert len({e.id for e in kept if e.event == "message"}) == 2 * rounds  # each message exactly once
    turns, current = [], []
    for event in kept:
        if event.event == "chunk":
            current.append(event.json()["content"])
        elif event.event == "message":
            turns.append("".join(current))
            current = []
    assert turns == [m["content"] for m in messages]  # each turn's chunks make its message
    return messages


def round_of(request: dict) -> int | None:
    """The duel round a turn request is for (`Round N of M.` in its prompt)."""
    found = re.search(r"Round (\d+) of \d+\.", request["messages"][-1]["content"])
    return int(found.group(1)) if found else None


def wait_until_saved(db: Database, run_id: str, ids: Iterable[str], timeout: float = 30) -> None:
    """Wait until the steps that sent the events `ids` have their results saved in the run's checkpoints (so
    those events would stand if the run resumed now). LangGraph saves a step's results just after its events
    are stored, so a test that kills a worker the moment it sees an event would otherwise race that save."""
    seqs = [int(i) for i in ids]
    deadline = time.monotonic() + timeout
    while True:
        rows = page_events(db.run_events.find({"runId": run_id}).sort("seq", 1))
        origins = [origin_of(row) for row in rows if row["seq"] in seqs]
        saved = read_saved(db[COLLECTION], run_id, namespaces(o for o in origins if o is not None))
        if len(origins) == len(seqs) and all(survives(origin, saved) for origin in origins):
            return
        assert time.monotonic() < deadline, f"the steps behind events {seqs} were not saved in {timeout} s"
        time.sleep(0.05)
