"""Shared fixtures: the embedded database, the scripted model server and a running Parley.

One embedded MongoDB-protocol server (secantusd-py) runs for the whole session; each test gets its
own database in it. Model calls go to the scripted OpenAI-compatible server on 127.0.0.1; the live tests
(`-m live`) call the real embedded model (`embedded_model`), started once for the session.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pymongo import AsyncMongoClient, MongoClient, monitoring

from parley import store
from parley.api.main import create_app
from parley.store.keys import create_key
from parley.core.embedded import ManagedProcess, database_server, model_server
from parley.core.settings import get_settings
from parley.nodes.context import default_factory
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import ServerThread, run_sync
from tests.support.tracing import RECORDER, SpanRecorder
from tests.support.wheel import build_wheel, install_target

MODEL_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "MONGODB_URI", "MONGODB_DB", "PARLEY_HOME",
             "PARLEY_DEBATE_MODELS", "PARLEY_DEBATE_ALLOW_SAME_FAMILY", "PARLEY_ARBITRATOR_MODEL",
             "PARLEY_LOCAL_BASE_URL")


@pytest.fixture(scope="session")
def mongo_uri(tmp_path_factory) -> Iterator[str]:
    """A MongoDB URI for the session: PARLEY_TEST_MONGODB_URI if set, else a fresh embedded server."""
    if os.environ.get("PARLEY_TEST_MONGODB_URI"):
        yield os.environ["PARLEY_TEST_MONGODB_URI"]
        return
    server = database_server(tmp_path_factory.mktemp("embedded-db")).start(timeout=90)
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def embedded_model(tmp_path_factory) -> Iterator[ManagedProcess]:
    """The real embedded model (SmolLM2-135M on llama.cpp), started as Parley starts it; its `url` is the endpoint."""
    server = model_server(tmp_path_factory.mktemp("live-model")).start(timeout=120)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def greedy_embedded_model(tmp_path_factory) -> Iterator[ManagedProcess]:
    """The real embedded model with llama.cpp's prompt cache off, for checks that need a temperature-0 answer to be
    the same every time: with the cache on, a prompt whose prefix was cached is evaluated in other batches than a
    fresh one, and its greedy answer may differ (docs/performance.md)."""
    server = model_server(tmp_path_factory.mktemp("greedy-model"), prompt_cache_bytes=0).start(timeout=120)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """Parley's wheel, built from this tree (`tests.support.wheel`)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def installed(wheel, tmp_path_factory) -> Path:
    """The folder `pip install --target` makes of the wheel (no dependencies): Parley as site-packages holds it."""
    return install_target(wheel, tmp_path_factory.mktemp("site-packages"))


@pytest.fixture(scope="session")
def scripted_session() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def llm(scripted_session) -> Iterator[ScriptedLLM]:
    """The scripted model server, with no rules and no recorded requests."""
    scripted_session.reset()
    yield scripted_session
    scripted_session.reset()


@pytest.fixture
def parley_env(monkeypatch, tmp_path, mongo_uri, llm):
    """Environment pointing Parley at the scripted model and a fresh database; returns the Settings."""
    for name in MODEL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("MONGODB_URI", mongo_uri)
    monkeypatch.setenv("MONGODB_DB", "t_" + uuid.uuid4().hex[:12])
    monkeypatch.setenv("PARLEY_HOME", str(tmp_path / "home"))
    get_settings.cache_clear()
    default_factory.cache_clear()
    settings = get_settings()
    yield settings
    MongoClient(mongo_uri).drop_database(settings.mongodb_db)
    get_settings.cache_clear()
    default_factory.cache_clear()


@pytest.fixture
async def db(parley_env):
    """An async handle on this test's database (indexes created)."""
    client = AsyncMongoClient(parley_env.mongodb_uri, tz_aware=True)
    database = client[parley_env.mongodb_db]
    await store.ensure_indexes(database)
    yield database
    await client.close()


@pytest.fixture
def sync_db(parley_env):
    """A plain pymongo handle on this test's database, for assertions in sync tests."""
    client = MongoClient(parley_env.mongodb_uri, tz_aware=True)
    yield client[parley_env.mongodb_db]
    client.close()


@pytest.fixture
def parley(parley_env) -> Iterator[ServerThread]:
    """Parley itself, served over real HTTP on 127.0.0.1."""
    with ServerThread(create_app(parley_env)) as server:
        yield server


@pytest.fixture
def http(parley) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=parley.url, timeout=60) as client:
        yield client


@pytest.fixture
def make_key(parley_env):
    """Create an API key in this test's database: `make_key(scopes, user=..., workspace=...)` → plaintext."""

    def make(scopes=("admin",), *, user: str = "alice", workspace: str = "ws1") -> str:
        async def create() -> str:
            client = AsyncMongoClient(parley_env.mongodb_uri)
            try:
                database = client[parley_env.mongodb_db]
                await store.ensure_indexes(database)
                return (await create_key(database, user=user, workspace=workspace, scopes=list(scopes)))[1]
            finally:
                await client.close()

        return run_sync(create)

    return make


@pytest.fixture
def spans() -> Iterator[SpanRecorder]:
    """The runs (spans) LangChain and LangGraph start during the test, as a tracer would receive them."""
    RECORDER.clear()
    RECORDER.recording = True
    yield RECORDER
    RECORDER.recording = False
    RECORDER.clear()


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent.append((event.command_name, event.command.get(event.command_name)))

    def succeeded(self, event) -> None:
        pass

    def failed(self, event) -> None:
        pass


@pytest.fixture
async def counted(parley_env):
    """A database handle (indexes created) whose client notes every command it sends: `(db, commands)`, with
    `commands.sent` the (command, collection) pairs since the fixture was made."""
    commands = Commands()
    client = AsyncMongoClient(parley_env.mongodb_uri, tz_aware=True, event_listeners=[commands])
    database = client[parley_env.mongodb_db]
    await store.ensure_indexes(database)
    commands.sent.clear()
    yield database, commands
    await client.close()
