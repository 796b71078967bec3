"""`/docs` and `/redoc` render in Chromium with nothing but Parley's own origin reachable, under their CSP."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.studio.conftest import DESKTOP


@pytest.fixture
def offline_page(browser, parley):
    """A page that can reach Parley and nothing else; it records every request it tried elsewhere and every
    console error (a CSP violation is one)."""
    context = browser.new_context(viewport=DESKTOP)
    foreign: list[str] = []
    problems: list[str] = []

    def route(request_route) -> None:
        url = request_route.request.url
        if url.startswith(parley.url + "/") or url.startswith(("data:", "blob:")):
            request_route.continue_()
        else:
            foreign.append(url)
            request_route.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
    yield page, parley.url, foreign, problems
    context.close()


def test_swagger_ui_renders_offline(offline_page):
    page, url, foreign, problems = offline_page
    page.goto(url + "/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Parley")
    expect(page.locator(".opblock-summary-path", has_text="/api/debate").first).to_be_visible()
    page.locator(".opblock-summary", has_text="/healthz").first.click()
    page.get_by_role("button", name="Try it out").click()
    page.get_by_role("button", name="Execute").click()
    expect(page.locator(".live-responses-table tbody .response-col_status").first).to_have_text("200")
    assert foreign == [] and problems == []


def test_redoc_renders_offline(offline_page):
    page, url, foreign, problems = offline_page
    page.goto(url + "/redoc")
    expect(page.locator("h1")).to_contain_text("Parley")
    expect(page.get_by_role("heading", name="Start a debate, streamed as Server-Sent Events")).to_be_visible()
    page.get_by_placeholder("Search...").fill("debate")
    expect(page.locator("[role=search] li").first).to_be_visible()  # the search index is built in a worker
    assert foreign == []
    # Redoc's sidebar always tries its maker's logo from their CDN: the CSP stops it in the browser (so no request
    # leaves), and Redoc hides the image. That refusal is the only error the page may report.
    assert [p for p in problems if not ("cdn.redoc.ly" in p and "Content Security Policy" in p)] == []
