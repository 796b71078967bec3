"""Fixtures of the run engine's tests with real worker processes."""

from __future__ import annotations

import pytest

from tests.support.workers import Worker


@pytest.fixture
def workers(parley_env, tmp_path):
    """Two `parley serve` workers on the test's database and scripted model server; the first one takes the
    requests."""
    pair = [Worker(tmp_path), Worker(tmp_path)]
    try:
        yield [worker.wait_ready() for worker in pair]
    finally:
        for worker in pair:
            worker.stop()
