"""Fixtures of the run engine's tests with real worker processes."""

from __future__ import annotations

import pytest

from tests.support.workers import running_workers


@pytest.fixture
def workers(parley_env, tmp_path):
    """Two `parley serve` workers on the test's database and scripted model server; the first one takes the
    requests."""
    with running_workers(tmp_path) as pair:
        yield pair
