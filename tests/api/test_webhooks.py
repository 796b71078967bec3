"""Signed webhooks (`/v1/webhooks`, docs/webhooks.md): run events delivered to a receiver on 127.0.0.1 that verifies
each with the `standardwebhooks` package; retries, rotation, replay, the URL rules, and who sees what. Real HTTP,
the scripted model, a real database; the worker killed mid-delivery is in tests/runs/test_webhook_failover.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from cryptography.fernet import Fernet
from pymongo import MongoClient

from parley.api.main import create_app
from parley.core import outbound
from parley.core.limits import (
    MAX_WEBHOOK_ANSWER_BYTES,
    WEBHOOK_TEST_RATE,
    WEBHOOK_TIMEOUTS_BEFORE_BACKOFF,
    WEBHOOK_WORKSPACE_SHARE,
)
from parley.core.settings import get_settings
from tests.support.servers import ServerThread
from tests.support.wait import eventually
from tests.support.webhooks import REVIEWED, Answer, Receiver, auth, receiver  # noqa: F401 (the fixture)



@pytest.fixture
def hooked(parley_env, monkeypatch, receiver) -> Iterator[httpx.Client]:
    """Parley allowing webhooks to the receiver, retrying after 0.2 s (doubling), polling every 0.05 s."""
    monkeypatch.setenv("PARLEY_WEBHOOK_URLS", receiver.url("/hooks"))
    monkeypatch.setenv("PARLEY_WEBHOOK_RETRY_DELAY", "0.2")
    monkeypatch.setenv("PARLEY_WEBHOOK_POLL", "0.05")
    monkeypatch.setenv("PARLEY_WEBHOOK_TIMEOUT", "5")
    get_settings.cache_clear()
    with ServerThread(create_app(get_settings())) as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


@pytest.fixture
def admin(make_key) -> str:
    return make_key(["admin"])


def subscribe(http: httpx.Client, key: str, url: str, **fields) -> dict:
    resp = http.post("/v1/webhooks", json={"url": url, **fields}, headers=auth(key))
    assert resp.status_code == 201, resp.text
    return resp.json()["webhook"]


def chat(http: httpx.Client, key: str, model: str = "openai:scripted") -> httpx.Response:
    return http.post("/v1/chat/completions", headers=auth(key),
                     json={"model": model, "messages": [{"role": "user", "content": "Hi"}]})


def run_of(http: httpx.Client, key: str, run_id: str) -> dict:
    return http.get(f"/v1/runs/{run_id}", headers=auth(key)).json()


def deliveries(http: httpx.Client, key: str, **query) -> list[dict]:
    resp = http.get("/v1/webhooks/deliveries", params=query, headers=auth(key))
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]


def latest(http: httpx.Client, key: str) -> dict:
    """The newest delivery of the log; {} while there is none (a run's is stored just after its answer)."""
    return next(iter(deliveries(http, key)), {})


def test_every_run_event_is_delivered_once_signed_and_verified(hooked, admin, receiver, llm):
    hook = subscribe(hooked, admin, receiver.url("/hooks/all"))
    assert hook["secret"].startswith("whsec_") and hook["events"] == ["run.completed", "run.failed", "run.cancelled",
                                                                      "run.waiting"]
    completed = chat(hooked, admin).headers["x-run-id"]
    llm.script(model="broken", status=400, reply="The scripted model refuses.")
    failed = chat(hooked, admin, "openai:broken").headers["x-run-id"]
    started = hooked.post("/v1/workflows/runs", json={"workflow": REVIEWED, "input": {"topic": "Lyon"}},
                          headers=auth(admin))
    assert started.status_code == 202 and started.json()["status"] == "waiting", started.text
    waiting = started.json()["id"]
    receiver.got(3, "completed, failed and waiting reach the receiver")
    assert hooked.post(f"/v1/runs/{waiting}/cancel", headers=auth(admin)).status_code == 202
    got = receiver.got(4, "the cancel reaches the receiver")

    assert all(d.verifies(hook["secret"]) for d in got)
    assert not got[0].verifies("whsec_" + "A" * 44)  # a signature by another secret does not verify
    events = {(d.json()["type"], d.json()["data"]["runId"]) for d in got}
    assert events == {("run.completed", completed), ("run.failed", failed), ("run.waiting", waiting),
                      ("run.cancelled", waiting)}
    assert len({d.id for d in got}) == 4 and all(d.id.startswith("msg_") for d in got)
    by_type = {d.json()["type"]: d.json() for d in got}
    assert by_type["run.completed"]["data"]["kind"] == "panel"
    assert by_type["run.completed"]["data"]["links"]["run"] == f"/v1/runs/{completed}"
    assert by_type["run.failed"]["data"]["error"]["code"] == run_of(hooked, admin, failed)["error"]["code"]
    assert by_type["run.waiting"]["data"]["waiting"]["at"] == "review"
    assert by_type["run.waiting"]["data"]["links"]["input"] == f"/v1/runs/{waiting}/input"
    assert {d.headers["content-type"] for d in got} == {"application/json"}

    eventually(lambda: [d["status"] for d in deliveries(hooked, admin)] == ["delivered"] * 4, "the log says delivered")
    log = deliveries(hooked, admin)
    assert {d["id"] for d in log} == {d.id for d in got}
    assert all(len(d["attempts"]) == 1 and d["attempts"][0]["statusCode"] == 200 for d in log)
    one = hooked.get(f"/v1/webhooks/deliveries/{log[0]['id']}", headers=auth(admin)).json()["delivery"]
    assert one["payload"] == next(d.json() for d in got if d.id == one["id"])


def test_a_kinds_filter_and_an_events_list_choose_what_a_webhook_gets(hooked, admin, receiver):
    subscribe(hooked, admin, receiver.url("/hooks/workflows"), kinds=["workflow"])
    panels = subscribe(hooked, admin, receiver.url("/hooks/panels"), kinds=["panel"], events=["run.completed"])
    subscribe(hooked, admin, receiver.url("/hooks/failures"), events=["run.failed"])
    run_id = chat(hooked, admin).headers["x-run-id"]
    got = receiver.got(1)
    eventually(lambda: latest(hooked, admin).get("status") == "delivered", "the delivery is logged")
    assert [(d.path, d.json()["data"]["runId"]) for d in got] == [("/hooks/panels", run_id)]
    assert [d["webhookId"] for d in deliveries(hooked, admin)] == [panels["id"]]


def test_a_rotated_secret_signs_beside_the_new_one_during_its_grace(hooked, admin, receiver):
    hook = subscribe(hooked, admin, receiver.url())
    rotated = hooked.post(f"/v1/webhooks/{hook['id']}/rotate", json={"graceSeconds": 3600}, headers=auth(admin))
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["webhook"]["secret"]
    assert new != hook["secret"] and len(rotated.json()["webhook"]["secrets"]) == 2
    assert "secret" not in hooked.get(f"/v1/webhooks/{hook['id']}", headers=auth(admin)).json()["webhook"]
    chat(hooked, admin)
    first = receiver.got(1)[0]
    assert first.verifies(new) and first.verifies(hook["secret"])
    assert len(first.headers["webhook-signature"].split(" ")) == 2

    latest = hooked.post(f"/v1/webhooks/{hook['id']}/rotate", json={"graceSeconds": 0}, headers=auth(admin))
    newest = latest.json()["webhook"]["secret"]
    chat(hooked, admin)
    second = receiver.got(2)[1]
    assert second.verifies(newest) and not second.verifies(new) and not second.verifies(hook["secret"])


def test_a_receiver_that_fails_twice_gets_the_same_delivery_again_with_backoff(hooked, admin, receiver):
    receiver.answers = [Answer(status=500), Answer(status=503)]
    hook = subscribe(hooked, admin, receiver.url())
    chat(hooked, admin)
    got = receiver.got(3, "two failed attempts and a third that succeeds")
    assert len({d.id for d in got}) == 1 and all(d.verifies(hook["secret"]) for d in got)
    assert got[1].at - got[0].at >= 0.2 and got[2].at - got[1].at >= 0.4  # PARLEY_WEBHOOK_RETRY_DELAY, doubled
    eventually(lambda: latest(hooked, admin).get("status") == "delivered", "the third attempt is logged")
    log = deliveries(hooked, admin)[0]
    assert [a["statusCode"] for a in log["attempts"]] == [500, 503, 200] and log["attemptCount"] == 3
    assert log["attempts"][0]["error"].startswith("http_status")


def test_a_delivery_fails_after_its_last_attempt_and_a_replay_sends_the_same_id(parley_env, monkeypatch, receiver,
                                                                               make_key):
    monkeypatch.setenv("PARLEY_WEBHOOK_URLS", receiver.url())
    monkeypatch.setenv("PARLEY_WEBHOOK_RETRY_DELAY", "0.1")
    monkeypatch.setenv("PARLEY_WEBHOOK_POLL", "0.05")
    monkeypatch.setenv("PARLEY_WEBHOOK_ATTEMPTS", "2")
    get_settings.cache_clear()
    receiver.answers = [Answer(status=500), Answer(status=500)]
    admin = make_key(["admin"])
    with ServerThread(create_app(get_settings())) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        subscribe(http, admin, receiver.url())
        chat(http, admin)
        eventually(lambda: latest(http, admin).get("status") == "failed", "the delivery fails after 2 attempts")
        failed = deliveries(http, admin)[0]
        assert len(receiver.deliveries) == 2 and failed["attemptCount"] == 2
        replay = http.post(f"/v1/webhooks/deliveries/{failed['id']}/replay", headers=auth(admin))
        assert replay.status_code == 202 and replay.json()["delivery"]["status"] == "pending", replay.text
        got = receiver.got(3, "the replay reaches the receiver")
        assert got[2].id == failed["id"] and got[2].body == got[0].body
        eventually(lambda: latest(http, admin).get("status") == "delivered", "the replay is delivered")
        assert deliveries(http, admin)[0]["replays"] == 1


def test_a_url_outside_the_allow_list_is_refused_with_a_code(hooked, admin, receiver):
    for url in ("http://127.0.0.1:1/hooks", receiver.url("/elsewhere"), receiver.url("/hooksx"),
                receiver.url("/hooks/../admin"), receiver.url("/hooks?token=s3cret"), "ftp://127.0.0.1/hooks",
                f"http://user:pw@127.0.0.1:{receiver.port}/hooks"):
        resp = hooked.post("/v1/webhooks", json={"url": url}, headers=auth(admin))
        assert resp.status_code == 400, (url, resp.text)
        assert resp.json()["code"] == "webhook_url_not_allowed" and "s3cret" not in resp.text
    hook = subscribe(hooked, admin, receiver.url("/hooks/./a"))
    assert hook["url"] == receiver.url("/hooks/a")  # stored, checked and called in its normal form
    moved = hooked.patch(f"/v1/webhooks/{hook['id']}", json={"url": "http://127.0.0.1:1/x"}, headers=auth(admin))
    assert moved.status_code == 400 and moved.json()["code"] == "webhook_url_not_allowed"
    assert hooked.post("/v1/webhooks", json={"url": receiver.url(), "events": ["run.started"]},
                       headers=auth(admin)).status_code == 400


def test_no_url_is_allowed_by_default(parley, make_key, receiver):
    resp = httpx.post(parley.url + "/v1/webhooks", json={"url": receiver.url()}, headers=auth(make_key(["admin"])))
    assert resp.status_code == 400 and resp.json()["code"] == "webhook_url_not_allowed"
    assert "PARLEY_WEBHOOK_URLS is empty" in resp.json()["error"]


def test_a_redirect_is_not_followed(hooked, admin, receiver):
    receiver.default = Answer(status=307, headers={"Location": receiver.url("/hooks/elsewhere")})
    subscribe(hooked, admin, receiver.url("/hooks/first"))
    chat(hooked, admin)
    eventually(lambda: latest(hooked, admin).get("attemptCount", 0) >= 2, "two attempts are logged")
    assert {d.path for d in receiver.deliveries} == {"/hooks/first"}
    attempt = deliveries(hooked, admin)[0]["attempts"][0]
    assert attempt["statusCode"] == 307 and attempt["error"].startswith("redirect")


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
def test_a_receivers_answer_is_read_only_up_to_its_bound(hooked, admin, receiver, chunked):
    receiver.default = Answer(body=b"x" * (MAX_WEBHOOK_ANSWER_BYTES * 16), chunked=chunked)
    subscribe(hooked, admin, receiver.url())
    chat(hooked, admin)
    eventually(lambda: latest(hooked, admin).get("attemptCount", 0) >= 1, "the attempt is logged")
    attempt = deliveries(hooked, admin)[0]["attempts"][0]
    assert attempt["error"].startswith("answer_too_large") and deliveries(hooked, admin)[0]["status"] == "pending"


def test_a_test_ping_is_signed_and_delivered(hooked, admin, receiver):
    hook = subscribe(hooked, admin, receiver.url(), events=["run.failed"])
    resp = hooked.post(f"/v1/webhooks/{hook['id']}/test", headers=auth(admin))
    assert resp.status_code == 202 and resp.json()["delivery"]["event"] == "webhook.test", resp.text
    got = receiver.got(1)[0]
    assert got.verifies(hook["secret"]) and got.json()["type"] == "webhook.test" and got.id == \
        resp.json()["delivery"]["id"]


def test_webhooks_and_deliveries_are_for_their_workspaces_admin_keys_only(hooked, admin, receiver, make_key):
    hook = subscribe(hooked, admin, receiver.url())
    chat(hooked, admin)
    receiver.got(1)
    delivery = deliveries(hooked, admin)[0]["id"]
    other = make_key(["admin"], user="bob", workspace="ws2")
    for method, path in (("GET", f"/v1/webhooks/{hook['id']}"), ("PATCH", f"/v1/webhooks/{hook['id']}"),
                         ("DELETE", f"/v1/webhooks/{hook['id']}"), ("POST", f"/v1/webhooks/{hook['id']}/rotate"),
                         ("POST", f"/v1/webhooks/{hook['id']}/test"),
                         ("GET", f"/v1/webhooks/deliveries/{delivery}"),
                         ("POST", f"/v1/webhooks/deliveries/{delivery}/replay"),
                         ("GET", f"/v1/webhooks/deliveries?webhook={hook['id']}")):
        resp = hooked.request(method, path, headers=auth(other), json={"active": False} if method == "PATCH" else None)
        assert resp.status_code == 404, (method, path, resp.text)
    assert hooked.get("/v1/webhooks", headers=auth(other)).json() == {"data": []}
    assert deliveries(hooked, other) == []
    for scopes in (["chat", "conversations", "debate", "workflows"], ["readonly"]):
        key = make_key(scopes)
        assert hooked.get("/v1/webhooks", headers=auth(key)).status_code == 403
        assert hooked.get("/v1/webhooks/deliveries", headers=auth(key)).status_code == 403
    assert [h["id"] for h in hooked.get("/v1/webhooks", headers=auth(admin)).json()["data"]] == [hook["id"]]


def test_an_inactive_or_deleted_webhook_gets_nothing(hooked, admin, receiver):
    hook = subscribe(hooked, admin, receiver.url())
    off = hooked.patch(f"/v1/webhooks/{hook['id']}", json={"active": False}, headers=auth(admin))
    assert off.status_code == 200 and off.json()["webhook"]["active"] is False
    chat(hooked, admin)
    assert hooked.delete(f"/v1/webhooks/{hook['id']}", headers=auth(admin)).status_code == 204
    assert hooked.get(f"/v1/webhooks/{hook['id']}", headers=auth(admin)).status_code == 404
    held = threading.Event()
    receiver.default = Answer(hold=held)
    fresh = subscribe(hooked, admin, receiver.url())
    assert hooked.post(f"/v1/webhooks/{fresh['id']}/test", headers=auth(admin)).status_code == 202
    receiver.got(1)
    held.set()
    assert [d.json()["type"] for d in receiver.deliveries] == ["webhook.test"]  # nothing for the run
    assert [d["event"] for d in deliveries(hooked, admin)] == ["webhook.test"]


# --- one workspace does not hold up another's (issue 45) ---------------------------------------------------------


def test_one_workspaces_hanging_receiver_does_not_hold_up_anothers_deliveries(parley_env, monkeypatch, receiver,
                                                                              make_key):
    """16 webhooks of one workspace on a receiver that never answers (within the test) take its share of a worker's
    slots, no more; another workspace's delivery is claimed beside them, not queued behind them, and arrives about
    as fast as it did with nothing else queued (its baseline, measured here)."""
    release = threading.Event()
    with Receiver() as hanging:
        hanging.default = Answer(hold=release)
        monkeypatch.setenv("PARLEY_WEBHOOK_URLS", f"{receiver.url('/hooks')},{hanging.url('/hooks')}")
        monkeypatch.setenv("PARLEY_WEBHOOK_POLL", "0.05")
        monkeypatch.setenv("PARLEY_WEBHOOK_TIMEOUT", "25")  # the hanging receiver's attempts last the whole test
        get_settings.cache_clear()
        slow, other = make_key(["admin"]), make_key(["admin"], user="bob", workspace="ws2")
        try:
            with ServerThread(create_app(get_settings())) as server, \
                    httpx.Client(base_url=server.url, timeout=60) as http:
                theirs = subscribe(http, other, receiver.url("/hooks/other"))

                def ping_delay(count: int) -> float:
                    started = time.monotonic()
                    resp = http.post(f"/v1/webhooks/{theirs['id']}/test", headers=auth(other))
                    assert resp.status_code == 202, resp.text
                    return receiver.got(count, "the other workspace's ping arrives", timeout=15)[-1].at - started

                baseline = ping_delay(1)
                for n in range(16):
                    subscribe(http, slow, hanging.url(f"/hooks/{n}"))
                chat(http, slow)  # 16 deliveries, due before the ping below; each attempt hangs
                hanging.got(WEBHOOK_WORKSPACE_SHARE, "the slow workspace's first deliveries are being sent")
                delay = ping_delay(2)

                assert len(hanging.deliveries) == WEBHOOK_WORKSPACE_SHARE  # held to its share of the slots
                queued = deliveries(http, slow, status="pending", limit=100)
                assert len(queued) == 16 and sum(d["attemptCount"] == 0 for d in queued) == 16
                assert delay <= baseline + 2.0, (delay, baseline)
        finally:
            release.set()


def test_a_receiver_that_keeps_timing_out_is_backed_off_alone(parley_env, monkeypatch, receiver, make_key):
    release = threading.Event()
    with Receiver() as hanging:
        hanging.default = Answer(hold=release)
        monkeypatch.setenv("PARLEY_WEBHOOK_URLS", f"{receiver.url('/hooks')},{hanging.url('/hooks')}")
        monkeypatch.setenv("PARLEY_WEBHOOK_POLL", "0.05")
        monkeypatch.setenv("PARLEY_WEBHOOK_TIMEOUT", "0.3")
        monkeypatch.setenv("PARLEY_WEBHOOK_RETRY_DELAY", "60")  # the back-off, and each delivery's own next try
        get_settings.cache_clear()
        admin = make_key(["admin"])
        try:
            with ServerThread(create_app(get_settings())) as server, \
                    httpx.Client(base_url=server.url, timeout=60) as http:
                slow = subscribe(http, admin, hanging.url("/hooks/slow"))
                fine = subscribe(http, admin, receiver.url("/hooks/fine"))
                for _ in range(WEBHOOK_TIMEOUTS_BEFORE_BACKOFF):
                    assert http.post(f"/v1/webhooks/{slow['id']}/test", headers=auth(admin)).status_code == 202
                eventually(lambda: http.get(f"/v1/webhooks/{slow['id']}", headers=auth(admin)).json()["webhook"][
                    "backedOffUntil"] is not None, "the slow receiver's webhook is backed off")
                tried = len(hanging.deliveries)
                held = http.post(f"/v1/webhooks/{slow['id']}/test", headers=auth(admin)).json()["delivery"]
                assert http.post(f"/v1/webhooks/{fine['id']}/test", headers=auth(admin)).status_code == 202
                receiver.got(1, "the workspace's other webhook is not backed off")
                eventually(lambda: deliveries(http, admin, webhook=fine["id"])[0]["status"] == "delivered", "logged")
                later = http.get(f"/v1/webhooks/deliveries/{held['id']}", headers=auth(admin)).json()["delivery"]
                assert later["status"] == "pending" and later["attemptCount"] == 0  # held, unsent
                assert len(hanging.deliveries) == tried
                assert http.get(f"/v1/webhooks/{fine['id']}", headers=auth(admin)).json()["webhook"][
                    "backedOffUntil"] is None
        finally:
            release.set()


def test_test_pings_are_rate_limited_per_workspace(hooked, admin, receiver, make_key):
    hook = subscribe(hooked, admin, receiver.url())
    allowed = int(WEBHOOK_TEST_RATE.split("/")[0])
    for _ in range(allowed):
        assert hooked.post(f"/v1/webhooks/{hook['id']}/test", headers=auth(admin)).status_code == 202
    refused = hooked.post(f"/v1/webhooks/{hook['id']}/test", headers=auth(admin))
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limited", refused.text
    assert int(refused.headers["retry-after"]) >= 1
    other = make_key(["admin"], user="bob", workspace="ws2")
    theirs = subscribe(hooked, other, receiver.url())
    assert hooked.post(f"/v1/webhooks/{theirs['id']}/test", headers=auth(other)).status_code == 202


# --- secrets sealed at rest (issue 45) ---------------------------------------------------------------------------


def _stored(settings, webhook_id: str) -> dict:
    """The webhook's document as MongoDB holds it."""
    with MongoClient(settings.mongodb_uri) as client:
        return client[settings.mongodb_db].webhooks.find_one({"_id": webhook_id})


def test_a_webhooks_secret_is_not_in_the_database_and_a_key_rotation_seals_it_again(parley_env, monkeypatch,
                                                                                    receiver, make_key):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    monkeypatch.setenv("PARLEY_WEBHOOK_URLS", receiver.url())
    monkeypatch.setenv("PARLEY_WEBHOOK_POLL", "0.05")
    admin = make_key(["admin"])

    def serving(keys: str, then) -> None:
        monkeypatch.setenv("PARLEY_ENCRYPTION_KEYS", keys)
        get_settings.cache_clear()
        with ServerThread(create_app(get_settings())) as server, \
                httpx.Client(base_url=server.url, timeout=60) as http:
            then(http)

    hook: dict = {}
    serving(old, lambda http: hook.update(subscribe(http, admin, receiver.url())))
    secret, raw = hook["secret"], _stored(parley_env, hook["id"])
    key_part = secret.removeprefix("whsec_")
    assert secret not in str(raw) and key_part not in str(raw) and key_part[:16] not in str(raw)
    [sealed] = raw["secrets"]
    assert "secret" not in sealed and Fernet(old).decrypt(sealed["sealed"].encode()).decode() == secret

    def pinged(count: int):
        def then(http: httpx.Client) -> None:
            assert http.post(f"/v1/webhooks/{hook['id']}/test", headers=auth(admin)).status_code == 202
            assert receiver.got(count)[-1].verifies(secret)
        return then

    serving(f"{new},{old}", pinged(1))  # the old key opens it; the worker sealed it again under the new one
    [resealed] = _stored(parley_env, hook["id"])["secrets"]
    assert resealed["key"] != sealed["key"] and Fernet(new).decrypt(resealed["sealed"].encode()).decode() == secret
    serving(new, pinged(2))  # the old key dropped: still signed with the same secret


    def unreadable(http: httpx.Client) -> None:  # a key that did not seal it: no signature, and the log says why
        ping = http.post(f"/v1/webhooks/{hook['id']}/test", headers=auth(admin)).json()["delivery"]
        read = lambda: http.get(f"/v1/webhooks/deliveries/{ping['id']}", headers=auth(admin)).json()["delivery"]
        eventually(lambda: read()["attemptCount"] >= 1, "the attempt is logged")
        assert read()["attempts"][0]["error"].startswith("secret_unreadable"), read()

    serving(Fernet.generate_key().decode(), unreadable)
    assert len(receiver.deliveries) == 2


# --- where a receiver's name leads (issue 45) --------------------------------------------------------------------


def _resolving(monkeypatch, answers: dict[str, list[list[str]]]) -> list[str]:
    """Make `core.outbound.resolve` answer each name of `answers` with its lists in turn (the last one then on), any
    other as before; the names asked, in order."""
    asked: list[str] = []
    real = outbound.resolve

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        if host in answers:
            turns = answers[host]
            return turns.pop(0) if len(turns) > 1 else turns[0]
        return await real(host, port)

    monkeypatch.setattr(outbound, "resolve", resolve)
    return asked


def test_a_name_that_leads_to_a_private_address_is_refused_unless_its_network_is_named(parley_env, monkeypatch,
                                                                                       receiver, make_key):
    asked = _resolving(monkeypatch, {"hooks.example": [["127.0.0.1"]]})
    named = f"http://hooks.example:{receiver.port}/hooks"
    monkeypatch.setenv("PARLEY_WEBHOOK_URLS", f"{named},http://localhost:{receiver.port}/hooks")
    monkeypatch.setenv("PARLEY_WEBHOOK_POLL", "0.05")
    get_settings.cache_clear()
    admin = make_key(["admin"])
    with ServerThread(create_app(get_settings())) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        refused = http.post("/v1/webhooks", json={"url": named}, headers=auth(admin))
        assert refused.status_code == 400 and refused.json()["code"] == "webhook_url_not_allowed", refused.text
        assert "127.0.0.1" in refused.json()["error"] and "PARLEY_OUTBOUND_NETWORKS" in refused.json()["error"]
        assert "hooks.example" in asked
        local = subscribe(http, admin, f"http://localhost:{receiver.port}/hooks")  # the allow-list names localhost
        assert http.post(f"/v1/webhooks/{local['id']}/test", headers=auth(admin)).status_code == 202
        receiver.got(1, "localhost, named by the allow-list, is reached")

    monkeypatch.setenv("PARLEY_OUTBOUND_NETWORKS", "127.0.0.0/8")
    get_settings.cache_clear()
    with ServerThread(create_app(get_settings())) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        hook = subscribe(http, admin, named)
        assert http.post(f"/v1/webhooks/{hook['id']}/test", headers=auth(admin)).status_code == 202
        got = receiver.got(2, "the name the resolver led to 127.0.0.1 is reached there")[-1]
        assert got.headers["host"] == f"hooks.example:{receiver.port}" and got.verifies(hook["secret"])


def test_the_address_checked_is_the_one_connected_to(parley_env, monkeypatch, receiver, make_key):
    """A name that leads to a public address when it is checked, and to a loopback one at the attempt (DNS
    rebinding), is refused at the attempt: the connection goes only to an address checked."""
    _resolving(monkeypatch, {"hooks.example": [["93.184.215.14"], ["127.0.0.1"]]})
    named = f"http://hooks.example:{receiver.port}/hooks"
    monkeypatch.setenv("PARLEY_WEBHOOK_URLS", named)
    monkeypatch.setenv("PARLEY_WEBHOOK_POLL", "0.05")
    get_settings.cache_clear()
    admin = make_key(["admin"])
    with ServerThread(create_app(get_settings())) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        hook = subscribe(http, admin, named)
        ping = http.post(f"/v1/webhooks/{hook['id']}/test", headers=auth(admin)).json()["delivery"]
        read = lambda: http.get(f"/v1/webhooks/deliveries/{ping['id']}", headers=auth(admin)).json()["delivery"]
        eventually(lambda: read()["attemptCount"] >= 1, "the attempt is logged")
        assert read()["attempts"][0]["error"].startswith("address_refused"), read()
        assert receiver.deliveries == []
