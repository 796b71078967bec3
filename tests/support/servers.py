"""Run Parley (or any ASGI app) on a real loopback port inside the test process."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import uvicorn

from parley.api.main import UVICORN_OPTIONS
from parley.core.embedded import free_port

T = TypeVar("T")


class ServerThread:
    """Serve an ASGI app with uvicorn in a background thread, on 127.0.0.1 and a free port."""

    def __init__(self, app, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    **UVICORN_OPTIONS))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self, timeout: float = 30.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server thread died while starting")
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def run_sync(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine function to completion on a fresh loop in a fresh thread (safe inside async tests)."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(fn())
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
