"""`parley serve` as a user runs it: embedded database started, supervised, served, and stopped with it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from parley.core.embedded import database_server, free_port
from tests.support.wait import eventually

ROOT = Path(__file__).resolve().parents[2]
# Variables that would make serve use something other than its embedded servers.
CONFIGURED = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "MONGODB_URI", "MONGODB_DB", "PARLEY_LOCAL_BASE_URL",
              "PARLEY_TRUSTED_PROXIES")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    status = Path(f"/proc/{pid}/status")
    try:
        return "zombie" not in status.read_text()
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(pid):
                found.append(int(entry.name))
        except OSError:
            continue  # it ended while we looked
    return found


class Serve:
    """`python -m cli.main serve` in a subprocess, its output collected as it comes; stopped (killed if need be)
    by `close()`."""

    def __init__(self, home: Path, *, env: dict[str, str], args: tuple[str, ...] = (), port: int = 0) -> None:
        self.home, self.port = home, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "parley.cli.main", "serve", "--port", str(self.port), *args],
                                     cwd=ROOT, env={**env, "PARLEY_HOME": str(home)}, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_healthy(self, timeout: float = 90, key: str | None = None) -> dict:
        """/healthz once it answers 200, read with `key` (by default the first key serve printed, if it printed one):
        without a key it is the status alone."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                health = httpx.get(self.url + "/healthz", timeout=2)
                if health.status_code == 200:
                    key = key or (self.first_key() if "A first key for this local install" in self.output else None)
                    if key is None:
                        return health.json()
                    return httpx.get(self.url + "/healthz", headers={"Authorization": f"Bearer {key}"},
                                     timeout=10).json()
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None, f"parley serve exited:\n{self.output}"
            assert time.monotonic() < deadline, f"parley serve did not come up:\n{self.output}"
            time.sleep(0.2)

    def first_key(self) -> str:
        """The all-scopes key serve prints on an empty embedded database."""
        lines = self.output.splitlines()
        at = next(i for i, line in enumerate(lines) if "A first key for this local install" in line)
        return lines[at + 1].strip()

    def database_pid(self) -> int:
        return int(json.loads((self.home / "run" / "database.json").read_text())["pid"])

    def close(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(10)
        return self.output


def scripted_env(llm) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CONFIGURED}
    return {**env, "OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "sk-test"}


def test_serve_starts_embedded_database_and_stops_it_on_sigterm(tmp_path, llm):
    serve = Serve(tmp_path, env=scripted_env(llm))
    try:
        health = serve.wait_healthy(60)
        assert health["database"] == {"ok": True, "embedded": True}
        db_pid = serve.database_pid()
        assert _alive(db_pid)
        # A duel's stream token is a credential: the access log shows where it was, never what it was.
        httpx.get(serve.url + "/api/debate/debate_1/events?lastEventId=3&token=SECRET-TOKEN-1234")
        eventually(lambda: "token=[redacted]" in serve.output, "the request is in the access log")
    finally:
        output = serve.close()
    assert "SECRET-TOKEN-1234" not in output
    assert serve.proc.returncode is not None
    assert "A first key for this local install" in output and "curl" in output
    eventually(lambda: not _alive(db_pid), "the embedded database stopped with parley serve", timeout=15)
    assert not (tmp_path / "run" / "database.json").exists()


def test_serve_restarts_its_embedded_database_after_a_kill(tmp_path, llm):
    serve = Serve(tmp_path, env=scripted_env(llm))
    try:
        serve.wait_healthy(60)
        auth = {"Authorization": f"Bearer {serve.first_key()}"}
        assert httpx.get(serve.url + "/api/debates", headers=auth).status_code == 200
        first = serve.database_pid()
        os.kill(first, signal.SIGKILL)
        killed = time.monotonic()
        eventually(lambda: not _alive(first), "the killed database is gone", timeout=10)

        def served() -> bool:
            try:
                return httpx.get(serve.url + "/api/debates", headers=auth, timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        # Served again, by a new process on the same data (the key is the one stored before the kill).
        eventually(served, "the API answers again after the database was killed", timeout=20)
        assert time.monotonic() - killed < 15
        eventually(lambda: serve.database_pid() != first, "the pid file names the new database", timeout=10)
        second = serve.database_pid()
        assert _alive(second)
        assert serve.wait_healthy(10)["database"]["ok"] is True
        eventually(lambda: "embedded database restarted" in serve.output, "the restart is logged", timeout=10)
        assert "exited with code -9; restarting it in" in serve.output
    finally:
        serve.close()
    eventually(lambda: not _alive(second), "the restarted database stopped with parley serve", timeout=15)


def test_killing_serve_hard_takes_its_embedded_servers_with_it(tmp_path):
    """SIGKILL leaves serve no chance to stop its children: the kernel's parent-death signal does."""
    env = {k: v for k, v in os.environ.items() if k not in CONFIGURED}  # embedded model and database
    serve = Serve(tmp_path, env=env)
    try:
        health = serve.wait_healthy(180)
        assert health["database"]["embedded"] is True and health["model"]["model"] == "local:smollm2"
        children = _children(serve.proc.pid)
        commands = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode() for pid in children}
        assert serve.database_pid() in children
        assert any("parley.core.llama_server" in command for command in commands.values()), commands
        serve.proc.kill()
        serve.proc.wait()
        for pid in children:
            eventually(lambda: not _alive(pid), f"child {commands[pid][:80]} ended after its parent", timeout=30)
    finally:
        serve.close()
    # Nothing holds the data directory any more: a new database opens it.
    database_server(tmp_path).start(timeout=60).stop()


def test_serve_ignores_forwarded_for_unless_a_proxy_is_configured(tmp_path, llm):
    serve = Serve(tmp_path, env=scripted_env(llm))
    try:
        serve.wait_healthy(60)
        auth = {"Authorization": f"Bearer {serve.first_key()}"}
        answers = [httpx.post(serve.url + "/api/debate", json={}, headers={**auth, "X-Forwarded-For": f"203.0.113.{i}"})
                   .status_code for i in range(10)]
        assert answers == [400] * 8 + [429] * 2
    finally:
        serve.close()


def test_serve_with_several_workers_shares_one_database(tmp_path, llm, parley_env, make_key):
    serve = Serve(tmp_path, env={**os.environ}, args=("--workers", "2"))
    try:
        serve.wait_healthy(90)
        assert len(_children(serve.proc.pid)) >= 2  # the two workers under uvicorn's supervisor
        key = make_key(["workflows"])
        workflow = {"version": 1, "name": "One answer", "state": {"q": {"type": "string"}, "a": {"type": "string"}},
                    "nodes": [{"id": "a", "type": "llm", "inputs": {"prompt": "{q}"}, "output_key": "a"}],
                    "edges": [], "entry": "a", "finish": ["a"]}
        answers = [httpx.post(serve.url + "/v1/workflows/runs", headers={"Authorization": f"Bearer {key}"},
                              json={"workflow": workflow, "input": {"q": f"Question {i}"}}, timeout=60)
                   for i in range(4)]
        assert all(a.status_code == 200 and a.json()["status"] == "completed" for a in answers)
        # Whichever worker answers /metrics counts every worker's runs (serve gave them a shared directory).
        metrics = httpx.get(serve.url + "/metrics").text
        assert 'parley_runs_total{kind="workflow",status="completed"} 4.0' in metrics, metrics[:2000]
    finally:
        output = serve.close()
    assert f"Studio: {serve.url}/," in output


def test_killing_serve_hard_takes_its_workers_with_it(tmp_path, llm, parley_env):
    serve = Serve(tmp_path, env={**os.environ}, args=("--workers", "2"))  # on the tests' database, which lives on
    try:
        serve.wait_healthy(90)
        children = _children(serve.proc.pid)  # the workers and multiprocessing's resource tracker
        assert len([pid for pid in children if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]) == 2
        serve.proc.kill()
        serve.proc.wait()
        for pid in children:
            eventually(lambda: not _alive(pid), f"child {pid} ended after its parent", timeout=30)
    finally:
        serve.close()
    # The port is free again: a new serve can listen on it.
    serve = Serve(tmp_path, env={**os.environ}, port=serve.port)
    try:
        serve.wait_healthy(60)
    finally:
        serve.close()


def test_workers_that_start_slowly_on_a_busy_machine_are_not_killed(tmp_path, llm, parley_env):
    """On a loaded machine a worker may take longer than uvicorn's default 5 s to import and start: with every core
    busy and each worker's start slowed by 8 s (a `sitecustomize` on its path, so the test does not rest on how busy
    the machine happens to be), `parley serve --workers 2` starts both workers once each and serves, where uvicorn's
    default replaced them forever."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import os, time\nif os.environ.get('PARLEY_SERVE_PID'):\n    time.sleep(8)\n")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    serve = Serve(tmp_path / "home", env={**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(ROOT)])},
                  args=("--workers", "2"))
    try:
        serve.wait_healthy(180)
        workers = [pid for pid in _children(serve.proc.pid) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(workers) == 2
        for _ in range(20):  # both keep serving while the machine stays busy
            assert httpx.get(serve.url + "/healthz", timeout=10).status_code == 200
        served = serve.output  # before shutting down, which terminates the workers
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
        serve.close()
    assert "died" not in served and "Terminated child process" not in served, served
    assert served.count("Started server process") == 2, served


def test_a_second_serve_takes_the_database_over_when_the_first_dies(tmp_path, llm):
    """A second `parley serve` on the same PARLEY_HOME shares the first's embedded database; when the first dies (and
    its database with it), the second starts the database itself, on the same data and port, and serves again,
    where it once answered 503 forever."""
    env = scripted_env(llm)
    first = Serve(tmp_path, env=env)
    second = None
    try:
        first.wait_healthy(60)
        key = first.first_key()
        second = Serve(tmp_path, env=env)
        second.wait_healthy(60)
        assert "Using the embedded database another Parley process runs at" in second.output
        database = first.database_pid()
        first.proc.kill()
        first.proc.wait()
        eventually(lambda: not _alive(database), "the first serve's database died with it", timeout=15)

        def served() -> bool:
            try:
                return httpx.get(second.url + "/api/debates", headers={"Authorization": f"Bearer {key}"},
                                 timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        eventually(served, "the second serve answers again, the key stored before still known", timeout=60)
        assert second.wait_healthy(10, key)["database"]["ok"] is True
        # The database answers a moment before the second serve records it as its own (and logs so): wait for both.
        eventually(lambda: second.database_pid() != database and _alive(second.database_pid()),
                   "the second serve records the database it started", timeout=15)
        eventually(lambda: "the embedded database runs here now" in second.output, "the take-over is logged",
                   timeout=15)
    finally:
        first.close()
        if second is not None:
            second.close()


def test_a_fresh_install_on_a_priced_model_answers_a_panel_debate_at_once(tmp_path, llm):
    """The README's `OPENAI_API_KEY=sk-... make run`, its endpoint the scripted server: the `router/debate` preset is
    three priced hosted models, and the first key's workspace comes with the starting credit, so the first panel
    debate is answered (it was 402, the workspace at $0) and paid from that credit."""
    serve = Serve(tmp_path, env=scripted_env(llm))
    try:
        serve.wait_healthy(60)
        answer = httpx.post(serve.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {serve.first_key()}"},
                            json={"model": "router/debate",
                                  "messages": [{"role": "user", "content": "Monolith or microservices?"}]}, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"]
        models = {request["model"] for request in llm.requests}
        assert {"gpt-4o-mini", "claude-sonnet-4-5", "gemini-2.5-flash"} <= models  # priced, as the README's are
        shown = subprocess.run([sys.executable, "-m", "parley.cli.main", "workspaces", "show", "default"], cwd=ROOT,
                               env={**scripted_env(llm), "PARLEY_HOME": str(tmp_path), "COLUMNS": "200"},
                               capture_output=True, text=True, timeout=60)
        credit = re.search(r"\b(\d+\.\d{6})\b", shown.stdout)  # the credit column, to the micro-dollar
        assert credit and 0 < float(credit[1]) < 5, shown.stdout + shown.stderr  # the debate was paid from it
        assert "workspace default, all scopes; $5.00 of credit for priced models" in serve.output
    finally:
        serve.close()
