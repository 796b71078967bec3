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


def descendants(pid: int) -> set[int]:
    """`pid` and every process below it, from /proc (a process that has exited is not counted)."""
    children: dict[int, list[int]] = defaultdict(list)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children[ppid].append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        found.add(current := todo.pop())
        todo.extend(children.get(current, ()))
    return found


def total_cpu_seconds(pids: set[int]) -> float:
    """CPU time of these processes together; those that have exited count 0."""
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except OSError:
            pass
    return total


def tree_cpu_seconds(pid: int, *, without: int | None = None) -> float:
    """CPU time of `pid` and every process below it (the workers of `uvicorn --workers`), less `without`'s tree."""
    return total_cpu_seconds(descendants(pid) - (descendants(without) if without else set()))


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values`, nearest rank; NaN for none."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


async def make_keys(uri: str, db_name: str, count: int, *, scopes: list[str], workspace: str = "bench",
                    credit: float = 0.0, user: str = "bench{i}") -> list[str]:
    """Indexes, `credit` USD for `workspace` (none when 0) and `count` keys with `scopes`, one user each
    (`user` formatted with the key's index); the keys' plaintexts."""
    from parley import store
    from parley.store.keys import create_key
    from parley.store.workspaces import add_credit

    client, db = store.connect(uri, db_name)
    try:
        await store.ensure_indexes(db)
        if credit:
            await add_credit(db, workspace, credit)
        return [(await create_key(db, user=user.format(i=i), workspace=workspace, scopes=scopes))[1]
                for i in range(count)]
    finally:
        await client.close()


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
        parley = tree_cpu_seconds(self.parley_pid, without=self.db_pid)  # its workers' too, when it runs several
        return parley, cpu_seconds(self.db_pid) if self.db_pid else 0.0, scrape_db(self.url), time.perf_counter()

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> Costs:
        # /metrics is read before the CPU, so this scrape's cost is left out; the one in `start()` is counted
        # in Parley's CPU (about a millisecond, spread over the runs measured).
        db = scrape_db(self.url)
        cpu, now = tree_cpu_seconds(self.parley_pid, without=self.db_pid), time.perf_counter()
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
         "parley.api.main:create_app", "--factory", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
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


class Serve:
    """`parley serve --workers N` as its own process, on the embedded database it starts itself (in `home`).

    Its output goes to `home/serve.log` (`log_text()`). Once `start()` returns it answers /healthz, and
    `db_url`/`db_pid` name the database it started; `parley_pids()` are its own processes (the workers), not
    the database's. `env` gives PARLEY_*, OPENAI_* (MONGODB_URI stays unset: the embedded database)."""

    def __init__(self, home: Path, env: dict[str, str], workers: int = 1, port: int = 0) -> None:
        from parley.core.embedded import free_port

        self.home, self.workers, self.port = home, workers, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home / "serve.log"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MONGODB_", "PARLEY_"))}
        self.env = {**base, "PYTHONPATH": str(ROOT), "PARLEY_HOME": str(home), **env}
        self.proc: subprocess.Popen | None = None
        self.db_url, self.db_pid = "", 0

    def start(self, timeout: float = 180) -> Serve:
        import json

        self.home.mkdir(parents=True, exist_ok=True)
        with self.log.open("w") as log:  # its own session, so that stop() can end the whole group if it must
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "parley.cli.main", "serve", "--port", str(self.port), "--workers", str(self.workers)],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"parley serve did not come up:\n{self.log_text()[-3000:]}")
            time.sleep(0.2)
        info = json.loads((self.home / "run" / "database.json").read_text())
        self.db_url, self.db_pid = info["uri"], info["pid"]
        return self

    def parley_pids(self) -> set[int]:
        """serve and its workers (and anything else below it), without the database."""
        assert self.proc is not None
        return descendants(self.proc.pid) - descendants(self.db_pid)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        """SIGINT (uvicorn shuts its workers down, serve stops the database); the group is killed after 60 s."""
        import signal

        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
