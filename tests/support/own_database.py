"""Fixtures for a test module that runs its own embedded database process (to kill it mid-run and start it again on
the same data): `from tests.support.own_database import database, mongo_uri` in that module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from parley.core.embedded import ManagedProcess, database_server


@pytest.fixture
def database(tmp_path) -> Iterator[ManagedProcess]:
    """The embedded database as `parley serve` runs it (it dies with this process), on a port of its own."""
    db = database_server(tmp_path).start(timeout=60)
    yield db
    db.stop()


@pytest.fixture
def mongo_uri(database) -> str:
    """The module's tests store everything in their own database process."""
    return database.url
