"""History in the browser: every mode's runs listed newest first, each replayed from its stored events."""

from __future__ import annotations

from playwright.sync_api import expect

from parley.designer import load_example
from tests.studio.test_roundtable import script_disagreement
from tests.support.duel import OPPONENT_REPLY, USER_REPLY, script_duel


def make_one_run_of_each_kind(studio, llm, sync_db) -> None:
    """A duel, a panel, a round-table question and a workflow run, made through the API."""
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    script_duel(llm)
    script_disagreement(llm)
    with studio.api() as api:
        with api.stream("POST", "/api/debate", json={"topic": "Remote work?", "rounds": 1,
                                                      "userProfile": {"name": "Ada"}}) as resp:
            assert resp.status_code == 200 and "event: done" in "".join(resp.iter_text())
        panel = api.post("/v1/chat/completions", json={"model": "router/debate",
                                                       "messages": [{"role": "user", "content": "Explain CAP"}]})
        assert panel.status_code == 200, panel.text
        for name in ("Claire", "Marc"):
            assert api.post("/v1/agents", json={"name": name, "role": "Finance"}).status_code == 201
        conversation = api.post("/v1/conversations", json={"title": "Lyon office"}).json()["conversation"]
        asked = api.post(f"/v1/conversations/{conversation['id']}/message", json={"content": "Open in Lyon?"})
        assert asked.status_code == 200, asked.text
        run = api.post("/v1/workflows/runs", json={"workflow": load_example("outline-brief")})
        assert run.status_code == 200, run.text


def test_every_kind_is_listed_and_replays_in_its_viewer(studio, llm, sync_db):
    make_one_run_of_each_kind(studio, llm, sync_db)
    page = studio.open("/history")
    rows = page.get_by_role("table").get_by_role("row")
    expect(rows).to_have_count(5)  # the header and four runs, newest first
    assert [rows.nth(i).get_attribute("data-kind") for i in range(1, 5)] == ["workflow", "roundtable", "panel", "duel"]
    expect(page.get_by_role("row").filter(has_text="Open in Lyon?")).to_contain_text("completed")
    studio.shot("history")

    page.get_by_label("Kind").select_option("duel")
    expect(rows).to_have_count(2)
    page.get_by_role("link", name="Remote work?").click()
    expect(page.get_by_test_id("winner")).to_have_text("Ada")
    expect(page.locator(".turn-text")).to_have_text([USER_REPLY, OPPONENT_REPLY])
    studio.shot("history-duel", full_page=True)

    page.go_back()
    page.get_by_label("Kind").select_option("roundtable")
    page.get_by_role("link", name="Open in Lyon?").click()
    expect(page.get_by_role("region", name="Synthesis")).to_contain_text("Hire the Lyon sales lead first")
    expect(page.locator(".convergence-point")).to_have_count(3)

    page.go_back()
    page.get_by_label("Kind").select_option("panel")
    page.get_by_role("link", name="Explain CAP").click()
    expect(page.get_by_role("list", name="Panelists").get_by_role("listitem")).to_have_count(3)
    expect(page.get_by_role("region", name="Figures (_meta)")).to_contain_text("debate")

    page.go_back()
    page.get_by_label("Kind").select_option("workflow")
    page.get_by_role("link", name="Outline, then brief").click()
    log = page.get_by_role("list", name="Run log").locator("li")
    expect(log).to_have_count(3)
    assert [log.nth(i).get_attribute("data-node") for i in range(3)] == ["outline", "bullets", "brief"]
    expect(page.get_by_role("status")).to_contain_text("Done")


def test_a_runs_cached_and_reasoning_tokens_show_in_the_list_and_its_replay(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(model="gpt-4o-mini", reply="Consistency or availability, under partition.", reasoning_tokens=2500,
               cached_tokens=2)  # the prompt is 2 tokens: all of it cached
    with studio.api() as api:
        resp = api.post("/v1/chat/completions", json={"model": "openai:gpt-4o-mini",
                                                      "messages": [{"role": "user", "content": "Explain CAP"}]})
        assert resp.status_code == 200, resp.text
    page = studio.open("/history")
    row = page.get_by_role("row").filter(has_text="Explain CAP")
    expect(row).to_contain_text("(2 cached · 2,500 reasoning)")
    row.get_by_role("link").click()
    # 2,500 reasoning tokens at gpt-4o-mini's $0.60 a million output tokens: $0.0015.
    expect(page.locator("p.muted").filter(has_text="token")).to_contain_text(
        "(2 cached · 2,500 reasoning) · $")
    expect(page.locator("p.muted").filter(has_text="token")).to_contain_text("($0.001500 reasoning)")
