"""What the Studio needs from the HTTP layer: `GET /v1/me`, `POST /v1/workflows/validate`, and its pages at `/`
served without shadowing any API path."""

from __future__ import annotations

import re

import pytest

from parley.api.routes.studio import STUDIO_DIR, bundle_file
from parley.designer import load_example

HTML = {"Accept": "text/html,application/xhtml+xml"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# --- GET /v1/me ------------------------------------------------------------------------------


def test_me_names_the_keys_user_workspace_and_scopes(http, make_key):
    key = make_key(["workflows", "debate"], user="ada", workspace="acme")
    assert http.get("/v1/me", headers=bearer(key)).json() == {
        "user": "ada", "workspace": "acme", "scopes": ["debate", "workflows"],
    }
    assert http.get("/v1/me", headers={"x-api-key": key}).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer pk_wrong"}, {"Authorization": "Basic abc"}])
def test_me_refuses_a_missing_or_wrong_key(http, headers):
    resp = http.get("/v1/me", headers=headers)
    assert resp.status_code == 401
    assert resp.json() == {"error": "Unauthorized", "code": "invalid_api_key"}


# --- POST /v1/workflows/validate -------------------------------------------------------------


def test_validate_accepts_a_valid_workflow_and_stores_nothing(http, make_key, sync_db):
    key = make_key(["workflows", "readonly"])  # checking writes nothing, so a read-only key may
    resp = http.post("/v1/workflows/validate", headers=bearer(key), json=load_example("roundtable-decision"))
    assert resp.status_code == 200
    assert resp.json() == {"valid": True, "errors": []}
    assert sync_db.workflows.count_documents({}) == 0


def test_validate_lists_each_problem_with_its_node_and_path(http, make_key, sync_db):
    document = load_example("debate-summary")
    document["nodes"][1]["inputs"]["prompt"] = "Summarize {verdit}."
    document["edges"].append({"from": "summarize", "to": "nowhere"})
    resp = http.post("/v1/workflows/validate", headers=bearer(make_key(["workflows"])), json=document)
    assert resp.status_code == 200
    body = resp.json()
    assert body["valid"] is False
    by_path = {e["path"]: e for e in body["errors"]}
    assert by_path["nodes[1].inputs.prompt"]["node"] == "summarize"
    assert "unknown state key 'verdit'" in by_path["nodes[1].inputs.prompt"]["message"]
    assert by_path["edges[1].to"]["node"] == "summarize"
    assert all(e["detail"].startswith("At node 'summarize'") for e in body["errors"])
    # The same checks as saving: what validate refuses, POST /v1/workflows refuses with the same list.
    saved = http.post("/v1/workflows", headers=bearer(make_key(["workflows"])), json=document)
    assert saved.status_code == 422 and saved.json()["errors"] == body["errors"]
    assert sync_db.workflows.count_documents({}) == 0


@pytest.mark.parametrize("document", [[], "a workflow", 3, False])
def test_validate_names_a_document_that_is_not_an_object(http, make_key, document):
    resp = http.post("/v1/workflows/validate", headers=bearer(make_key(["workflows"])), json=document)
    assert resp.status_code == 200
    assert resp.json() == {"valid": False, "errors": [
        {"node": None, "path": "$", "message": "a workflow must be a JSON object",
         "detail": "At $: a workflow must be a JSON object"}]}


def test_validate_refuses_malformed_json_and_keys_without_the_scope(http, make_key):
    key = make_key(["workflows"])
    broken = http.post("/v1/workflows/validate", headers={**bearer(key), "Content-Type": "application/json"},
                       content=b'{"name": ')
    assert broken.status_code == 422 and "not valid JSON" in broken.json()["error"]
    refused = http.post("/v1/workflows/validate", headers=bearer(make_key(["debate"])), json={})
    assert refused.status_code == 403 and refused.json()["code"] == "scope_denied"
    assert http.post("/v1/workflows/validate", json={}).status_code == 401


# --- the Studio's pages ----------------------------------------------------------------------


def test_the_studio_is_served_at_the_root_with_a_strict_policy(http):
    page = http.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<title>Parley Studio</title>" in page.text
    assert page.headers["cache-control"] == "no-cache"
    assert "script-src 'self'" in page.headers["content-security-policy"]
    asset = re.search(r'src="(/assets/[^"]+\.js)"', page.text).group(1)
    script = http.get(asset)
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert "immutable" in script.headers["cache-control"]
    assert http.head("/").status_code == 200


@pytest.mark.parametrize("path", ["/duel", "/roundtable/conv_123", "/history/run_1", "/designer"])
def test_client_side_routes_get_the_page_when_a_browser_asks(http, path):
    resp = http.get(path, headers=HTML)
    assert resp.status_code == 200 and "<title>Parley Studio</title>" in resp.text
    assert resp.text == (STUDIO_DIR / "index.html").read_text()


def test_the_studio_never_shadows_the_api(http):
    # Unknown API paths keep the API's JSON answer, whatever the client accepts.
    for path in ("/v1/nope", "/api/nope", "/healthz/nope", "/metrics/nope", "/docs/nope"):
        resp = http.get(path, headers=HTML)
        assert resp.status_code == 404, path
        assert resp.json() == {"error": f"No route for GET {path}", "code": "not_found"}
    # API clients (no text/html) still get JSON for unknown paths; other methods are untouched.
    assert http.get("/nope").json() == {"error": "No route for GET /nope", "code": "not_found"}
    assert http.post("/nope", headers=HTML).json() == {"error": "No route for POST /nope", "code": "not_found"}
    assert http.put("/v1/me", headers=HTML).status_code == 405
    assert http.get("/healthz").headers["content-type"] == "application/json"
    assert http.get("/metrics", headers=HTML).headers["content-type"].startswith("text/plain")
    assert http.get("/openapi.json").json()["info"]["title"] == "Parley"
    assert "/{path}" not in http.get("/openapi.json").json()["paths"]
    assert http.get("/docs").status_code == 200


def test_missing_bundle_files_are_404_not_the_page(http):
    resp = http.get("/assets/missing.js", headers=HTML)
    assert resp.status_code == 404 and "Parley Studio" not in resp.text
    # A path outside the bundle is never read, however it is spelled.
    assert http.get("/pyproject.toml", headers=HTML).text == (STUDIO_DIR / "index.html").read_text()
    for path in ("../../../pyproject.toml", "/assets/../../routes/studio.py", "%2e%2e/%2e%2e/__init__.py"):
        assert bundle_file(path) is None, path
    assert bundle_file("/") == STUDIO_DIR / "index.html"
