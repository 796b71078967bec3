"""Browser fixtures: Debian's Chromium driven by Playwright against a real `parley` on 127.0.0.1.

The browser is not downloaded (`playwright install` cannot reach its CDN here): the tests use the
Chromium at PARLEY_CHROMIUM, else /usr/bin/chromium (`apt-get install -y chromium`), and fail, never
skip, when it is missing. Every page records console errors and uncaught exceptions; a test fails
if any appeared that it did not expect. With PARLEY_SCREENSHOTS=<folder> (`make screenshots`) the
tests save a screenshot of each view there.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

CHROMIUM = os.environ.get("PARLEY_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--no-first-run"]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
KEY_STORAGE = "parley.apiKey"  # where the Studio keeps the key (studio/src/session/session.tsx)
# `make test` (its `chromium` target) says the same when it cannot install the browser.
MISSING_CHROMIUM = ("The Studio's browser tests need Chromium at {path}. Install it with `apt-get install -y chromium` "
                    "(Debian/Ubuntu), or set PARLEY_CHROMIUM to a Chromium binary.")

# Expectations wait for what is on screen; two shared cores under load can take a while to get there.
expect.set_options(timeout=20_000)


# One browser for the package's tests, closed when they are done: Playwright's sync API keeps its event loop
# set on the main thread while it runs, which asyncio tests that come after could not share.
@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).is_file():
        pytest.fail(MISSING_CHROMIUM.format(path=CHROMIUM), pytrace=False)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield browser
        browser.close()


@dataclass
class Studio:
    """One browser page on a running Parley, signed in with an admin key unless told otherwise."""

    page: Page
    url: str
    key: str
    problems: list[str] = field(default_factory=list)
    expected: list[re.Pattern[str]] = field(default_factory=list)

    def open(self, path: str = "/") -> Page:
        self.page.goto(self.url + path)
        return self.page

    def api(self) -> httpx.Client:
        """An HTTP client with the same key, to arrange data or check what the UI stored."""
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=60)

    def expect_console_error(self, pattern: str) -> None:
        """Allow console errors matching `pattern` (e.g. the browser's note on a 401 the test provokes)."""
        self.expected.append(re.compile(pattern))

    def unexpected_problems(self) -> list[str]:
        return [p for p in self.problems if not any(e.search(p) for e in self.expected)]

    def shot(self, name: str, *, full_page: bool = False) -> None:
        """Save a screenshot for docs/screenshots when PARLEY_SCREENSHOTS names a folder."""
        folder = os.environ.get("PARLEY_SCREENSHOTS")
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=full_page)


def _watch(page: Page, problems: list[str]) -> None:
    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console error: {message.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))


@pytest.fixture
def make_studio(browser, parley, make_key):
    """Open Studio pages: `make_studio(scopes=..., signed_in=..., viewport=...)`; each checks its console."""
    opened: list[tuple[Studio, object]] = []

    def make(*, scopes=("admin",), signed_in: bool = True, viewport: dict | None = None) -> Studio:
        key = make_key(scopes)
        context = browser.new_context(viewport=viewport or DESKTOP, accept_downloads=True)
        if signed_in:
            context.add_init_script(f"window.localStorage.setItem({json.dumps(KEY_STORAGE)}, {json.dumps(key)})")
        page = context.new_page()
        page.set_default_timeout(20_000)
        studio = Studio(page=page, url=parley.url, key=key)
        _watch(page, studio.problems)
        opened.append((studio, context))
        return studio

    yield make
    try:
        for studio, _ in opened:
            assert studio.unexpected_problems() == [], "the page reported errors"
    finally:
        for _, context in opened:
            context.close()


@pytest.fixture
def studio(make_studio) -> Studio:
    return make_studio()
