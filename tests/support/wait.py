"""Waiting in tests for a state the code under test reaches on its own (a server noticing a hang-up).

Tests synchronise on what they can observe, never on a sleep that hopes the code was quick enough:
`eventually` polls a condition and fails, naming it, only after a generous deadline. `Watch` times a cheap request
in the background, to see that a server kept serving others.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx

DEADLINE_SECONDS = 30.0


def eventually(check: Callable[[], bool], what: str, timeout: float = DEADLINE_SECONDS) -> None:
    """Return once `check()` is true; fail with `what` if it is not within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never happened within {timeout} s: {what}"
        time.sleep(0.02)


class Watch:
    """Times a cheap request (`url`) every 50 ms in the background, while a test does its worst: the longest wait
    (`longest`) says whether the server kept serving others meanwhile; `failures` holds any request that failed or
    was not answered 200, `count` how many were answered."""

    def __init__(self, url: str) -> None:
        self.url, self.longest, self.count = url, 0.0, 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    status = client.get(self.url).status_code
                    if status != 200:
                        self.failures.append(f"HTTP {status}")
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                else:
                    self.count += 1
                self.longest = max(self.longest, time.perf_counter() - started)
                self._stop.wait(0.05)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
