"""Signing in with a pasted key, keyboard use, and what a screen reader needs (axe-core) on every view."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from tests.studio.conftest import KEY_STORAGE


def test_a_wrong_key_is_refused_and_the_right_one_is_kept_out_of_urls(make_studio):
    studio = make_studio(signed_in=False)
    studio.expect_console_error("status of 401")  # the browser notes the refused /v1/me itself
    urls: list[str] = []
    studio.page.on("request", lambda r: urls.append(r.url))
    page = studio.open("/designer")
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    studio.shot("sign-in")

    page.get_by_label("API key").fill("pk_not_a_key")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("That key was not accepted: it is unknown or has been revoked.")
    assert page.evaluate(f"localStorage.getItem('{KEY_STORAGE}')") is None

    page.get_by_label("API key").fill(studio.key)
    page.get_by_label("API key").press("Enter")
    expect(page.get_by_text("alice · ws1")).to_be_visible()
    expect(page.get_by_role("heading", name="Designer", exact=True)).to_be_visible()
    page.reload()
    expect(page.get_by_text("alice · ws1")).to_be_visible()
    assert not [u for u in urls if studio.key in u or "pk_not_a_key" in u]

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API key")).to_be_visible()
    assert page.evaluate(f"localStorage.getItem('{KEY_STORAGE}')") is None


def test_the_designer_works_from_the_keyboard(studio):
    page = studio.open("/designer")
    page.get_by_label("Example").focus()
    page.keyboard.press("End")  # the last example
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Open example")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_text("Opened the example tagline-loop.")).to_be_visible()
    page.get_by_role("region", name="Nodes").get_by_role("button").first.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("tab", name="Inspector")).to_have_attribute("aria-selected", "true")
    expect(page.get_by_role("tabpanel").get_by_label("Node id")).to_have_value("write")
    page.get_by_role("tab", name="Inspector").focus()
    page.keyboard.press("ArrowRight")
    expect(page.get_by_role("tab", name="Workflow")).to_be_focused()
    expect(page.get_by_role("tabpanel").get_by_label("Name", exact=True)).to_have_value("Draft and review until approved")


VIEWS = {
    "sign-in": None,
    "duel": "/duel",
    "panel": "/panel",
    "round table": "/roundtable",
    "designer": "/designer",
    "history": "/history",
}


@pytest.mark.parametrize("view", VIEWS)
def test_each_view_passes_axe(make_studio, view):
    studio = make_studio(signed_in=VIEWS[view] is not None)
    page = studio.open(VIEWS[view] or "/")
    expect(page.locator("h1")).to_be_visible()
    if view == "designer":
        page.get_by_role("button", name="Open example").click()
        expect(page.locator(".react-flow [data-node-id]").first).to_be_visible()
    results = Axe().run(page, options={"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21aa"]}})
    assert results.violations_count == 0, results.generate_report()
