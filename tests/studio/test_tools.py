"""The Studio shows the tools a round-table agent called: under its turn while the table debates, and again when the
stored conversation is opened (issue 20). The agent's tool is the test's small MCP server, over stdio."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from parley.api.main import create_app
from parley.core.settings import get_settings
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


def test_a_panelist_shows_the_tools_it_called_live_and_replayed(studio, llm, sync_db):
    from tests.api.test_agent_tools import OSLO, PANEL
    from tests.studio.test_panel import seat

    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    api = studio.api()
    assert api.post("/v1/tools", json=STDIO).status_code == 201
    router = {"id": "forecasters", "models": PANEL, "debate": True, "arbitrator": "meta:llama-4-maverick"}
    assert api.post("/v1/routers", json=router).status_code == 201
    assert api.put("/v1/tools/grants/router:forecasters", json={"tools": ["weather/get_weather"]}).status_code == 200
    llm.script(model="gpt-5", with_tools=True, match=OSLO, reply="Sunny in Oslo: cycle.")
    llm.script(model="gpt-5", with_tools=True, times=1,
               tool_calls=[{"name": "get_weather", "arguments": {"city": "Oslo"}}])
    llm.script(model="claude-sonnet-4-5", reply="Take a rain jacket anyway.")
    llm.script(model="gemini-2.5-pro", reply="It depends on the weather.")
    llm.script(model="llama-4-maverick", reply="Cycle: the forecast is sunny.")

    question = "Should I cycle to work in Oslo today?"
    page = studio.open("/panel")
    page.get_by_label("Model", exact=True).select_option("router/forecasters")
    page.get_by_label("Question").fill(question)
    page.get_by_role("button", name="Ask the panel").click()
    expect(page.get_by_role("status")).to_have_text("Done.")
    expect(page.locator(".answer-text")).to_have_text("Cycle: the forecast is sunny.")

    def check() -> None:
        call = seat(page, "openai:gpt-5").locator(".tool-call[data-tool='get_weather']")
        expect(call).to_contain_text('get_weather({"city": "Oslo"})')
        expect(call).to_contain_text(OSLO)
        expect(seat(page, "openai:gpt-5")).to_contain_text("Sunny in Oslo: cycle.")
        for other in PANEL[1:]:
            expect(seat(page, other).locator(".tool-call")).to_have_count(0)

    check()
    expect(page.get_by_role("list", name="Tool calls")).to_have_count(1)  # the panelist's; the answer made none
    seat(page, "openai:gpt-5").locator(".tool-call summary").click()
    studio.shot("panel-panelist-tools", full_page=True)
    page.get_by_role("link", name="History").click()
    page.get_by_label("Kind").select_option("panel")
    page.get_by_role("link", name=question).click()
    check()
