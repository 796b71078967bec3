"""Waiting in tests for a state the code under test reaches on its own (a server noticing a hang-up).

Tests synchronise on what they can observe, never on a sleep that hopes the code was quick enough:
`eventually` polls a condition and fails, naming it, only after a generous deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEADLINE_SECONDS = 30.0


def eventually(check: Callable[[], bool], what: str, timeout: float = DEADLINE_SECONDS) -> None:
    """Return once `check()` is true; fail with `what` if it is not within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never happened within {timeout} s: {what}"
        time.sleep(0.02)
