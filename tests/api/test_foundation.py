"""The service's foundation over real HTTP: health, auth, errors and storage behaviour."""

from __future__ import annotations

import asyncio
import importlib.metadata
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import APIRouter, Depends

import parley
from parley.api.deps import Principal, require_scope
from parley.api.main import create_app
from parley.store import keys as key_store
from parley.store import workspaces as ws_store
from tests.support.servers import ServerThread


def test_healthz_reports_model_and_database(http, llm, make_key):
    """Without a key /healthz says whether all is well and nothing else (which model, endpoint and library versions
    a deployment runs are its own); a key gets the model and the database, an admin key the endpoint and versions."""
    resp = http.get("/healthz")
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"status": "ok"}
    assert http.get("/healthz", headers={"Authorization": "Bearer pk_not_a_key"}).json() == {"status": "ok"}
    reader = http.get("/healthz", headers={"Authorization": f"Bearer {make_key(['readonly'])}"}).json()
    assert reader["status"] == "ok" and reader["database"] == {"ok": True, "embedded": False}
    assert reader["model"]["ok"] and "endpoint" not in reader["model"] and "versions" not in reader
    admin = http.get("/healthz", headers={"Authorization": f"Bearer {make_key(['admin'])}"}).json()
    assert admin["model"]["endpoint"] == llm.base_url.rstrip("/")
    assert admin["versions"]["parley"] == parley.__version__ == importlib.metadata.version("parley")


def test_healthz_unavailable_when_model_unreachable_while_the_worker_stays_ready(monkeypatch, parley_env, make_key):
    """The model endpoint down: /healthz answers 503 (its cause for a key), /readyz 200: the worker can serve what
    needs no model, and its readiness does not fail with every other worker's."""
    from parley.core.embedded import free_port

    parley_env.openai_base_url = f"http://127.0.0.1:{free_port()}/v1"
    key = make_key(["readonly"])
    with ServerThread(create_app(parley_env)) as server:
        resp = httpx.get(server.url + "/healthz", timeout=30)
        keyed = httpx.get(server.url + "/healthz", headers={"x-api-key": key}, timeout=30)
        ready = httpx.get(server.url + "/readyz", timeout=30)
    assert resp.status_code == 503 and resp.json() == {"status": "unavailable", "code": "model_unavailable"}
    body = keyed.json()
    assert keyed.status_code == 503 and body["code"] == "model_unavailable"
    assert body["model"]["ok"] is False and "unreachable" in body["model"]["error"] and body["database"]["ok"]
    assert ready.status_code == 200 and ready.json() == {"status": "ok"}


def test_healthz_503_when_database_is_lost(parley_env, tmp_path):
    from parley.core.embedded import database_server

    own_db = database_server(tmp_path / "own-db").start(timeout=60)
    parley_env.mongodb_uri = own_db.url
    port = str(urlsplit(own_db.url).port)
    try:
        with ServerThread(create_app(parley_env)) as server:
            assert httpx.get(server.url + "/healthz", timeout=30).status_code == 200
            assert httpx.get(server.url + "/readyz", timeout=30).json() == {"status": "ok"}
            own_db.stop()
            resp = httpx.get(server.url + "/healthz", timeout=30)
            ready = httpx.get(server.url + "/readyz", timeout=30)
    finally:
        own_db.stop()
    # The status and a code, and not where the database is.
    assert resp.status_code == 503 and resp.json() == {"status": "unavailable", "code": "database_unavailable"}
    assert port not in resp.text
    assert ready.status_code == 503 and ready.json() == {"status": "unavailable", "code": "database_unavailable"}


def test_readyz_fails_while_the_worker_is_out_of_touch_with_its_runs(parley_env):
    """Ready means this worker can serve: its lease renewals answered on time (a frozen event loop or a dead lease
    thread leaves them unanswered) as well as the database answering."""
    parley_env.parley_run_heartbeat = 60.0  # no renewal answers during the test but the first
    app = create_app(parley_env)
    with ServerThread(app) as server:
        assert httpx.get(server.url + "/readyz", timeout=30).json() == {"status": "ok"}
        app.state.runs._keeper.ok_at -= 120  # the last renewal answered two minutes ago
        resp = httpx.get(server.url + "/readyz", timeout=30)
    assert resp.status_code == 503 and resp.json() == {"status": "unavailable", "code": "worker_unavailable"}


def test_key_lookup_with_database_down_is_503(parley_env, tmp_path):
    from parley.core.embedded import database_server

    own_db = database_server(tmp_path / "own-db").start(timeout=60)
    parley_env.mongodb_uri = own_db.url
    app = create_app(parley_env)
    probe = APIRouter()

    @probe.get("/_probe")
    async def _probe(principal: Principal = Depends(require_scope("debate"))):
        return {"ok": True}

    app.include_router(probe)
    try:
        with ServerThread(app) as server:
            own_db.stop()
            resp = httpx.get(server.url + "/_probe", headers={"x-api-key": "pk_x"}, timeout=30)
            assert resp.status_code == 503
            assert resp.json()["code"] == "database_unavailable"
            # Where the database is stays in the server's log: a caller without a valid key learns nothing of it.
            assert str(urlsplit(own_db.url).port) not in resp.text and "127.0.0.1" not in resp.text, resp.text
    finally:
        own_db.stop()


def test_openapi_docs_are_served(http):
    assert http.get("/docs").status_code == 200
    assert http.get("/openapi.json").json()["info"]["title"] == "Parley"


def test_unknown_route_is_json_404(http):
    resp = http.get("/nope")
    assert resp.status_code == 404
    assert resp.json() == {"error": "No route for GET /nope", "code": "not_found"}


@pytest.fixture
def probe_app(parley_env):
    """Parley plus one probe route per auth style, to test the auth dependency through real HTTP."""
    app = create_app(parley_env)
    probe = APIRouter()

    @probe.get("/_read")
    async def read(p: Principal = Depends(require_scope("conversations"))):
        return {"user": p.user, "workspace": p.workspace, "scopes": sorted(p.scopes)}

    @probe.post("/_write")
    async def write(p: Principal = Depends(require_scope("conversations", write=True))):
        return {"ok": True}

    @probe.get("/v1/chat/_probe")
    async def chat(p: Principal = Depends(require_scope("chat"))):
        return {"ok": True}

    app.include_router(probe)
    with ServerThread(app) as server:
        yield server


def test_bearer_and_x_api_key_both_authenticate(probe_app, make_key):
    key = make_key(["conversations"], user="bob", workspace="acme")
    for headers in ({"Authorization": f"Bearer {key}"}, {"x-api-key": key}):
        resp = httpx.get(probe_app.url + "/_read", headers=headers)
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"user": "bob", "workspace": "acme", "scopes": ["conversations"]}


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer pk_wrong"}, {"x-api-key": ""},
                                     {"Authorization": "Basic abc"}])
def test_missing_or_wrong_key_is_401(probe_app, headers):
    resp = httpx.get(probe_app.url + "/_read", headers=headers)
    assert resp.status_code == 401
    assert resp.json() == {"error": "Unauthorized", "code": "invalid_api_key"}


def test_openai_routes_answer_errors_in_openai_shape(probe_app):
    resp = httpx.get(probe_app.url + "/v1/chat/_probe")
    assert resp.status_code == 401
    assert resp.json() == {"error": {"message": "Unauthorized", "type": "authentication_error",
                                     "code": "invalid_api_key"}}


def test_scope_denied_and_read_only(probe_app, make_key):
    other = make_key(["debate"])
    resp = httpx.get(probe_app.url + "/_read", headers={"x-api-key": other})
    assert resp.status_code == 403 and resp.json()["code"] == "scope_denied"
    readonly = make_key(["readonly", "conversations"])
    assert httpx.get(probe_app.url + "/_read", headers={"x-api-key": readonly}).status_code == 200
    resp = httpx.post(probe_app.url + "/_write", headers={"x-api-key": readonly})
    assert resp.status_code == 403
    assert resp.json() == {"error": "This key is read-only", "code": "read_only_key"}
    admin = make_key(["admin"])
    assert httpx.post(probe_app.url + "/_write", headers={"x-api-key": admin}).status_code == 200


async def test_keys_are_stored_hashed(db):
    record, plaintext = await key_store.create_key(db, user="u", workspace="w", scopes=["debate", "chat"])
    stored = await db.api_keys.find_one({"_id": record["_id"]})
    assert plaintext.startswith("pk_") and len(plaintext) > 40
    assert plaintext not in str(stored)
    assert stored["hash"] == key_store.hash_key(plaintext)
    assert (await key_store.find_key(db, plaintext=plaintext))["user"] == "u"
    assert await key_store.find_key(db, plaintext=plaintext + "x") is None


async def test_unknown_scope_is_refused(db):
    with pytest.raises(ValueError, match="unknown scope"):
        await key_store.create_key(db, user="u", workspace="w", scopes=["debate", "root"])
    assert await db.api_keys.count_documents({}) == 0


async def test_credit_reservations_never_overdraw_under_concurrency(db):
    await ws_store.add_credit(db, "ws", 1.0)
    results = await asyncio.gather(*[ws_store.reserve_credit(db, "ws", 0.3) for _ in range(10)])
    assert results.count(True) == 3
    ws = await ws_store.get_workspace(db, "ws")
    assert ws["creditUsd"] == pytest.approx(0.1)
    await ws_store.settle_credit(db, "ws", reserved=0.3, actual=0.05)
    assert (await ws_store.get_workspace(db, "ws"))["creditUsd"] == pytest.approx(0.35)


async def test_allowance_is_consumed_atomically_and_never_negative(db):
    await ws_store.set_allowance(db, "ws", 100)
    await asyncio.gather(*[ws_store.consume_allowance(db, "ws", 30) for _ in range(5)])
    assert (await ws_store.get_workspace(db, "ws"))["allowanceTokens"] == 0
    assert await ws_store.consume_allowance(db, "unlimited", 10) is None


def test_malformed_json_and_non_object_bodies_are_named(http, make_key):
    key = make_key(["conversations"])
    headers = {"x-api-key": key, "Content-Type": "application/json"}
    resp = http.post("/v1/conversations", headers=headers, content=b'{"title": ')
    assert resp.status_code == 400 and resp.json()["error"].startswith("Request body is not valid JSON")
    resp = http.post("/v1/conversations", headers=headers, content=b"[]")
    assert resp.status_code == 400 and resp.json()["error"] == "Invalid request: body: must be a JSON object"
