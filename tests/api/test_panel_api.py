"""Panel mode over HTTP, driven by the official openai SDK against Parley backed by the scripted model server."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from parley.api.main import create_app
from parley.core.embedded import EmbeddedServices
from parley.core.settings import get_settings
from parley.llm.prices import BUILTIN_PRICES, price_of
from tests.support.servers import ServerThread
from tests.support.wait import eventually

PANEL = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]
ARBITRATOR = "anthropic:claude-opus-4-5"
QUESTION = [{"role": "user", "content": "Explain the CAP theorem"}]


@pytest.fixture
def server(parley_env):
    parley_env.parley_debate_models = list(PANEL)
    parley_env.parley_arbitrator_model = ARBITRATOR
    with ServerThread(create_app(parley_env)) as running:
        yield running


@pytest.fixture
def key(server, make_key, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    return make_key(["chat", "admin"])


@pytest.fixture
def client(server, key):
    with openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=30) as sdk:
        yield sdk


@pytest.fixture
def api(server, key):
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        yield http


def meta(response) -> dict:
    return response.model_extra["_meta"]


def script_panel(llm, **replies: str) -> None:
    for model, reply in replies.items():
        llm.script(model=model, reply=reply)


def balance(sync_db, workspace: str = "ws1") -> float:
    return sync_db.workspaces.find_one({"_id": workspace})["creditUsd"]


# --- debate ---------------------------------------------------------------------------------


def test_debate_preset_answers_with_the_arbitrator(client, llm, sync_db):
    script_panel(llm, **{"gpt-5": "Pick two.", "claude-sonnet-4-5": "Trade-offs.", "gemini-2.5-pro": "Partitions."})
    llm.script(model="claude-opus-4-5", reply="The synthesis.")
    resp = client.chat.completions.create(model="router/debate", messages=QUESTION)
    assert resp.object == "chat.completion" and resp.id.startswith("chatcmpl-")
    assert resp.model == ARBITRATOR
    assert resp.choices[0].message.content == "The synthesis."
    assert resp.choices[0].message.role == "assistant"
    m = meta(resp)
    assert m["modelUsed"] == ARBITRATOR and m["routerMode"] == "debate"
    assert [p["model"] for p in m["debate"]["panelists"]] == PANEL
    assert all(p["success"] and p["tokens"] > 0 and p["cost"] > 0 and "error" not in p
               for p in m["debate"]["panelists"])
    assert set(m["debate"]["panelists"][0]) == {"model", "tokens", "cachedTokens", "reasoningTokens", "cost",
                                                "latencyMs", "success"}
    assert m["debate"]["arbitrator"] == ARBITRATOR
    assert m["tokensUsed"] == m["debate"]["totalTokens"] == resp.usage.total_tokens
    assert m["cost"] == pytest.approx(m["debate"]["totalCost"])
    assert m["cost"] > sum(p["cost"] for p in m["debate"]["panelists"])  # the arbitrator costs too
    assert resp.usage.prompt_tokens + resp.usage.completion_tokens == resp.usage.total_tokens
    # The arbitrator saw the answers anonymised, never the models' names.
    arbitration = next(r for r in llm.requests if r["model"] == "claude-opus-4-5")
    prompt = json.dumps(arbitration["messages"])
    assert "Answer A" in prompt and "Answer C" in prompt and "Pick two." in prompt
    assert not any(name in prompt for name in ("gpt-5", "claude-sonnet", "gemini"))
    assert not arbitration.get("stream")  # no one reads it as it is written: asked for whole
    rows = list(sync_db.usage.find({"requestId": resp.id}))
    assert {r["model"] for r in rows} == set(PANEL) | {ARBITRATOR}
    assert all(r["mode"] == "debate" and r["workspace"] == "ws1" and r["user"] == "alice" for r in rows)
    assert sum(r["costUsd"] for r in rows) == pytest.approx(m["cost"])


def test_debate_streams_arbitrator_tokens_as_chunks(client, llm):
    llm.script(model="claude-opus-4-5", reply="Consistency, availability, partition tolerance: pick two.")
    stream = client.chat.completions.create(model="router/debate", messages=QUESTION, stream=True)
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" and c.model == ARBITRATOR for c in chunks)
    assert len(chunks) > 3  # token by token, not one blob
    assert next(r for r in llm.requests if r["model"] == "claude-opus-4-5")["stream"] is True
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "Consistency, availability, partition tolerance: pick two."
    assert chunks[0].choices[0].delta.role == "assistant"
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop" and last.usage.total_tokens > 0
    m = last.model_extra["_meta"]
    assert m["routerMode"] == "debate" and len(m["debate"]["panelists"]) == 3
    assert m["tokensUsed"] == last.usage.total_tokens


def test_stream_reports_panelist_progress_as_sse_comments(api, llm):
    llm.script(model="gemini-2.5-pro", status=401)
    with api.stream("POST", "/v1/chat/completions",
                    json={"model": "router/debate", "messages": QUESTION, "stream": True}) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in resp.iter_lines() if line]
    comments = [line for line in lines if line.startswith(":")]
    assert any("panelist openai:gpt-5 answered" in c for c in comments)
    assert any("panelist google:gemini-2.5-pro failed: auth" in c for c in comments)
    data = [line for line in lines if line.startswith("data:")]
    assert data[-1] == "data: [DONE]"
    # Progress comes before the first token of the answer.
    first_token = lines.index(next(line for line in lines if line.startswith("data:")))
    assert lines.index(next(c for c in comments if "answered" in c)) < first_token


def test_one_failing_panelist_still_answers(client, llm):
    llm.script(model="claude-sonnet-4-5", status=401)
    resp = client.chat.completions.create(model="router/debate", messages=QUESTION)
    panelists = meta(resp)["debate"]["panelists"]
    assert [p["success"] for p in panelists] == [True, False, True]
    assert panelists[1] == {"model": "anthropic:claude-sonnet-4-5", "tokens": 0, "cachedTokens": 0,
                            "reasoningTokens": 0, "cost": 0.0,
                            "latencyMs": panelists[1]["latencyMs"], "success": False, "error": "auth"}
    arbitration = next(r for r in llm.requests if r["model"] == "claude-opus-4-5")
    assert "Answer B" in json.dumps(arbitration["messages"]) and "Answer C" not in json.dumps(arbitration["messages"])


def test_two_failing_panelists_is_502_naming_each(client, llm, sync_db):
    llm.script(model="claude-sonnet-4-5", status=401)
    llm.script(model="gemini-2.5-pro", status=404)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="router/debate", messages=QUESTION)
    err = caught.value
    assert err.status_code == 502
    assert err.body["code"] == "too_few_panelists" and err.body["type"] == "upstream_error"
    message = err.body["message"]
    assert "openai:gpt-5: answered" in message
    assert "anthropic:claude-sonnet-4-5: auth" in message and "google:gemini-2.5-pro: other (HTTP 404" in message
    assert not any(r["model"] == "claude-opus-4-5" for r in llm.requests)  # no arbitration was paid for
    # Only the panelist that answered is charged; the rest of the reservation went back.
    used = sum(r["costUsd"] for r in sync_db.usage.find())
    assert used > 0 and balance(sync_db) == pytest.approx(10.0 - used)


def test_streamed_debate_failure_arrives_as_an_error_event(client, llm):
    llm.script(model="claude-sonnet-4-5", status=401)
    llm.script(model="gemini-2.5-pro", status=401)
    stream = client.chat.completions.create(model="router/debate", messages=QUESTION, stream=True)
    with pytest.raises(openai.APIError, match="Only 1 of 3 panelists answered"):
        list(stream)


def test_arbitrator_falls_back_to_the_next_candidate(client, api, llm):
    api.post("/v1/routers", json={"id": "strict", "models": PANEL, "arbitrator": "openai:gpt-4o",
                                  "debate": True}).raise_for_status()
    llm.script(model="gpt-4o", status=503)
    llm.script(model="claude-opus-4-5", reply="Second opinion wins.")
    resp = client.chat.completions.create(model="router/strict", messages=QUESTION)
    assert resp.model == ARBITRATOR and resp.choices[0].message.content == "Second opinion wins."
    assert meta(resp)["debate"]["arbitrator"] == ARBITRATOR


def test_an_arbitrator_failing_before_its_first_token_is_asked_once_more(client, llm):
    llm.script(model="claude-opus-4-5", status=503, times=1)  # a transient failure, nothing streamed
    llm.script(model="claude-opus-4-5", reply="Asked again, it answers.")
    resp = client.chat.completions.create(model="router/debate", messages=QUESTION)
    assert resp.model == ARBITRATOR and resp.choices[0].message.content == "Asked again, it answers."
    assert meta(resp)["debate"]["arbitrator"] == ARBITRATOR
    assert sum(r["model"] == "claude-opus-4-5" for r in llm.requests) == 2


def test_every_arbitrator_failing_answers_with_the_labelled_answers(client, llm):
    llm.script(model="claude-opus-4-5", status=500)
    resp = client.chat.completions.create(model="router/debate", messages=QUESTION)
    assert resp.model == "panel" and all(f"**{model}**" in resp.choices[0].message.content for model in PANEL)
    status = meta(resp)["status"]
    assert status["outcome"] == "degraded" and status["reason"] == "arbitrator_failed"
    assert status["failed"] == [{"model": ARBITRATOR, "role": "arbitrator", "error": "server",
                                 "detail": status["failed"][0]["detail"]}]


def test_every_arbitrator_failing_is_502_when_the_answer_must_be_json(client, llm):
    llm.script(model="claude-opus-4-5", status=500)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="router/debate", messages=QUESTION,
                                       response_format={"type": "json_object"})
    assert caught.value.status_code == 502 and caught.value.body["code"] == "arbitrator_failed"
    assert "anthropic:claude-opus-4-5: server" in caught.value.body["message"]


def test_panelist_timeouts_are_classified(parley_env, llm, make_key, sync_db):
    parley_env.parley_debate_models = list(PANEL)
    parley_env.parley_arbitrator_model = ARBITRATOR
    # Long enough that the panelists who answer never come near it, however loaded the machine.
    parley_env.parley_request_timeout = 2
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(model="gemini-2.5-pro", hang=True)
    with ServerThread(create_app(parley_env)) as running:
        sdk = openai.OpenAI(base_url=running.url + "/v1", api_key=make_key(["chat"]), max_retries=0)
        resp = sdk.chat.completions.create(model="router/debate", messages=QUESTION)
    gemini = meta(resp)["debate"]["panelists"][2]
    assert gemini["success"] is False and gemini["error"] == "timeout"


# --- panel ----------------------------------------------------------------------------------


def test_panel_returns_every_answer_labelled(client, llm):
    script_panel(llm, **{"gpt-5": "The CAP theorem states...", "claude-sonnet-4-5": "CAP stands for...",
                         "gemini-2.5-pro": "In distributed systems..."})
    before = int(time.time() * 1000)
    resp = client.chat.completions.create(model="router/debate", messages=QUESTION, extra_body={"panel": True})
    assert resp.model == "panel" and resp.id.startswith("panel-") and int(resp.id[6:]) >= before
    assert resp.choices[0].message.content == (
        "**openai:gpt-5**\n\nThe CAP theorem states...\n\n---\n\n"
        "**anthropic:claude-sonnet-4-5**\n\nCAP stands for...\n\n---\n\n"
        "**google:gemini-2.5-pro**\n\nIn distributed systems..."
    )
    m = meta(resp)
    assert m["modelUsed"] == "panel" and m["routerMode"] == "panel" and "debate" not in m
    assert [p["model"] for p in m["panel"]["models"]] == PANEL
    assert m["panel"]["totalTokens"] == m["tokensUsed"] == sum(p["tokens"] for p in m["panel"]["models"])
    assert not any(r["model"] == "claude-opus-4-5" for r in llm.requests)


def test_panel_leaves_failed_panelists_out_of_the_content(client, llm):
    script_panel(llm, **{"gpt-5": "First.", "gemini-2.5-pro": "Third."})
    llm.script(model="claude-sonnet-4-5", status=429)
    resp = client.chat.completions.create(model="router/debate", messages=QUESTION, extra_body={"panel": True})
    assert resp.choices[0].message.content == "**openai:gpt-5**\n\nFirst.\n\n---\n\n**google:gemini-2.5-pro**\n\nThird."
    claude = meta(resp)["panel"]["models"][1]
    assert claude["success"] is False and claude["error"] == "rate_limit"
    assert sum(1 for r in llm.requests if r["model"] == "claude-sonnet-4-5") == 2  # retried once, then given up


def test_panel_streams_each_block_in_order(client, llm):
    script_panel(llm, **{"gpt-5": "A.", "claude-sonnet-4-5": "B.", "gemini-2.5-pro": "C."})
    chunks = list(client.chat.completions.create(model="router/debate", messages=QUESTION, stream=True,
                                                 extra_body={"panel": True}))
    contents = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert contents == ["**openai:gpt-5**\n\nA.", "\n\n---\n\n**anthropic:claude-sonnet-4-5**\n\nB.",
                        "\n\n---\n\n**google:gemini-2.5-pro**\n\nC."]
    assert all(c.model == "panel" and c.id.startswith("panel-") for c in chunks)
    assert chunks[-1].model_extra["_meta"]["routerMode"] == "panel"


# --- routers --------------------------------------------------------------------------------


def test_router_crud(api):
    created = api.post("/v1/routers", json={"id": "support", "models": PANEL, "arbitratorPrompt": "Be brief."})
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["id"] == "support" and body["object"] == "router" and body["models"] == PANEL
    assert body["debate"] is False and body["panelSize"] == 3 and body["arbitratorPrompt"] == "Be brief."
    assert api.post("/v1/routers", json={"id": "support", "models": PANEL}).status_code == 409
    listed = api.get("/v1/routers").json()
    assert [r["id"] for r in listed["data"]] == ["debate", "quality", "budget", "support"]
    assert listed["data"][0]["preset"] is True and listed["data"][3]["depth"] == "full"
    assert api.get("/v1/routers/debate").json()["models"] == PANEL
    patched = api.patch("/v1/routers/support", json={"debate": True, "systemPrompt": "Answer in French."})
    assert patched.status_code == 200 and patched.json()["debate"] is True
    assert api.get("/v1/routers/support").json()["systemPrompt"] == "Answer in French."
    assert api.delete("/v1/routers/support").json() == {"id": "support", "object": "router.deleted", "deleted": True}
    missing = api.get("/v1/routers/support")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "router_not_found"
    assert missing.json()["error"]["type"] == "not_found_error"


def test_router_writes_are_validated(api):
    cases = [
        {"id": "x", "models": []},
        {"id": "bad id!", "models": PANEL},
        {"id": "x", "models": PANEL, "panelSize": 9},
        {"id": "x", "models": PANEL, "depth": "deep"},
        {"id": "x", "models": PANEL, "debateMode": True},
    ]
    for body in cases:
        resp = api.post("/v1/routers", json=body)
        assert resp.status_code == 400, body
        assert resp.json()["error"]["type"] == "invalid_request_error"
    assert api.patch("/v1/routers/debate", json={"debate": False}).status_code == 409
    assert api.delete("/v1/routers/debate").status_code == 409
    assert api.post("/v1/routers", json={"id": "debate", "models": PANEL}).status_code == 409
    for preset in ("quality", "budget"):
        assert api.post("/v1/routers", json={"id": preset, "models": PANEL}).status_code == 409
        assert api.patch(f"/v1/routers/{preset}", json={"debate": False}).status_code == 409
    assert api.patch("/v1/routers/nope", json={"debate": True}).status_code == 404
    # nothing stored by the failures: the presets only
    assert [r["id"] for r in api.get("/v1/routers").json()["data"]] == ["debate", "quality", "budget"]


def test_enabling_debate_needs_three_distinct_families(api):
    same_family = ["openai:gpt-5", "openai:gpt-5-mini", "anthropic:claude-sonnet-4-5"]
    resp = api.post("/v1/routers", json={"id": "thin", "models": same_family, "debate": True})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "too_few_families"
    assert "openai:gpt-5-mini (family gpt-5)" in resp.json()["error"]["message"]
    assert api.post("/v1/routers", json={"id": "thin", "models": same_family}).status_code == 201
    assert api.patch("/v1/routers/thin", json={"debate": True}).status_code == 400
    api.post("/v1/routers", json={"id": "wide", "models": PANEL, "debate": True}).raise_for_status()
    shrink = api.patch("/v1/routers/wide", json={"models": PANEL[:2]})
    assert shrink.status_code == 400 and api.get("/v1/routers/wide").json()["models"] == PANEL


def test_routers_need_the_admin_scope(server, make_key):
    chat_only = make_key(["chat"])
    resp = httpx.get(server.url + "/v1/routers", headers={"Authorization": f"Bearer {chat_only}"})
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "scope_denied"
    assert httpx.get(server.url + "/v1/routers").status_code == 401


def test_debate_router_obeys_debate_false(client, api, llm):
    api.post("/v1/routers", json={"id": "dr", "models": PANEL, "debate": True}).raise_for_status()
    llm.script(model="gpt-5", reply="Just me.")
    resp = client.chat.completions.create(model="router/dr", messages=QUESTION, extra_body={"debate": False})
    assert resp.model == "openai:gpt-5" and resp.choices[0].message.content == "Just me."
    assert meta(resp)["routerMode"] == "fallback" and "debate" not in meta(resp)
    assert [r["model"] for r in llm.requests] == ["gpt-5"]


def test_debate_true_turns_debate_on_for_a_plain_router(client, api, llm):
    api.post("/v1/routers", json={"id": "plain", "models": PANEL}).raise_for_status()
    plain = client.chat.completions.create(model="router/plain", messages=QUESTION)
    assert meta(plain)["routerMode"] == "fallback" and len(llm.requests) == 1
    debated = client.chat.completions.create(model="router/plain", messages=QUESTION, extra_body={"debate": True})
    assert meta(debated)["routerMode"] == "debate" and debated.model == ARBITRATOR


def test_plain_router_falls_back_down_the_list(client, api, llm):
    api.post("/v1/routers", json={"id": "chain", "models": PANEL, "systemPrompt": "Be terse."}).raise_for_status()
    llm.script(model="gpt-5", status=500)
    llm.script(model="claude-sonnet-4-5", status=401)
    llm.script(model="gemini-2.5-pro", reply="Third time lucky.")
    resp = client.chat.completions.create(model="router/chain", messages=QUESTION)
    assert resp.model == "google:gemini-2.5-pro" and resp.choices[0].message.content == "Third time lucky."
    assert meta(resp)["fallbacks"] == [{"model": "openai:gpt-5", "error": "server"},
                                       {"model": "anthropic:claude-sonnet-4-5", "error": "auth"}]
    assert llm.requests[-1]["messages"][0] == {"role": "system", "content": "Be terse."}


def test_debate_on_a_router_without_enough_families_is_400(client, api):
    api.post("/v1/routers", json={"id": "duo", "models": ["openai:gpt-5", "openai:gpt-5-mini"]}).raise_for_status()
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="router/duo", messages=QUESTION, extra_body={"debate": True})
    assert caught.value.body["code"] == "too_few_families"
    assert "openai:gpt-5 (family gpt-5), openai:gpt-5-mini (family gpt-5)" in caught.value.body["message"]


# --- same-family panels (allowSameFamily) ---------------------------------------------------

# gpt-4o, not gpt-5: langchain-openai drops the temperature of gpt-5 reasoning models, which sample anyway.
SOLO_SEATS = ["openai:gpt-4o", "openai:gpt-4o #2", "openai:gpt-4o #3"]


def test_a_router_allowing_same_family_debates_with_one_model(client, api, llm):
    created = api.post("/v1/routers", json={"id": "solo", "models": ["openai:gpt-4o"], "debate": True,
                                            "allowSameFamily": True})
    assert created.status_code == 201, created.text
    assert created.json()["allowSameFamily"] is True
    llm.script(model="claude-opus-4-5", reply="One model, three samples.")
    resp = client.chat.completions.create(model="router/solo", messages=QUESTION)
    assert resp.choices[0].message.content == "One model, three samples."
    debate = meta(resp)["debate"]
    assert debate["sameFamily"] is True and debate["arbitrator"] == ARBITRATOR
    assert [p["model"] for p in debate["panelists"]] == SOLO_SEATS
    assert all(p["success"] and p["cost"] > 0 for p in debate["panelists"])  # priced as the real gpt-4o
    samples = [r for r in llm.requests if r["model"] == "gpt-4o"]
    assert len(samples) == 3 and len({r["temperature"] for r in samples}) == 3
    arbitration = json.dumps(next(r for r in llm.requests if r["model"] == "claude-opus-4-5"))
    assert "Answer C" in arbitration and "#2" not in arbitration and "gpt-4o" not in arbitration


def test_a_same_family_raw_panel_has_one_heading_per_seat(client, api, llm):
    api.post("/v1/routers", json={"id": "solo", "models": ["openai:gpt-4o"], "allowSameFamily": True}
             ).raise_for_status()
    resp = client.chat.completions.create(model="router/solo", messages=QUESTION, extra_body={"panel": True})
    content = resp.choices[0].message.content
    headings = [block.split("\n", 1)[0] for block in content.split("\n\n---\n\n")]
    assert headings == [f"**{seat}**" for seat in SOLO_SEATS]
    assert meta(resp)["panel"]["sameFamily"] is True
    assert [p["model"] for p in meta(resp)["panel"]["models"]] == SOLO_SEATS


def test_distinct_family_panels_do_not_claim_same_family(client, api, llm):
    api.post("/v1/routers", json={"id": "wide", "models": PANEL, "debate": True, "allowSameFamily": True}
             ).raise_for_status()
    resp = client.chat.completions.create(model="router/wide", messages=QUESTION)
    assert "sameFamily" not in meta(resp)["debate"]
    assert [p["model"] for p in meta(resp)["debate"]["panelists"]] == PANEL


def test_allow_same_family_skips_the_family_check_and_only_it(api):
    same_family = ["openai:gpt-5", "openai:gpt-5-mini"]
    refused = api.post("/v1/routers", json={"id": "thin", "models": same_family, "debate": True})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "too_few_families"
    allowed = api.post("/v1/routers", json={"id": "thin", "models": same_family, "debate": True,
                                            "allowSameFamily": True})
    assert allowed.status_code == 201 and allowed.json()["debate"] is True
    # Turning the flag off again would leave a debate router that cannot seat its panel.
    off = api.patch("/v1/routers/thin", json={"allowSameFamily": False})
    assert off.status_code == 400 and off.json()["error"]["code"] == "too_few_families"
    assert api.patch("/v1/routers/thin", json={"allowSameFamily": None}).status_code == 400
    assert api.get("/v1/routers/thin").json()["allowSameFamily"] is True
    api.post("/v1/routers", json={"id": "plain", "models": same_family}).raise_for_status()
    assert api.get("/v1/routers/plain").json()["allowSameFamily"] is False
    assert api.patch("/v1/routers/plain", json={"debate": True}).status_code == 400
    assert api.patch("/v1/routers/plain", json={"debate": True, "allowSameFamily": True}).status_code == 200


def test_the_configured_preset_keeps_the_family_rule(api):
    preset = api.get("/v1/routers/debate").json()
    assert preset["models"] == PANEL and preset["allowSameFamily"] is False


@pytest.fixture
def embedded_server(parley_env, monkeypatch, llm):
    """Parley as a fresh install runs it (no endpoint: the preset is the embedded model), with the scripted
    server standing in for that model."""
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.setenv("PARLEY_LOCAL_BASE_URL", llm.base_url)
    get_settings.cache_clear()
    with ServerThread(create_app(get_settings(), services=EmbeddedServices())) as running:
        yield running


def test_the_preset_debates_on_a_fresh_install(embedded_server, make_key, llm):
    headers = {"Authorization": f"Bearer {make_key(['chat', 'admin'])}"}
    with httpx.Client(base_url=embedded_server.url, headers=headers, timeout=30) as http:
        preset = http.get("/v1/routers/debate").json()
        assert preset["models"] == ["local:smollm2"] and preset["allowSameFamily"] is True
        resp = http.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["model"] == "local:smollm2" and body["choices"][0]["message"]["content"]
    debate = body["_meta"]["debate"]
    assert debate["sameFamily"] is True and debate["arbitrator"] == "local:smollm2"
    assert [p["model"] for p in debate["panelists"]] == ["local:smollm2", "local:smollm2 #2", "local:smollm2 #3"]
    assert {r["model"] for r in llm.requests} == {"smollm2"} and len(llm.requests) == 4
    assert llm.most_at_once == 1  # the embedded model answers one call at a time: Parley sends them so


def test_the_embedded_models_panelists_wait_in_line_and_the_stream_says_who_waits(parley_env, monkeypatch, llm,
                                                                                    make_key):
    # Three panelists asked at once of a model that answers one call at a time: they are sent one after another,
    # each given its whole read timeout (1 s) from its sending, though the last is answered 1.5 s after the first.
    monkeypatch.setenv("PARLEY_REQUEST_TIMEOUT", "1")
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.setenv("PARLEY_LOCAL_BASE_URL", llm.base_url)
    get_settings.cache_clear()
    llm.script(latency=0.5)
    headers = {"Authorization": f"Bearer {make_key(['chat'])}"}
    with ServerThread(create_app(get_settings(), services=EmbeddedServices())) as running, \
            httpx.Client(base_url=running.url, headers=headers, timeout=60) as http:
        resp = http.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION,
                                                       "stream": True})
    assert resp.status_code == 200, resp.text
    comments = [line[2:] for line in resp.text.splitlines() if line.startswith(": ")]
    assert "local:smollm2 #2 waits for local:smollm2 (#1 in line)" in comments, comments
    assert "local:smollm2 #3 waits for local:smollm2 (#2 in line)" in comments, comments
    assert "data: [DONE]" in resp.text and '"error"' not in resp.text
    assert llm.most_at_once == 1 and len(llm.requests) == 4
    (_, first_end), _, (_, third_end), _ = llm.spans
    assert third_end - first_end > 1.0


# --- plain models and errors ----------------------------------------------------------------


def test_plain_model_goes_straight_to_it(client, llm, sync_db):
    llm.script(model="gpt-4o", reply="Direct answer.")
    resp = client.chat.completions.create(model="openai:gpt-4o", messages=QUESTION, max_tokens=50, temperature=0.2)
    assert resp.model == "openai:gpt-4o" and resp.choices[0].message.content == "Direct answer."
    assert resp.usage.completion_tokens == 2 and resp.usage.prompt_tokens > 0
    assert meta(resp)["routerMode"] == "direct" and meta(resp)["cost"] > 0
    sent = llm.requests[-1]
    assert sent["model"] == "gpt-4o" and sent["temperature"] == 0.2 and sent["max_completion_tokens"] == 50
    assert [r["mode"] for r in sync_db.usage.find({"requestId": resp.id})] == ["chat"]
    chunks = list(client.chat.completions.create(model="openai:gpt-4o", messages=QUESTION, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Direct answer."
    assert all(c.model == "openai:gpt-4o" for c in chunks) and chunks[-1].usage.completion_tokens == 2


def test_unknown_router_is_404(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="router/nope", messages=QUESTION)
    assert caught.value.body["code"] == "router_not_found" and "router/nope" in caught.value.body["message"]


@pytest.mark.parametrize("body, field", [
    ({"model": "router/debate"}, "messages"),
    ({"model": "router/debate", "messages": []}, "messages"),
    ({"model": "router/debate", "messages": [{"role": "wizard", "content": "hi"}]}, "role"),
    ({"model": "router/debate", "messages": QUESTION, "temperature": 5}, "temperature"),
    ({"model": "router/debate", "messages": QUESTION, "n": 2}, "n"),
    ({"model": "openai:gpt-5", "messages": QUESTION, "debate": True}, "router"),
])
def test_bad_bodies_are_400_in_openai_shape(api, llm, body, field):
    resp = api.post("/v1/chat/completions", json=body)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and field in error["message"]
    assert llm.requests == []


def test_chat_needs_a_key_with_the_chat_scope(server, make_key):
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="pk_wrong", max_retries=0).chat.completions.create(
            model="router/debate", messages=QUESTION)
    other = openai.OpenAI(base_url=server.url + "/v1", api_key=make_key(["debate"]), max_retries=0)
    with pytest.raises(openai.PermissionDeniedError):
        other.chat.completions.create(model="router/debate", messages=QUESTION)


# --- credits --------------------------------------------------------------------------------


def _debate_reservation(max_tokens: int) -> float:
    """What a debate of the preset reserves at max_tokens output, the question's own tokens left out: each panelist
    at its own price, the arbitrator (claude-opus-4-5) reading their answers (with the prompt margin of 1.25)."""
    panelists = sum(price_of(BUILTIN_PRICES[m.split(":")[1]]).cost(0, max_tokens) for m in PANEL)
    return panelists + price_of(BUILTIN_PRICES["claude-opus-4-5"]).cost(int(3 * max_tokens * 1.25), max_tokens)


def test_credit_is_reserved_during_a_debate_and_settled_after(server, key, llm, sync_db):
    llm.script(model="gpt-5", hold="gpt-5", reply="Slow.")  # the debate waits there while the test reads
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)
    box = {}
    worker = threading.Thread(target=lambda: box.update(resp=sdk.chat.completions.create(
        model="router/debate", messages=QUESTION, max_tokens=1000)))
    worker.start()
    llm.wait_held("gpt-5")
    during = balance(sync_db)
    llm.release("gpt-5")
    worker.join()
    # Four calls, each at its own model's rate: 3 panelists, and the arbitrator reading their answers.
    assert 10.0 - during == pytest.approx(_debate_reservation(1000), rel=0.05)
    assert balance(sync_db) == pytest.approx(10.0 - meta(box["resp"])["cost"])


def test_a_failure_between_reserving_and_starting_gives_the_credit_back(server, api, llm, sync_db):
    # The run settles what it reserved however it ends, but a request can fail before its run exists (here the
    # database refuses the run record: a unique index on titles the test adds). That credit used to stay taken.
    llm.script(reply="Fine.")
    question = [{"role": "user", "content": "The same question twice?"}]
    first = api.post("/v1/chat/completions", json={"model": "claude-opus-4-5", "messages": question, "max_tokens": 1000})
    assert first.status_code == 200, first.text
    sync_db.runs.create_index("title", unique=True)
    before = balance(sync_db)
    again = api.post("/v1/chat/completions", json={"model": "claude-opus-4-5", "messages": question,
                                                   "max_tokens": 100_000})
    assert again.status_code == 500 and again.json()["error"]["code"] == "internal_error", again.text
    assert balance(sync_db) == pytest.approx(before)


def test_panel_reserves_three_calls(server, key, llm, sync_db):
    llm.script(model="gpt-5", hold="gpt-5", reply="Slow.")
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)
    worker = threading.Thread(target=lambda: sdk.chat.completions.create(
        model="router/debate", messages=QUESTION, max_tokens=1000, extra_body={"panel": True}))
    worker.start()
    llm.wait_held("gpt-5")
    during = balance(sync_db)
    llm.release("gpt-5")
    worker.join()
    each = sum(price_of(BUILTIN_PRICES[m.split(":")[1]]).cost(0, 1000) for m in PANEL)  # each at its own price
    assert 10.0 - during == pytest.approx(each, rel=0.05)


def test_insufficient_credit_is_402_and_calls_no_model(server, make_key, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "poor", "creditUsd": 0.01})
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key=make_key(["chat"], workspace="poor"), max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        sdk.chat.completions.create(model="router/debate", messages=QUESTION, max_tokens=1000)
    assert caught.value.status_code == 402
    assert caught.value.body["code"] == "insufficient_credits" and caught.value.body["type"] == "insufficient_quota"
    assert "parley workspaces credit poor --add" in caught.value.body["message"]
    assert llm.requests == [] and balance(sync_db, "poor") == 0.01


def test_unpriced_models_need_no_credit(server, make_key, llm):
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key=make_key(["chat"], workspace="empty"), max_retries=0)
    resp = sdk.chat.completions.create(model="vllm:my-own-model", messages=QUESTION)
    assert meta(resp)["cost"] == 0 and resp.usage.total_tokens > 0


def test_concurrent_debates_never_overdraw(server, make_key, llm, sync_db):
    reservation = _debate_reservation(1000)
    sync_db.workspaces.insert_one({"_id": "shared", "creditUsd": 2.5 * reservation})
    # The arbitrator is held until every request has been admitted or refused, so no admitted debate can
    # finish (and give back its unused reservation) while another still asks for credit.
    llm.script(model="claude-opus-4-5", hold="arbitrator", reply="Synthesis.")
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key=make_key(["chat"], workspace="shared"), max_retries=0)

    def ask():
        try:
            return sdk.chat.completions.create(model="router/debate", messages=QUESTION, max_tokens=1000)
        except openai.APIStatusError as exc:
            return exc.status_code

    with ThreadPoolExecutor(5) as pool:
        futures = [pool.submit(ask) for _ in range(5)]
        llm.wait_held("arbitrator", count=2)  # two debates got as far as their arbitrator ...
        eventually(lambda: sum(f.done() for f in futures) == 3, "the other three requests answered")  # ... 3 did not
        llm.release("arbitrator")
        outcomes = [f.result() for f in futures]
    answered = [o for o in outcomes if not isinstance(o, int)]
    assert len(answered) == 2 and sorted(o for o in outcomes if isinstance(o, int)) == [402, 402, 402]
    spent = sum(meta(r)["cost"] for r in answered)
    assert balance(sync_db, "shared") == pytest.approx(2.5 * reservation - spent)
    assert balance(sync_db, "shared") >= 0


def test_an_arbitrator_failing_mid_stream_ends_the_stream_with_an_error(client, api, llm):
    api.post("/v1/routers", json={"id": "flaky", "models": PANEL, "arbitrator": "openai:gpt-4o",
                                  "debate": True}).raise_for_status()
    llm.script(model="gpt-4o", reply="one two three four five", drop_after=2)
    stream = client.chat.completions.create(model="router/flaky", messages=QUESTION, stream=True)
    received = []
    with pytest.raises(openai.APIError, match="failed after part of its answer was streamed") as caught:
        for chunk in stream:
            received.append(chunk.choices[0].delta.content)
    assert received == ["one ", "two "] and caught.value.body["code"] == "answer_interrupted"
    # Without streaming nothing was sent yet, so the next candidate answers in full.
    llm.script(model="gpt-4o", reply="one two three four five", drop_after=2)
    llm.script(model="claude-opus-4-5", reply="Whole answer.")
    resp = client.chat.completions.create(model="router/flaky", messages=QUESTION)
    assert resp.choices[0].message.content == "Whole answer." and resp.model == ARBITRATOR


def test_a_client_leaving_mid_stream_still_settles_its_credit(server, key, llm, sync_db):
    # The arbitrator stops after its first token until released (never, here): it is cut off for sure.
    llm.script(model="claude-opus-4-5", reply=" ".join(["word"] * 40), hold="arbitrator", pause_after=1)
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        with http.stream("POST", "/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION,
                                                                "stream": True, "max_tokens": 1000}) as resp:
            for line in resp.iter_lines():
                if line.startswith("data:"):
                    break  # the first token arrived: hang up
    # The run settles on its own after the hang-up: credit first, then the usage rows.
    eventually(lambda: sync_db.usage.count_documents({}) >= 4, "the usage rows of the cut-off debate stored")
    # The three panelists, and the cut-off arbitrator: it reported no usage, but it was paid for (an estimate).
    assert sync_db.usage.count_documents({}) == 4
    spent = sum(r["costUsd"] for r in sync_db.usage.find())
    assert balance(sync_db) == pytest.approx(10.0 - spent)


def test_messages_without_content_are_400(api, llm):
    resp = api.post("/v1/chat/completions", json={"model": "router/debate",
                                                  "messages": [{"role": "user", "content": " "}]})
    assert resp.status_code == 400 and "needs non-empty content" in resp.json()["error"]["message"]
    # Tools are taken now (tests/api/test_tools_api.py); OpenAI's deprecated `functions` are refused, naming `tools`.
    resp = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION,
                                                  "functions": [{"name": "f"}]})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "legacy_functions"
    assert "send 'tools'" in resp.json()["error"]["message"]
    assert llm.requests == []


def test_keys_a_model_does_not_read_are_dropped_not_stored(api, llm, sync_db):
    # OpenAI's API ignores message keys it does not know; so does Parley, and it never stores them.
    llm.script(model="gpt-4o", reply="Hello.")
    message = {"role": "user", "content": "Hi", "name": "ada", "seed_hint": {"x": 1}}
    resp = api.post("/v1/chat/completions", json={"model": "openai:gpt-4o", "messages": [message]})
    assert resp.status_code == 200, resp.text
    stored = sync_db.runs.find_one({"_id": resp.headers["x-run-id"]})
    assert stored["input"]["graph"]["messages"] == [{"role": "user", "content": "Hi", "name": "ada"}]


@pytest.mark.parametrize("message", [
    {"role": "user", "content": "Hi", "x\u0000y": 1},
    {"role": "user", "content": "Hi", "big": 2**70},
])
def test_keys_mongodb_cannot_store_are_a_400_even_where_unread(api, llm, message):
    # Every body is checked where it enters, whatever a route would later read of it: one rule, no exceptions.
    resp = api.post("/v1/chat/completions", json={"model": "openai:gpt-4o", "messages": [message]})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "unstorable_value", resp.text
    assert not llm.requests


def test_content_parts_mongodb_cannot_store_are_a_400(api, llm):
    parts = [{"type": "text", "text": "Hi", "x\u0000y": 1}]
    resp = api.post("/v1/chat/completions", json={"model": "openai:gpt-4o", "messages": [
        {"role": "user", "content": parts}]})
    assert resp.status_code == 400 and "NUL" in resp.json()["error"]["message"], resp.text
    assert not llm.requests
