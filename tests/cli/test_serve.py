"""`parley serve` as a user runs it: embedded database started, served, and stopped on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from core.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def test_serve_starts_embedded_database_and_stops_it_on_sigterm(tmp_path, llm):
    port = free_port()
    env = {**os.environ, "OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "sk-test", "PARLEY_HOME": str(tmp_path)}
    env.pop("MONGODB_URI", None)
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "parley serve did not come up"
                time.sleep(0.2)
        assert health.status_code == 200 and health.json()["database"] == {"ok": True, "embedded": True}
        db_pid = int(__import__("json").loads((tmp_path / "run" / "database.json").read_text())["pid"])
        assert _alive(db_pid)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
        assert "A first key for this local install" in output and "curl" in output
        deadline = time.monotonic() + 15
        while _alive(db_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(db_pid), "the embedded database outlived parley serve"
        assert not (tmp_path / "run" / "database.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_serve_with_several_workers_shares_one_database(tmp_path, llm, parley_env, make_key):
    port = free_port()
    env = {**os.environ, "PARLEY_HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port), "--workers", "2"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "parley serve --workers 2 did not come up"
            time.sleep(0.2)
        children = [p for p in Path("/proc").iterdir() if p.name.isdigit() and (p / "stat").exists()
                    and (p / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(proc.pid)]
        assert len(children) >= 2  # the two workers under uvicorn's supervisor
        key = make_key(["workflows"])
        workflow = {"version": 1, "name": "One answer", "state": {"q": {"type": "string"}, "a": {"type": "string"}},
                    "nodes": [{"id": "a", "type": "llm", "inputs": {"prompt": "{q}"}, "output_key": "a"}],
                    "edges": [], "entry": "a", "finish": ["a"]}
        answers = [httpx.post(f"http://127.0.0.1:{port}/v1/workflows/runs", headers={"Authorization": f"Bearer {key}"},
                              json={"workflow": workflow, "input": {"q": f"Question {i}"}}, timeout=60)
                   for i in range(4)]
        assert all(a.status_code == 200 and a.json()["status"] == "completed" for a in answers)
        # Whichever worker answers /metrics counts every worker's runs (serve gave them a shared directory).
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert 'parley_runs_total{kind="workflow",status="completed"} 4.0' in metrics, metrics[:2000]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert f"Studio: http://127.0.0.1:{port}/," in out
