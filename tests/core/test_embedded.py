"""Embedded child processes: supervised restarts with backoff, and the parent-death signal.

A small HTTP server (`python -m http.server`) stands in for the embedded servers; `parley serve`'s own
database and model are exercised the same way in tests/cli/test_serve.py.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from pymongo import MongoClient, monitoring

from parley.core.embedded import ManagedProcess, free_port
from tests.cli.test_serve import _alive
from tests.support.wait import eventually

ROOT = Path(__file__).resolve().parents[2]


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def http_server(tmp_path: Path, *, refuse_while: Path | None = None) -> ManagedProcess:
    """A ManagedProcess serving `tmp_path` on a fixed port; while `refuse_while` exists, it exits at once."""
    port = free_port()
    script = "import http.server, os, sys\n"
    if refuse_while is not None:
        script += f"if os.path.exists({str(refuse_while)!r}): sys.exit(3)\n"
    script += (f"http.server.ThreadingHTTPServer(('127.0.0.1', {port}), "
               f"lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory={str(tmp_path)!r})).serve_forever()")
    url = f"http://127.0.0.1:{port}/"
    return ManagedProcess("test server", [sys.executable, "-c", script], tmp_path / "server.log",
                          lambda: answers(url), url=url)


def test_a_supervised_process_comes_back_on_its_port_after_a_kill(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "parley.embedded")
    restarted: list[int] = []
    server = http_server(tmp_path).supervise(timeout=30, on_restart=lambda s: restarted.append(s.process.pid))
    try:
        first = server.process.pid
        os.kill(first, signal.SIGKILL)
        eventually(lambda: restarted != [], "the server was restarted")
        assert restarted[0] != first and server.restarts == 1 and answers(server.url)
        assert f"test server (pid {first}) exited with code -9; restarting it in 0.5 s" in caplog.text
        assert f"test server restarted (pid {restarted[0]})" in caplog.text
    finally:
        server.stop()
    assert server.process.poll() is not None


def test_restarts_back_off_while_the_process_keeps_failing_then_recover(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "parley.embedded")
    refuse = tmp_path / "refuse"
    server = http_server(tmp_path, refuse_while=refuse).supervise(timeout=30)
    try:
        refuse.touch()
        os.kill(server.process.pid, signal.SIGKILL)
        eventually(lambda: "restarting it in 2.0 s" in caplog.text, "three restarts failed")
        assert caplog.text.index("restarting it in 0.5 s") < caplog.text.index("restarting it in 1.0 s") \
            < caplog.text.index("restarting it in 2.0 s")
        assert "exited with code 3 while starting" in caplog.text and server.restarts == 0
        refuse.unlink()
        eventually(lambda: server.restarts == 1 and answers(server.url), "the server recovered")
    finally:
        server.stop()


def test_stop_ends_supervision_and_the_process(tmp_path):
    server = http_server(tmp_path).supervise(timeout=30)
    pid = server.process.pid
    server.stop()
    assert not _alive(pid) and server._supervisor is None and server.restarts == 0


@pytest.mark.parametrize("how", ["start", "supervise"])
def test_a_child_ends_when_its_parent_is_killed(tmp_path, how):
    parent = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from tests.core.test_embedded import http_server
        server = http_server(Path({str(tmp_path)!r})).{how}(timeout=30)
        print(server.process.pid, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        child = int(proc.stdout.readline())
        assert _alive(child)
    finally:
        proc.kill()
        proc.wait()
    eventually(lambda: not _alive(child), "the child ended with its parent", timeout=15)


def test_writes_to_the_embedded_database_are_not_retryable_and_keep_no_oplog(mongo_uri):
    # secantusd-py walks every retryable write it remembers (up to 10,000, for 30 minutes) on each new one: sent as
    # retryable, writes cost ten times more after a few busy minutes; as a replica set it also copies every write
    # into its oplog, a third of the write's cost (core.embedded.EMBEDDED_DB_FLAGS, EMBEDDED_DB_OPTIONS).
    class Writes(monitoring.CommandListener):
        def __init__(self) -> None:
            self.sent: list[dict] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name in ("insert", "update"):
                self.sent.append(dict(event.command))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    writes = Writes()
    client = MongoClient(mongo_uri, event_listeners=[writes])
    try:
        oplog_before = client.local.oplog.rs.count_documents({})
        client.embedded_check.things.insert_one({"n": 1})
        client.embedded_check.things.update_one({"n": 1}, {"$inc": {"n": 1}})
        oplog_after = client.local.oplog.rs.count_documents({})
        hello = client.admin.command("hello")
    finally:
        client.drop_database("embedded_check")
        client.close()
    assert [command.get("txnNumber") for command in writes.sent] == [None, None], writes.sent
    assert "setName" not in hello, hello  # a standalone server, not a one-node replica set
    assert oplog_after == oplog_before, (oplog_before, oplog_after)
