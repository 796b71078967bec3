"""Panel in the browser: panelists' answers fill side by side, a failure shows as one, the answer streams."""

from __future__ import annotations

from playwright.sync_api import expect

ARBITRATOR_MARK = "You are the arbitrator of a panel"


def seat(page, model: str):
    return page.get_by_role("list", name="Panelists").get_by_role("listitem").filter(
        has=page.get_by_role("heading", name=model, exact=True))


def test_panel_columns_fill_as_answers_arrive_then_the_answer_streams(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(match=ARBITRATOR_MARK, reply="Choose consistency for money, availability for feeds.",
               hold="arbitrator", pause_after=2)
    llm.script(model="claude-sonnet-4-5", status=401)
    llm.script(model="gemini-2.5-flash", reply="Partitions will happen; plan for them.", hold="gemini")
    llm.script(model="gpt-4o-mini", reply="Pick two of the three.")
    page = studio.open("/panel")
    page.get_by_label("Question").fill("Explain the CAP theorem")
    page.get_by_role("button", name="Ask the panel").click()

    gpt, claude, gemini = (seat(page, m) for m in
                           ("openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-flash"))
    expect(gpt).to_have_attribute("data-status", "answered")
    expect(gpt).to_contain_text("Pick two of the three.")
    expect(claude).to_have_attribute("data-status", "failed")
    expect(claude.locator(".error")).to_contain_text("auth")
    expect(gemini).to_have_attribute("data-status", "waiting")
    expect(page.get_by_role("status")).to_have_text("2 of 3 panelists have answered")
    studio.shot("panel-filling")

    llm.release("gemini")
    expect(gemini).to_have_attribute("data-status", "answered")
    expect(gemini).to_contain_text("Partitions will happen; plan for them.")
    answer = page.locator(".answer-text")
    expect(answer).to_have_text("Choose consistency ")  # the arbitrator's first tokens, before the rest
    expect(page.get_by_role("heading", name="Answer (arbitrator: openai:gpt-4o-mini)")).to_be_visible()
    llm.release("arbitrator")
    expect(answer).to_have_text("Choose consistency for money, availability for feeds.")
    expect(page.get_by_role("status")).to_have_text("Done.")
    figures = page.get_by_role("region", name="Figures (_meta)")
    expect(figures.get_by_role("row", name="routerMode")).to_contain_text("debate")
    expect(figures.get_by_role("row", name="modelUsed")).to_contain_text("openai:gpt-4o-mini")
    panelists = figures.get_by_role("table").filter(has_text="Panelists").get_by_role("row")
    expect(panelists).to_have_count(4)
    expect(panelists.nth(2)).to_contain_text("failed")
    for box in (gpt, claude, gemini):  # side by side at 1280 px: one row of three columns
        assert box.bounding_box()["y"] == gpt.bounding_box()["y"]
    studio.shot("panel", full_page=True)


def test_panel_mode_returns_every_answer_labelled(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(model="gpt-4o-mini", reply="Pick two.")
    llm.script(model="claude-sonnet-4-5", reply="Trade-offs.")
    llm.script(model="gemini-2.5-flash", reply="Partitions.")
    page = studio.open("/panel")
    page.get_by_label("Question").fill("Explain the CAP theorem")
    page.get_by_label("Panel: every answer, labelled").check()
    page.get_by_role("button", name="Ask the panel").click()
    expect(page.get_by_role("status")).to_have_text("Done.")
    answer = page.locator(".answer-text")
    for text in ("openai:gpt-4o-mini", "Pick two.", "anthropic:claude-sonnet-4-5", "Trade-offs.", "Partitions."):
        expect(answer).to_contain_text(text)
    figures = page.get_by_role("region", name="Figures (_meta)")
    expect(figures.get_by_role("row", name="routerMode")).to_contain_text("panel")
    expect(figures.get_by_role("table").filter(has_text="Panelists").get_by_role("row")).to_have_count(4)
