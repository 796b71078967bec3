"""The Studio on a fresh install's one model: the panel shows no warning about families, which the user could act on
only by configuring other models. Parley runs as `parley serve` runs it with no endpoint (the preset is the embedded
model), the scripted server standing in for that model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from parley.api.main import create_app
from parley.core.embedded import EmbeddedServices
from parley.core.settings import get_settings
from tests.studio.test_panel import ARBITRATOR_MARK, ask
from tests.support.servers import ServerThread

ANSWER = "Sixteen legs in all."


@pytest.fixture
def parley(parley_env, monkeypatch, llm) -> Iterator[ServerThread]:
    """Parley with no endpoint configured: its one model, local:smollm2, is the scripted server."""
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.setenv("PARLEY_LOCAL_BASE_URL", llm.base_url)
    get_settings.cache_clear()
    with ServerThread(create_app(get_settings(), services=EmbeddedServices())) as running:
        yield running


def test_a_one_model_install_shows_no_family_warnings(studio, llm):
    llm.script(match=ARBITRATOR_MARK, reply=ANSWER)
    llm.script(model="smollm2", reply="Two spiders, sixteen legs.")
    page = studio.open("/panel")
    form = page.get_by_role("form", name="Ask a panel")
    picker = page.get_by_label("Model", exact=True)
    expect(picker.locator("optgroup[label='Models'] option")).to_have_text(["local:smollm2"])
    summary = page.get_by_label("What router/debate does")
    expect(summary).to_contain_text("local:smollm2")
    expect(form.get_by_role("note")).to_have_count(0)  # the arbitrator is the panel's family: there is no other

    ask(page)
    expect(page.get_by_role("status")).to_have_text("Done.")
    expect(page.locator(".answer-text")).to_have_text(ANSWER)
    decision = page.get_by_role("region", name="Decision: Synthesis")
    expect(decision.get_by_test_id("decided-by")).to_contain_text("local:smollm2")
    expect(page.get_by_role("note")).to_have_count(0)
