"""What a run costs besides the models' time: database operations and bytes, and the CPU of Parley and its database.

Shared by the benches. Parley runs as its own process (`start_parley`), so its CPU can be read from
/proc apart from the bench's clients and the scripted model; the database operations come from its
`/metrics` (`parley_db_operations_total`, `parley_db_bytes_total`, counted by `store.monitor`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class DbCounts:
    """Database commands and their bytes, by (collection, command)."""

    ops: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    sent: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    received: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))

    def __sub__(self, other: DbCounts) -> DbCounts:
        out = DbCounts()
        for name in ("ops", "sent", "received"):
            mine, theirs = getattr(self, name), getattr(other, name)
            for key, value in mine.items():
                if value - theirs.get(key, 0.0):
                    getattr(out, name)[key] = value - theirs.get(key, 0.0)
        return out

    @property
    def total_ops(self) -> float:
        return sum(self.ops.values())

    def table(self, per: int = 1, title: str = "") -> str:
        """One line per (collection, command): operations and KB each way, divided by `per` runs."""
        lines = [f"    {title or 'database'}: {self.total_ops / per:.1f} operations, "
                 f"{sum(self.sent.values()) / per / 1024:.1f} KB sent, "
                 f"{sum(self.received.values()) / per / 1024:.1f} KB received per run",
                 f"    {'collection':<20} {'command':<14} {'ops/run':>8} {'KB sent':>9} {'KB recv':>9}"]
        for key in sorted(self.ops, key=lambda k: (-self.ops[k], k)):
            lines.append(f"    {key[0]:<20} {key[1]:<14} {self.ops[key] / per:8.1f} "
                         f"{self.sent.get(key, 0) / per / 1024:9.2f} {self.received.get(key, 0) / per / 1024:9.2f}")
        return "\n".join(lines)


def parse_db_counts(text: str) -> DbCounts:
    counts = DbCounts()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "parley_db_operations_total":
                counts.ops[(sample.labels["collection"], sample.labels["command"])] += sample.value
            elif sample.name == "parley_db_bytes_total":
                key = (sample.labels["collection"], sample.labels["command"])
                target = counts.sent if sample.labels["direction"] == "sent" else counts.received
                target[key] += sample.value
    return counts


def scrape_db(url: str) -> DbCounts:
    """The database counters of the Parley process at `url`."""
    return parse_db_counts(httpx.get(url.rstrip("/") + "/metrics", timeout=30).text)


@dataclass
class Costs:
    """CPU of Parley and of its database and the database commands between two moments."""

    parley_cpu: float
    db_cpu: float
    db: DbCounts
    wall: float

    def line(self, per: int, what: str = "run") -> str:
        return (f"    CPU per {what}: Parley {self.parley_cpu * 1000 / per:.0f} ms + database "
                f"{self.db_cpu * 1000 / per:.0f} ms; {self.db.total_ops / per:.1f} database operations per {what}")


class Meter:
    """Measure what happens between `start()` and `stop()`: `Costs` of the Parley process at `url` (pid
    `parley_pid`) and of the database process `db_pid` (None when the database is not ours to read)."""

    def __init__(self, url: str, parley_pid: int, db_pid: int | None) -> None:
        self.url, self.parley_pid, self.db_pid = url, parley_pid, db_pid

    def _read(self) -> tuple[float, float, DbCounts, float]:
        return (cpu_seconds(self.parley_pid), cpu_seconds(self.db_pid) if self.db_pid else 0.0,
                scrape_db(self.url), time.perf_counter())

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> Costs:
        # /metrics is read before the CPU, so this scrape's cost is left out; the one in `start()` is counted
        # in Parley's CPU (about a millisecond, spread over the runs measured).
        db = scrape_db(self.url)
        cpu, now = cpu_seconds(self.parley_pid), time.perf_counter()
        db_cpu = cpu_seconds(self.db_pid) if self.db_pid else 0.0
        parley0, db0, counts0, t0 = self._start
        return Costs(cpu - parley0, db_cpu - db0, db - counts0, now - t0)


def start_process(command: list[str], env: dict[str, str], ready: str | None,
                  cwd: Path = ROOT) -> tuple[subprocess.Popen, str]:
    """Start a server; with `ready`, wait for the output line containing it. Its output is drained to stderr."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
    assert proc.stdout is not None
    line = ""
    if ready is not None:
        for line in proc.stdout:
            if ready in line:
                break
        else:
            raise RuntimeError(f"{command[:3]} exited before it was ready")
    threading.Thread(target=lambda: [sys.stderr.write(out) for out in proc.stdout], daemon=True).start()
    return proc, line


def start_parley(env: dict[str, str], port: int) -> subprocess.Popen:
    """`uvicorn api.main:create_app` on 127.0.0.1:`port` with `env` (PARLEY_*, OPENAI_*, MONGODB_*), once it
    answers. BENCH_PARLEY_PYTHON_ARGS adds interpreter options (e.g. "-m cProfile -o parley.prof")."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MONGODB_", "PARLEY_"))}
    proc, _ = start_process(
        [sys.executable, *os.environ.get("BENCH_PARLEY_PYTHON_ARGS", "").split(), "-m", "uvicorn",
         "api.main:create_app", "--factory", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        {**base, "PYTHONPATH": str(ROOT), **env}, None)
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError("Parley exited while starting")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("Parley did not answer in 60 s")


def stop_process(proc: subprocess.Popen) -> None:
    """SIGINT (uvicorn shuts down cleanly, a profiler writes its file), then kill after 30 s."""
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
