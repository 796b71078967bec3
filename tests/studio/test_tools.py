"""The Studio shows the tools a round-table agent called: under its turn while the table debates, and again when the
stored conversation is opened (issue 20). The agent's tool is the test's small MCP server, over stdio."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from api.main import create_app
from core.settings import get_settings
from tests.api.test_agent_tools import STDIO
from tests.support.servers import ServerThread

FORECAST = "Forecast for Lyon: sunny, 21 degrees, light wind."


@pytest.fixture
def parley(parley_env, monkeypatch) -> Iterator[ServerThread]:
    """Parley allowing the test's stdio tool server (the Studio's fixtures open their pages on it)."""
    monkeypatch.setenv("PARLEY_TOOL_COMMANDS", sys.executable)
    get_settings.cache_clear()
    with ServerThread(create_app(get_settings())) as server:
        yield server


def test_a_turn_shows_the_tools_it_called_live_and_once_stored(studio, llm):
    api = studio.api()
    assert api.post("/v1/tools", json=STDIO).status_code == 201
    claire = api.post("/v1/agents", json={"name": "Claire", "role": "Finance"}).json()["agent"]
    api.post("/v1/agents", json={"name": "Marc", "role": "Sales"})
    assert api.put(f"/v1/tools/grants/agent:{claire['id']}", json={"tools": ["weather/get_weather"]}).status_code == 200
    conversation = api.post("/v1/conversations", json={"title": "Lyon office"}).json()["conversation"]
    llm.script(with_tools=True, match=FORECAST, reply="Sunny in Lyon: open the office.")
    llm.script(with_tools=True, tool_calls=[{"name": "get_weather", "arguments": {"city": "Lyon"}}], times=1)

    page = studio.open(f"/roundtable/{conversation['id']}")
    page.get_by_label("Question for the table").fill("Open in Lyon?")
    page.get_by_role("button", name="Ask the table").click()
    turn = page.locator(".rt-round[data-round='0'] .rt-turn").filter(has_text="Claire")
    call = turn.locator(".tool-call[data-tool='get_weather']")
    expect(call).to_contain_text('get_weather({"city": "Lyon"})')
    expect(call).to_contain_text(FORECAST)
    expect(page.get_by_role("button", name="Ask the table")).to_be_visible()  # the debate is over
    marc = page.locator(".rt-round[data-round='0'] .rt-turn").filter(has_text="Marc")
    expect(marc.locator(".tool-call")).to_have_count(0)

    page.reload()
    stored = page.locator(".rt-round[data-round='0'] .rt-turn").filter(has_text="Claire").locator(".tool-call")
    expect(stored).to_have_count(1)
    stored.locator("summary").click()
    expect(stored.locator("pre").last).to_have_text(FORECAST)
