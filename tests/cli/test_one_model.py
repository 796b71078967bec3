"""One embedded model per PARLEY_HOME: `parley serve` records the model it runs in `run/model.json`, and the other
commands on that home use it rather than start a second llama.cpp server on the same cores.

The scripted model server stands in for the embedded one (it answers the same OpenAI protocol, and `/v1/models`)."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from parley.cli import common
from parley.cli.main import app
from parley.core import embedded
from parley.core.embedded import (
    EmbeddedServerError,
    EmbeddedServices,
    ManagedProcess,
    free_port,
    record_model,
    running_model,
)
from parley.core.settings import get_settings

runner = CliRunner()


def stand_in(home, url: str) -> ManagedProcess:
    """A process recorded as the embedded model: it runs nothing of its own, `url` answers for it."""
    return ManagedProcess("stand-in model", [sys.executable, "-c", "import time; time.sleep(600)"],
                          home / "logs" / "stand-in.log", lambda: True, url=url)


@pytest.fixture
def embedded_model_env(parley_env, monkeypatch):
    """No hosted endpoint: the default model is the embedded one (`local:smollm2`)."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name)
    get_settings.cache_clear()
    return get_settings()


def test_serve_records_the_embedded_model_it_runs_and_forgets_it_when_it_stops(embedded_model_env, llm, monkeypatch):
    home = embedded_model_env.parley_home
    monkeypatch.setattr(embedded, "model_server", lambda home, port: stand_in(home, llm.base_url))
    services = EmbeddedServices.start(embedded_model_env)
    try:
        assert running_model(home) == llm.base_url
    finally:
        services.stop()
    assert running_model(home) is None and not (home / "run" / "model.json").exists()


def test_a_command_uses_the_model_a_serve_runs_on_its_home_and_starts_none(embedded_model_env, llm, monkeypatch):
    def no_second_server(*args, **kwargs):
        raise AssertionError("a second embedded model server was started")

    monkeypatch.setattr(common, "model_server", no_second_server)
    record_model(embedded_model_env.parley_home, stand_in(embedded_model_env.parley_home, llm.base_url))
    llm.script(reply="Bonjour.")
    result = runner.invoke(app, ["model", "chat", "Say hello in French"])
    assert result.exit_code == 0, result.output
    assert f"Using the embedded model at {llm.base_url}" in result.output and "Bonjour." in result.output
    assert llm.requests[-1]["model"] == "smollm2"


def test_a_command_starts_its_own_model_when_the_recorded_one_is_gone(embedded_model_env, monkeypatch):
    started: list[int] = []

    def would_start(home, port):
        started.append(port)
        raise EmbeddedServerError("would start one here")

    monkeypatch.setattr(common, "model_server", would_start)
    home = embedded_model_env.parley_home
    record_model(home, stand_in(home, f"http://127.0.0.1:{free_port()}/v1"))  # nothing answers there
    result = runner.invoke(app, ["model", "chat", "hi"])
    assert result.exit_code == 1 and "would start one here" in result.output and started
