"""A webhook receiver on 127.0.0.1 for tests: it records every request, verifies it as a receiver must (the
`standardwebhooks` package's `Webhook(secret).verify`), and answers as the test scripts it."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Iterator
from typing import Any

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tests.support.wait import eventually


@dataclass
class Delivery:
    """One request the receiver got: its path, headers (lower-cased names), raw body and when it came."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)

    @property
    def id(self) -> str:
        return self.headers["webhook-id"]

    def json(self) -> Any:
        return json.loads(self.body)

    def verifies(self, secret: str) -> bool:
        """Whether `secret` verifies it, as `standardwebhooks` does (signature, timestamp within five minutes)."""
        try:
            Webhook(secret).verify(self.body, self.headers)
            return True
        except WebhookVerificationError:
            return False


@dataclass
class Answer:
    """How the receiver answers one request: a status, headers and a body, after `hold` is set (if given)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    chunked: bool = False  # the body sent in chunks, without a Content-Length
    hold: threading.Event | None = None


class Receiver:
    """An HTTP server on a free loopback port: `url(path)` is where to subscribe; `answers` are used one per request
    in order (then `default`); `deliveries` holds what came, each recorded as soon as its body is read."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.answers: list[Answer] = []
        self.default = Answer()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 — http.server's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with receiver.lock:
                    receiver.deliveries.append(Delivery(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                        body))
                    answer = receiver.answers.pop(0) if receiver.answers else receiver.default
                if answer.hold is not None:
                    answer.hold.wait(60)
                try:
                    self.send_response(answer.status)
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    if answer.chunked:
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        for start in range(0, len(answer.body), 16384):
                            piece = answer.body[start:start + 16384]
                            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                        self.wfile.write(b"0\r\n\r\n")
                    else:
                        self.send_header("Content-Length", str(len(answer.body)))
                        self.end_headers()
                        self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the sender stopped reading: what the bounded answer tests want

            def handle(self) -> None:
                try:
                    super().handle()
                except ConnectionResetError:
                    pass  # the sender closed its connection (a worker killed, an answer not read to its end)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/hooks") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def got(self, count: int, what: str = "", timeout: float = 30.0) -> list[Delivery]:
        """Wait until `count` deliveries came; all of them."""
        eventually(lambda: len(self.deliveries) >= count, what or f"{count} deliveries reach the receiver", timeout)
        with self.lock:
            return list(self.deliveries)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# A workflow that drafts, waits for a person's review, then publishes: a run that waits, then completes.
REVIEWED = {
    "version": 1, "name": "Draft, review",
    "state": {"topic": {"type": "string", "required": True}, "draft": {"type": "string"},
              "notes": {"type": "array"}, "final": {"type": "string"}},
    "nodes": [
        {"id": "write", "type": "llm", "inputs": {"prompt": "Draft a memo on {topic}."}, "output_key": "draft"},
        {"id": "review", "type": "await", "config": {"on_end": "publish"}, "output_key": "notes"},
        {"id": "publish", "type": "llm", "inputs": {"prompt": "Publish {draft}."}, "output_key": "final"},
    ],
    "edges": [{"from": "write", "to": "review"}, {"from": "review", "to": "publish"}],
    "entry": "write", "finish": ["publish"],
}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A verifying receiver on 127.0.0.1 for the test, stopped after it."""
    with Receiver() as running:
        yield running
