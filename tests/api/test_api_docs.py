"""`/docs` and `/redoc`: pages whose every script and style is served by Parley, under a strict CSP."""

from __future__ import annotations

import re

import pytest

PAGES = ("/docs", "/redoc")


def referenced(html: str) -> list[str]:
    return re.findall(r'(?:src|href|spec-url|data-spec-url)="([^"]*)"', html)


def directives(csp: str) -> dict[str, list[str]]:
    return {part.split()[0]: part.split()[1:] for part in (p.strip() for p in csp.split(";")) if part}


@pytest.mark.parametrize("path", PAGES)
def test_the_page_references_only_its_own_origin_and_each_file_is_served(http, path):
    page = http.get(path)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    urls = referenced(page.text)
    assert urls and all(u.startswith("/") and not u.startswith("//") for u in urls), urls
    assert "<script>" not in page.text  # no inline script: the CSP would refuse it
    for url in urls:
        served = http.get(url)
        assert served.status_code == 200, url
        assert url == "/openapi.json" or served.headers["x-content-type-options"] == "nosniff"
    scripts = [u for u in urls if u.endswith(".js")]
    assert scripts and all(http.get(u).headers["content-type"].startswith("text/javascript") for u in scripts)


@pytest.mark.parametrize("path", PAGES)
def test_the_page_has_a_strict_content_security_policy(http, path):
    policy = directives(http.get(path).headers["content-security-policy"])
    assert policy["default-src"] == ["'none'"]
    assert policy["script-src"] == ["'self'"]  # no inline, eval or foreign script
    assert policy["connect-src"] == ["'self'"] and policy["frame-ancestors"] == ["'none'"]
    assert all("http" not in source for sources in policy.values() for source in sources)


def test_only_the_packaged_files_are_served(http):
    missing = http.get("/docs/assets/nothing.js")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    assert http.get("/docs/assets/..%2F..%2Fpyproject.toml").status_code == 404
    # The OpenAPI document does not list the pages or their files.
    assert not [p for p in http.get("/openapi.json").json()["paths"] if p.startswith(("/docs", "/redoc"))]
