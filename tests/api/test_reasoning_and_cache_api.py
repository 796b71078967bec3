"""Reasoning models as debaters and the response cache over HTTP (issue 38): the openai SDK and plain HTTP against
Parley, backed by the scripted model server, whose recorded request bodies show what each model was sent."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from parley.api.main import create_app
from tests.support.servers import ServerThread

PANEL = ["openai:o4-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]
ARBITRATOR = "openai:gpt-4o"
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


def sent_to(llm, model: str) -> list[dict]:
    return [r for r in llm.requests if r["model"] == model]


# --- reasoning effort -------------------------------------------------------------------------


def test_a_request_s_reasoning_effort_reaches_a_reasoning_model_as_openai_takes_it(client, llm):
    client.chat.completions.create(model="openai:o4-mini", messages=QUESTION, reasoning_effort="high")
    client.chat.completions.create(model="openai:o4-mini", messages=QUESTION)
    asked, plain = sent_to(llm, "o4-mini")
    assert asked["reasoning_effort"] == "high"
    assert "reasoning_effort" not in plain


def test_a_reasoning_effort_for_a_model_without_reasoning_is_refused(client, llm):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="openai:gpt-4o-mini", messages=QUESTION, reasoning_effort="low")
    body = refused.value.response.json()
    assert body["error"]["code"] == "reasoning_unsupported"
    assert "openai:gpt-4o-mini" in body["error"]["message"] and "reasoning" in body["error"]["message"]
    assert llm.requests == []  # refused before any model was called
    with pytest.raises(openai.BadRequestError) as unknown:
        client.chat.completions.create(model="openai:o4-mini", messages=QUESTION, reasoning_effort="extreme")
    assert unknown.value.status_code == 400


def test_router_seats_carry_their_own_reasoning_effort(api, client, llm):
    created = api.post("/v1/routers", json={
        "id": "thinkers", "models": ["openai:o4-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"],
        "arbitrator": ARBITRATOR, "debate": True,
        "reasoningEffort": {"openai:o4-mini": "high", "google:gemini-2.5-pro": "minimal"}})
    assert created.status_code == 201, created.text
    assert created.json()["reasoningEffort"] == {"openai:o4-mini": "high", "google:gemini-2.5-pro": "minimal"}
    client.chat.completions.create(model="router/thinkers", messages=QUESTION)
    assert sent_to(llm, "o4-mini")[0]["reasoning_effort"] == "high"
    assert sent_to(llm, "gemini-2.5-pro")[0]["reasoning_effort"] == "minimal"
    assert "reasoning_effort" not in sent_to(llm, "claude-sonnet-4-5")[0]
    assert "reasoning_effort" not in sent_to(llm, "gpt-4o")[0]
    # A request's effort for every seat replaces the router's; a seat that cannot reason is refused.
    llm.reset()
    client.chat.completions.create(model="router/thinkers", messages=QUESTION,
                                   extra_body={"reasoning_effort": {"openai:o4-mini": "low"}})
    assert sent_to(llm, "o4-mini")[0]["reasoning_effort"] == "low"
    assert "reasoning_effort" not in sent_to(llm, "gemini-2.5-pro")[0]


def test_router_reasoning_effort_is_checked(api):
    base = {"models": ["openai:o4-mini", "openai:gpt-4o-mini"], "debate": False}
    stranger = api.post("/v1/routers", json={**base, "id": "r1", "reasoningEffort": {"openai:o3": "high"}})
    assert stranger.status_code == 400 and stranger.json()["error"]["code"] == "invalid_reasoning_effort"
    unable = api.post("/v1/routers", json={**base, "id": "r2", "reasoningEffort": {"openai:gpt-4o-mini": "high"}})
    assert unable.status_code == 400 and unable.json()["error"]["code"] == "reasoning_unsupported"
    wrong = api.post("/v1/routers", json={**base, "id": "r3", "reasoningEffort": {"openai:o4-mini": "extreme"}})
    assert wrong.status_code == 400
    ok = api.post("/v1/routers", json={**base, "id": "r4"})
    assert ok.status_code == 201 and ok.json()["reasoningEffort"] is None
    patched = api.patch("/v1/routers/r4", json={"reasoningEffort": {"openai:gpt-4o-mini": "low"}})
    assert patched.status_code == 400 and patched.json()["error"]["code"] == "reasoning_unsupported"


def test_agents_take_a_reasoning_effort_for_their_turns(api, llm):
    thinker = api.post("/v1/agents", json={"name": "Thinker", "model": "openai:o4-mini", "reasoningEffort": "medium"})
    assert thinker.status_code == 201, thinker.text
    assert thinker.json()["agent"]["reasoningEffort"] == "medium"
    api.post("/v1/agents", json={"name": "Plain", "model": "openai:gpt-4o-mini"})
    refused = api.post("/v1/agents", json={"name": "Bad", "model": "openai:gpt-4o-mini", "reasoningEffort": "high"})
    assert refused.status_code == 400 and refused.json()["code"] == "reasoning_unsupported"
    agent_id = thinker.json()["agent"]["id"]
    moved = api.patch(f"/v1/agents/{agent_id}", json={"model": "openai:gpt-4o-mini"})
    assert moved.status_code == 400 and moved.json()["code"] == "reasoning_unsupported"
    conversation = api.post("/v1/conversations", json={"title": "Pricing"}).json()["conversation"]
    debate = api.post(f"/v1/conversations/{conversation['id']}/message", json={"content": "Raise prices?"},
                      timeout=120)
    assert debate.status_code == 200 and "synthesis" in debate.json()
    thinker_turns = [r for r in sent_to(llm, "o4-mini") if not r.get("response_format")]
    assert thinker_turns and all(r["reasoning_effort"] == "medium" for r in thinker_turns)
    assert all("reasoning_effort" not in r for r in sent_to(llm, "gpt-4o-mini"))


# --- reasoning text kept out of answers ---------------------------------------------------------------


def test_reasoning_text_never_reaches_the_other_seats_or_the_answer(client, llm, sync_db):
    llm.script(model="o4-mini", reply="<think>My secret plan: flatter the judge.</think>\n\nPick two of three.",
               reasoning="hidden chain of thought")
    llm.script(model="claude-sonnet-4-5", reply="Trade-offs under partitions.", reasoning="another hidden chain")
    llm.script(model="gpt-4o", reply="The synthesis.")
    resp = client.chat.completions.create(model="router/debate", messages=QUESTION)
    assert resp.choices[0].message.content == "The synthesis."
    arbitration = json.dumps(sent_to(llm, "gpt-4o")[0]["messages"])
    assert "Pick two of three." in arbitration and "Trade-offs under partitions." in arbitration
    assert "secret plan" not in arbitration and "<think>" not in arbitration
    assert "hidden chain" not in arbitration and "another hidden" not in arbitration
    stored = json.dumps([doc for doc in sync_db.runs.find({}, {"_id": 0, "result": 1, "input": 1})], default=str)
    assert "secret plan" not in stored and "hidden chain" not in stored


def test_a_streamed_answer_loses_its_think_block_even_cut_between_chunks(client, llm):
    llm.script(model="o4-mini", reply="<think>step one, step two</think> Forty-two.")
    stream = client.chat.completions.create(model="openai:o4-mini", messages=QUESTION, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Forty-two."


# --- prompt-cache breakpoints --------------------------------------------------------------------


def test_cache_control_marks_the_stable_prefix_for_an_anthropic_model_only(client, llm):
    instructions = "You are a careful analyst. " * 400  # ~2,700 tokens: worth caching
    messages = [{"role": "system", "content": instructions}, {"role": "user", "content": "First question?"},
                {"role": "assistant", "content": "First answer."}, {"role": "user", "content": "And now?"}]
    client.chat.completions.create(model="anthropic:claude-sonnet-4-5", messages=messages)
    client.chat.completions.create(model="openai:gpt-4o", messages=messages)
    claude = sent_to(llm, "claude-sonnet-4-5")[0]["messages"]
    assert claude[0]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert claude[0]["content"][-1]["text"].startswith("You are a careful analyst.")
    assert claude[2]["content"][-1] == {"type": "text", "text": "First answer.", "cache_control": {"type": "ephemeral"}}
    assert claude[-1]["content"] == "And now?"  # the new ask is never marked
    assert sum("cache_control" in json.dumps(m) for m in claude) <= 4
    assert "cache_control" not in json.dumps(sent_to(llm, "gpt-4o")[0])
    # A short prompt is below the shortest cacheable prefix: no mark.
    llm.reset()
    client.chat.completions.create(model="anthropic:claude-sonnet-4-5", messages=QUESTION)
    assert "cache_control" not in json.dumps(sent_to(llm, "claude-sonnet-4-5")[0])


# --- the response cache -------------------------------------------------------------------------------


def _usage_rows(sync_db) -> list[dict]:
    rows = [row for page in sync_db.run_events.find({"usage": {"$exists": True}}) for row in page["usage"]]
    return rows + list(sync_db.run_usage.find({}, {"_id": 0}))


def test_an_identical_call_at_temperature_0_is_answered_from_the_cache_for_free(client, llm, sync_db):
    llm.script(model="gpt-4o", reply="Cached wisdom.")
    ask = dict(model="openai:gpt-4o", messages=QUESTION, temperature=0, extra_body={"parley_cache": True})
    first = client.chat.completions.create(**ask)
    second = client.chat.completions.create(**ask)
    assert first.choices[0].message.content == second.choices[0].message.content == "Cached wisdom."
    assert len(sent_to(llm, "gpt-4o")) == 1  # the second call reached no model
    assert first.model_extra["_meta"]["cost"] > 0
    assert second.model_extra["_meta"]["cost"] == 0
    assert second.usage.total_tokens == first.usage.total_tokens > 0  # tokens still shown
    rows = _usage_rows(sync_db)
    assert sorted(r.get("response_cache", False) for r in rows) == [False, True]
    assert next(r for r in rows if r.get("response_cache"))["cost"] == 0
    # Streamed, the same call is answered from the cache too.
    stream = client.chat.completions.create(**ask, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Cached wisdom."
    assert len(sent_to(llm, "gpt-4o")) == 1


def test_the_cache_misses_on_another_parameter_a_sampled_call_or_without_opting_in(client, llm):
    base = dict(model="openai:gpt-4o", messages=QUESTION, temperature=0, extra_body={"parley_cache": True})
    client.chat.completions.create(**base)
    client.chat.completions.create(**base, max_tokens=40)  # another parameter
    client.chat.completions.create(**{**base, "temperature": 0.7})  # sampled, no seed: never cached
    client.chat.completions.create(**{**base, "temperature": 0.7})
    client.chat.completions.create(model="openai:gpt-4o", messages=QUESTION, temperature=0)  # not opted in
    assert len(sent_to(llm, "gpt-4o")) == 5


def test_a_streamed_miss_is_stored_and_a_later_whole_call_hits_it(client, llm):
    llm.script(model="gpt-4o", reply="Streamed once, kept.")
    ask = dict(model="openai:gpt-4o", messages=QUESTION, temperature=0, extra_body={"parley_cache": True})
    stream = client.chat.completions.create(**ask, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Streamed once, kept."
    again = client.chat.completions.create(**ask)
    assert again.choices[0].message.content == "Streamed once, kept." and len(sent_to(llm, "gpt-4o")) == 1


def _ask(server, key, **fields):
    with openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=30) as sdk:
        return sdk.chat.completions.create(model="openai:gpt-4o", messages=QUESTION, temperature=0, **fields)


def test_the_cache_is_each_user_s_own_unless_a_request_shares_it_with_the_workspace(server, key, make_key, llm):
    """Another user's answer once came from the cache in milliseconds (against seconds from a model): what a user of
    the workspace asked, and the answer, leaked to the next. `parley_cache: true` is the user's own cache;
    `"workspace"` one every user of the workspace shares."""
    llm.script(model="gpt-4o", reply="Cached wisdom.")
    bob = make_key(["chat"], user="bob")
    assert _ask(server, key, extra_body={"parley_cache": True}).choices[0].message.content == "Cached wisdom."
    assert _ask(server, bob, extra_body={"parley_cache": True}).choices[0].message.content == "Cached wisdom."
    assert len(sent_to(llm, "gpt-4o")) == 2  # bob's call reached the model: alice's answer is hers
    _ask(server, key, extra_body={"parley_cache": True})
    assert len(sent_to(llm, "gpt-4o")) == 2  # alice's own answer, from the cache
    _ask(server, key, extra_body={"parley_cache": "workspace"})
    shared = _ask(server, bob, extra_body={"parley_cache": "workspace"})
    assert shared.choices[0].message.content == "Cached wisdom." and shared.model_extra["_meta"]["cost"] == 0
    assert len(sent_to(llm, "gpt-4o")) == 3  # the workspace's shared answer: one call for both
    with pytest.raises(openai.BadRequestError):
        _ask(server, key, extra_body={"parley_cache": "everyone"})


def test_an_answer_that_failed_its_format_or_said_nothing_is_never_kept(client, llm, sync_db):
    """An answer that failed its `response_format` (the first, and the repair) was once kept: the same call was
    answered the same wrong way for a day without asking the model again. Nor is an empty answer kept."""
    llm.script(model="gpt-4o", match="How many nodes", json={"nodes": "three"}, times=2)  # not an integer
    llm.script(model="gpt-4o", match="How many nodes", json={"nodes": 3})
    fmt = {"type": "json_schema", "json_schema": {"name": "count", "schema": {
        "type": "object", "properties": {"nodes": {"type": "integer"}}, "required": ["nodes"]}}}
    ask = dict(model="openai:gpt-4o", messages=[{"role": "user", "content": "How many nodes?"}], temperature=0,
               response_format=fmt, extra_body={"parley_cache": True})
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(**ask)
    assert sync_db.response_cache.count_documents({}) == 0
    assert json.loads(client.chat.completions.create(**ask).choices[0].message.content) == {"nodes": 3}
    assert len(sent_to(llm, "gpt-4o")) == 3  # asked again, not answered from the cache
    assert sync_db.response_cache.count_documents({}) == 1  # the answer in its format is kept
    llm.script(model="gpt-4o", match="Say nothing", reply="", times=1)
    llm.script(model="gpt-4o", match="Say nothing", reply="Something.")
    empty = dict(model="openai:gpt-4o", messages=[{"role": "user", "content": "Say nothing"}], temperature=0,
                 extra_body={"parley_cache": True})
    with pytest.raises(openai.InternalServerError):  # every model failed: the one answered nothing
        client.chat.completions.create(**empty)
    assert client.chat.completions.create(**empty).choices[0].message.content == "Something."  # asked again
    assert sum("Say nothing" in json.dumps(r) for r in sent_to(llm, "gpt-4o")) == 2
    assert sync_db.response_cache.count_documents({}) == 2


def test_the_response_cache_has_a_ttl_index(client, sync_db):
    indexes = sync_db.response_cache.index_information()
    assert any(spec["key"] == [("expiresAt", 1)] and spec.get("expireAfterSeconds") == 0 for spec in indexes.values())


def test_the_responses_api_takes_the_same_options(client, llm):
    llm.script(model="o4-mini", reply="<think>scratch</think>Ten.")
    ask = dict(model="openai:o4-mini", input="What is 7 + 3?", temperature=0,
               extra_body={"reasoning_effort": "low", "parley_cache": True})
    first = client.responses.create(**ask)
    second = client.responses.create(**ask)
    assert first.output_text == second.output_text == "Ten."
    assert len(sent_to(llm, "o4-mini")) == 1 and sent_to(llm, "o4-mini")[0]["reasoning_effort"] == "low"


def test_a_duel_takes_one_reasoning_effort_for_its_model(parley_env, make_key, llm):
    parley_env.openai_model = "openai:o4-mini"
    body = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 1}
    with ServerThread(create_app(parley_env)) as running, httpx.Client(base_url=running.url, timeout=60) as http:
        headers = {"Authorization": f"Bearer {make_key(['debate'])}"}
        duel = http.post("/api/debate", json={**body, "reasoningEffort": "low"}, headers=headers)
        assert duel.status_code == 200 and "event: done" in duel.text, duel.text[:300]
        assert llm.requests and all(r["reasoning_effort"] == "low" for r in llm.requests)
        wrong = http.post("/api/debate", json={**body, "reasoningEffort": "extreme"}, headers=headers)
        assert wrong.status_code == 400
    parley_env.openai_model = "openai:gpt-4o-mini"
    with ServerThread(create_app(parley_env)) as running, httpx.Client(base_url=running.url, timeout=60) as http:
        headers = {"Authorization": f"Bearer {make_key(['debate'])}"}
        refused = http.post("/api/debate", json={**body, "reasoningEffort": "low"}, headers=headers)
        assert refused.status_code == 400 and "reasoning" in refused.text
