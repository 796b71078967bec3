"""A council chosen per request (issue 35), over HTTP with the official openai SDK against the scripted model server:
the panel and judge a request names, the disagreement map in `_meta.analysis`, the labelled answers when every
arbitrator fails, adaptive depth, and the `quality` and `budget` presets."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from parley.api.main import create_app
from tests.api.test_panel_api import api, client, meta  # noqa: F401 (fixtures over this module's server and key)
from tests.services.test_chat_apps import OWUI_TITLE, open_webui
from tests.support.servers import ServerThread

PRESET = ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-flash"]
COUNCIL = ["openai:gpt-5", "anthropic:claude-opus-4-5", "mistral:mistral-large-latest"]
JUDGE = "google:gemini-2.5-pro"
QUESTION = [{"role": "user", "content": "Should a team of five start with a monolith, considering hiring?"}]
AGREED = "Start with a monolith. Split services out later, once the team and the load grow."
OTHER = "Do not start with a monolith. Use microservices from day one, for independent deploys."


@pytest.fixture
def server(parley_env):
    parley_env.parley_debate_models = list(PRESET)
    parley_env.parley_arbitrator_model = "openai:gpt-4o"
    with ServerThread(create_app(parley_env)) as running:
        yield running


@pytest.fixture
def key(server, make_key, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    return make_key(["chat"])  # an ordinary key: no admin, no router of its own


def calls(llm) -> list[str]:
    return [r["model"] for r in llm.requests]


def council(client, **extra):
    return client.chat.completions.create(model="router/debate", messages=QUESTION,
                                          extra_body={"models": COUNCIL, "arbitrator": JUDGE, **extra})


# --- panel and judge per request ------------------------------------------------------------


def test_a_chat_key_chooses_the_panel_and_judge_and_gets_the_map(client, llm, sync_db):
    llm.script(model="gpt-5", reply=AGREED)
    llm.script(model="claude-opus-4-5", reply=AGREED + " Hiring for one codebase is easier.")
    llm.script(model="mistral-large-latest", reply=OTHER)
    llm.script(model="gemini-2.5-pro", reply="The council's answer.")
    resp = council(client, criteria="Weigh operational cost above elegance.")
    assert resp.choices[0].message.content == "The council's answer." and resp.model == JUDGE
    m = meta(resp)
    assert [p["model"] for p in m["debate"]["panelists"]] == COUNCIL  # the request's panel, every one seated
    assert m["debate"]["arbitrator"] == JUDGE
    assert sorted(calls(llm)) == sorted(["gpt-5", "claude-opus-4-5", "mistral-large-latest", "gemini-2.5-pro"])
    judge_prompt = json.dumps(next(r for r in llm.requests if r["model"] == "gemini-2.5-pro")["messages"])
    assert "Weigh operational cost above elegance." in judge_prompt
    panelist_prompt = json.dumps(next(r for r in llm.requests if r["model"] == "gpt-5")["messages"])
    assert "operational cost" not in panelist_prompt  # criteria are the judge's
    analysis = m["analysis"]
    assert set(analysis) >= {"consensus", "contradictions", "partialCoverage", "uniqueInsights", "blindSpots",
                             "agreement", "pairs", "method"}
    assert 0 <= analysis["agreement"] < 1
    assert any(c["topic"] and {s["model"] for s in c["stances"]} >= {"mistral:mistral-large-latest"}
               for c in analysis["contradictions"])
    assert any(u["model"] == "anthropic:claude-opus-4-5" and "Hiring" in u["insight"]
               for u in analysis["uniqueInsights"])
    assert m["status"] == {"outcome": "answered", "reason": None, "failed": []}
    rows = {r["model"] for r in sync_db.usage.find({"requestId": resp.id})}
    assert rows == {*COUNCIL, JUDGE}


def test_the_agreement_score_is_the_same_for_the_same_answers(client, llm):
    for model, reply in zip(["gpt-5", "claude-opus-4-5", "mistral-large-latest"], [AGREED, AGREED, OTHER]):
        llm.script(model=model, reply=reply)
    first, second = council(client), council(client, judge=JUDGE, arbitrator=None)
    assert meta(first)["analysis"] == meta(second)["analysis"]
    assert meta(first)["analysis"]["pairs"][0] == {"models": COUNCIL[:2], "agreement": 1.0}


def test_a_council_needs_a_router_and_callable_models_of_distinct_families(client, api, llm):
    refused = api.post("/v1/chat/completions", json={"model": "openai:gpt-5", "messages": QUESTION,
                                                     "models": COUNCIL})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "router_required"
    one_family = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION,
                                                        "models": ["openai:gpt-5", "openai:gpt-5-mini"]})
    assert one_family.status_code == 400 and one_family.json()["error"]["code"] == "too_few_families"
    assert "allow_same_family" in one_family.json()["error"]["message"]
    for models in (["openai:gpt-5"], [f"openai:m{i}" for i in range(9)], ["openai:gpt-5", " openai:gpt-5"],
                   ["openai:gpt-5", " "], ["openai:gpt-5", "openai:" + "x" * 200]):
        sized = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION,
                                                       "models": models})
        assert sized.status_code == 400 and "models" in sized.json()["error"]["message"]
    unconfigured = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION,
                                                          "models": ["openai:gpt-5", "local:smollm2"]})
    assert unconfigured.status_code == 400 and unconfigured.json()["error"]["code"] == "model_unavailable"
    assert "local" in unconfigured.json()["error"]["message"]
    two_judges = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION,
                                                        "arbitrator": "openai:gpt-5", "judge": JUDGE})
    assert two_judges.status_code == 400 and two_judges.json()["error"]["code"] == "invalid_arbitrator"
    long_criteria = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION,
                                                           "criteria": "x" * 2001})
    assert long_criteria.status_code == 400
    assert llm.requests == []  # nothing was called, nothing billed


def test_an_unknown_provider_without_a_gateway_is_named(parley_env, make_key, sync_db, llm):
    parley_env.openai_base_url = None
    parley_env.openai_api_key = "sk-test"
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    with ServerThread(create_app(parley_env)) as running:
        resp = httpx.post(running.url + "/v1/chat/completions", timeout=30,
                          headers={"Authorization": f"Bearer {make_key(['chat'])}"},
                          json={"model": "router/debate", "messages": QUESTION,
                                "models": ["openai:gpt-5", "acme:brain-1"]})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "model_unavailable"
    assert "unknown provider 'acme'" in resp.json()["error"]["message"]


def test_two_models_of_one_family_are_seated_when_allowed(client, llm):
    resp = client.chat.completions.create(model="router/debate", messages=QUESTION, extra_body={
        "models": ["openai:gpt-5", "openai:gpt-5-mini"], "allow_same_family": True})
    assert [p["model"] for p in meta(resp)["debate"]["panelists"]] == ["openai:gpt-5", "openai:gpt-5-mini"]


# --- honest degradation ---------------------------------------------------------------------


def test_every_arbitrator_failing_returns_the_labelled_answers_with_a_status(client, llm):
    llm.script(model="gpt-5", reply=AGREED)
    llm.script(model="claude-opus-4-5", reply=AGREED)
    llm.script(model="mistral-large-latest", status=401)
    llm.script(model="gemini-2.5-pro", status=500)
    llm.script(model="gpt-4o", status=500)  # the deployment's arbitrator, the next candidate
    resp = council(client)
    content = resp.choices[0].message.content
    assert "**openai:gpt-5**" in content and "**anthropic:claude-opus-4-5**" in content and AGREED in content
    assert resp.model == "panel"
    m = meta(resp)
    assert m["status"]["outcome"] == "degraded" and m["status"]["reason"] == "arbitrator_failed"
    failed = {(f["model"], f["role"], f["error"]) for f in m["status"]["failed"]}
    assert failed == {("mistral:mistral-large-latest", "panelist", "auth"), (JUDGE, "arbitrator", "server"),
                      ("openai:gpt-4o", "arbitrator", "server")}
    assert m["decision"]["decidedBy"] == "none" and m["analysis"]["agreement"] == 1.0


def test_a_degraded_answer_streams_too(client, llm):
    llm.script(model="gemini-2.5-pro", status=500)
    llm.script(model="gpt-4o", status=500)
    chunks = list(client.chat.completions.create(model="router/debate", messages=QUESTION, stream=True,
                                                 extra_body={"models": COUNCIL, "arbitrator": JUDGE}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert all(f"**{model}**" in text for model in COUNCIL)
    assert chunks[-1].model_extra["_meta"]["status"]["outcome"] == "degraded"


def test_an_answer_that_must_be_json_still_fails_when_every_arbitrator_does(client, llm):
    llm.script(model="gemini-2.5-pro", status=500)
    llm.script(model="gpt-4o", status=500)
    with pytest.raises(openai.APIStatusError) as caught:
        council(client, response_format={"type": "json_object"})
    assert caught.value.status_code == 502 and caught.value.body["code"] == "arbitrator_failed"


# --- the analysis rule ----------------------------------------------------------------------


def test_rule_analysis_returns_the_labelled_answers_and_the_map_without_a_judge(client, llm):
    resp = council(client, rule="analysis")
    assert calls(llm) and "gemini-2.5-pro" not in calls(llm) and len(llm.requests) == 3
    m = meta(resp)
    assert m["rule"] == "analysis" and m["decision"] == {"rule": "analysis", "decidedBy": "none", "model": "panel"}
    assert resp.model == "panel" and all(f"**{model}**" in resp.choices[0].message.content for model in COUNCIL)
    assert {"consensus", "contradictions", "uniqueInsights"} <= set(m["analysis"])


# --- adaptive depth -------------------------------------------------------------------------


def test_adaptive_depth_stops_after_two_seats_that_agree(client, llm):
    llm.script(model="gpt-5", reply=AGREED)
    llm.script(model="claude-opus-4-5", reply=AGREED)
    resp = council(client, depth="adaptive")
    assert sorted(calls(llm)) == sorted(["gpt-5", "claude-opus-4-5"])  # 2 calls where the full panel makes 4
    adaptive = meta(resp)["adaptive"]
    assert adaptive["path"] == "agreed" and adaptive["agreement"] == 1.0
    assert adaptive["firstSeats"] == COUNCIL[:2] and adaptive["seats"] == 3
    assert [p["model"] for p in meta(resp)["debate"]["panelists"]] == COUNCIL[:2]
    content = resp.choices[0].message.content
    assert content.startswith(AGREED + "\n\n---\n\n**Adaptive depth**") and resp.model == COUNCIL[0]
    assert meta(resp)["decision"]["decidedBy"] == "agreement" and resp.usage.total_tokens > 0


def test_a_streamed_agreed_pair_streams_the_first_answer_and_its_note(client, llm):
    llm.script(model="gpt-5", reply=AGREED)
    llm.script(model="claude-opus-4-5", reply=AGREED)
    chunks = list(client.chat.completions.create(
        model="router/debate", messages=QUESTION, stream=True,
        extra_body={"models": COUNCIL, "arbitrator": JUDGE, "depth": "adaptive"}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith(AGREED) and "**Adaptive depth**" in text and len(llm.requests) == 2
    final = chunks[-1].model_extra["_meta"]
    assert final["decision"]["decidedBy"] == "agreement" and final["adaptive"]["path"] == "agreed"


def test_an_agreed_pair_whose_answer_is_not_the_json_asked_for_goes_to_the_arbitrator(client, llm):
    llm.script(model="gpt-5", reply=AGREED)
    llm.script(model="claude-opus-4-5", reply=AGREED)
    llm.script(model="gemini-2.5-pro", json={"start": "monolith"})
    resp = council(client, depth="adaptive", response_format={"type": "json_object"})
    assert sorted(calls(llm)) == sorted(["gpt-5", "claude-opus-4-5", "gemini-2.5-pro"])
    assert json.loads(resp.choices[0].message.content) == {"start": "monolith"}
    decision = meta(resp)["decision"]
    assert decision["decidedBy"] == "arbitrator" and "not the JSON" in decision["reason"]


def test_adaptive_depth_escalates_when_the_first_seats_disagree(client, llm):
    llm.script(model="gpt-5", reply=AGREED)
    llm.script(model="claude-opus-4-5", reply=OTHER)
    resp = council(client, depth="adaptive")
    assert sorted(calls(llm)) == sorted([*["gpt-5", "claude-opus-4-5", "mistral-large-latest"], "gemini-2.5-pro"])
    adaptive = meta(resp)["adaptive"]
    assert adaptive["path"] == "escalated" and adaptive["agreement"] < adaptive["threshold"]
    assert [p["model"] for p in meta(resp)["debate"]["panelists"]] == COUNCIL


def test_adaptive_depth_escalates_when_a_first_seat_fails(client, llm):
    llm.script(model="gpt-5", reply=AGREED)
    llm.script(model="claude-opus-4-5", status=401)
    resp = council(client, depth="adaptive")
    assert meta(resp)["adaptive"]["path"] == "escalated"
    assert "mistral-large-latest" in calls(llm)


def test_shadow_asks_the_whole_panel_and_says_whether_stopping_would_have_answered_the_same(client, llm):
    llm.script(model="gpt-5", reply=AGREED)
    llm.script(model="claude-opus-4-5", reply=AGREED)
    llm.script(model="gemini-2.5-pro", reply=AGREED)
    resp = council(client, depth="adaptive", shadow=True)
    assert "mistral-large-latest" in calls(llm) and len(llm.requests) == 4
    adaptive = meta(resp)["adaptive"]
    assert adaptive["path"] == "agreed" and adaptive["shadow"] == {"agreement": 1.0, "sameAnswer": True}


def test_shadow_needs_adaptive_depth(api):
    resp = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION, "shadow": True})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_depth"


# --- presets ----------------------------------------------------------------------------------


def test_the_quality_and_budget_presets_are_listed_and_budget_is_adaptive(api, client, llm):
    models = {m["id"]: m for m in api.get("/v1/models").json()["data"]}
    assert models["router/quality"]["metadata"]["depth"] == "full"
    assert models["router/budget"]["metadata"]["depth"] == "adaptive"
    assert models["router/budget"]["metadata"]["panel"] == ["openai:gpt-5-nano", "google:gemini-2.5-flash-lite",
                                                            "deepseek:deepseek-chat"]
    llm.script(model="gpt-5-nano", reply=AGREED)
    llm.script(model="gemini-2.5-flash-lite", reply=AGREED)
    resp = client.chat.completions.create(model="router/budget", messages=QUESTION)
    assert meta(resp)["adaptive"]["path"] == "agreed" and "deepseek-chat" not in calls(llm)


# --- a chat app's housekeeping ----------------------------------------------------------------


def test_a_chat_apps_title_request_is_one_call_to_the_routers_cheapest_model(client, llm):
    title = open_webui(OWUI_TITLE)
    resp = client.chat.completions.create(model="router/budget", messages=[{"role": "user", "content": title}])
    assert calls(llm) == ["gpt-5-nano"]  # the budget preset's cheapest, no panel, no arbitrator
    m = meta(resp)
    assert m["routerMode"] == "housekeeping" and resp.model == "openai:gpt-5-nano"
    assert m["housekeeping"] == {"task": "title", "detectedBy": "prompt", "app": "open-webui"}
    assert "analysis" not in m and "debate" not in m


def test_metadata_task_is_housekeeping_and_debate_true_still_debates(client, llm):
    question = [{"role": "user", "content": "Tags for this chat, please."}]
    tagged = client.chat.completions.create(model="router/debate", messages=question,
                                            extra_body={"metadata": {"task": "tags_generation"}})
    assert meta(tagged)["housekeeping"]["task"] == "tags" and len(llm.requests) == 1
    debated = client.chat.completions.create(model="router/debate", messages=question,
                                             extra_body={"metadata": {"task": "tags_generation"}, "debate": True})
    assert "housekeeping" not in meta(debated) and len(llm.requests) == 1 + 4


# --- quorum grace -----------------------------------------------------------------------------


def test_quorum_grace_decides_without_a_late_seat_and_labels_it(client, llm):
    llm.script(model="mistral-large-latest", reply=OTHER, hold="slow")
    try:
        resp = council(client, quorum={"k": 2, "grace": 0.2})
        llm.wait_held("slow")  # it was asked, and was still answering when the panel decided
    finally:
        llm.release("slow")
    panelists = meta(resp)["debate"]["panelists"]
    assert [p["success"] for p in panelists] == [True, True, False] and panelists[2]["error"] == "late"
    late = [f for f in meta(resp)["status"]["failed"] if f["error"] == "late"]
    assert late == [{"model": COUNCIL[2], "role": "panelist", "error": "late",
                     "detail": "still answering 0.2 s after 2 panelists had answered"}]
    judge_prompt = json.dumps(next(r for r in llm.requests if r["model"] == "gemini-2.5-pro")["messages"])
    assert "Answer B" in judge_prompt and "Answer C" not in judge_prompt


def test_a_quorum_larger_than_the_panel_is_refused(api):
    resp = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION,
                                                  "models": COUNCIL, "quorum": {"k": 4, "grace": 1}})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_quorum"
    negative = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION,
                                                      "quorum": {"k": 2, "grace": -1}})
    assert negative.status_code == 400
