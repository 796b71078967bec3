"""A page follows the run it shows to its real end: a storage failure that cuts its stream is waited out, and the
run, resumed once storage is back, is shown as it ended. The test runs its own database process, which it kills
mid-run and starts again on the same data (as tests/runs/test_storage_failure.py does)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from playwright.sync_api import expect

from parley.core.embedded import ManagedProcess
from tests.studio.test_panel import ARBITRATOR_MARK, seat
from tests.support.own_database import database, mongo_uri  # noqa: F401 (fixtures)

ANSWER = "Choose consistency for money, availability for feeds."


@contextmanager
def storage_down(database: ManagedProcess) -> Iterator[None]:
    """Kill the database for the block, then start it again on the same port and data (also when the block fails, so
    the test's database can still be dropped)."""
    database.process.kill()
    database.process.wait(10)
    try:
        yield
    finally:
        database.start(timeout=60)


def test_a_panel_cut_by_a_storage_failure_is_followed_to_its_answer(studio, llm, sync_db, database):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(match=ARBITRATOR_MARK, reply=ANSWER)
    llm.script(model="gpt-4o-mini", reply="Pick two of the three.")
    llm.script(model="claude-sonnet-4-5", reply="Trade-offs, always.")
    llm.script(model="gemini-2.5-flash", reply="Partitions will happen; plan for them.", hold="gemini")
    # While storage is down the browser's reconnections are answered 503, which Chromium logs.
    studio.expect_console_error("503")
    page = studio.open("/panel")
    page.get_by_label("Question").fill("Explain the CAP theorem")
    page.get_by_role("button", name="Ask the panel").click()
    expect(seat(page, "openai:gpt-4o-mini")).to_have_attribute("data-status", "answered")
    llm.wait_held("gemini")

    with storage_down(database):  # the run's stream ends with `storage_unavailable`; the run itself is not failed
        note = page.get_by_test_id("follow-note")
        expect(note).to_contain_text("Storage is unavailable for now")
        expect(page.get_by_role("status")).not_to_contain_text("Failed")
    # Storage is back (same port, same data): the run is resumed and completes.
    llm.release("gemini")
    expect(page.get_by_role("status")).to_have_text("Done.", timeout=90_000)
    expect(page.locator(".answer-text")).to_have_text(ANSWER)
    expect(note).to_have_count(0)
    expect(page.get_by_text("Storage is unavailable")).to_have_count(0)
    for model in ("openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-flash"):
        expect(seat(page, model)).to_have_attribute("data-status", "answered")
    expect(page.get_by_role("region", name="Figures (_meta)")).to_be_visible()
    studio.shot("panel-resumed", full_page=True)

    # History shows the run as it ended, too.
    page.get_by_role("link", name="History").click()
    row = page.get_by_role("row").filter(has_text="Explain the CAP theorem")
    expect(row.locator(".badge")).to_have_text("completed")
