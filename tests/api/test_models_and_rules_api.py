"""Routers as models (`GET /v1/models`, read by the official openai SDK) and the decision rules over HTTP: a
router's `rule`, a request's `rule`, `_meta.rule` and `_meta.decision`, the stream, and the refusals."""

from __future__ import annotations

import httpx
import openai
import pytest

from parley.nodes.arbitrate import ANSWER_LETTERS
from parley.nodes.rank import review_orders
# The panel's fixtures and preset: PANEL, and ARBITRATOR of a panelist's family (claude-opus-4-5).
from tests.api.test_panel_api import ARBITRATOR, PANEL, api, client, key, meta, server  # noqa: F401

NAMES = [model.split(":", 1)[1] for model in PANEL]
OUTSIDER = "meta:llama-4-maverick"
QUESTION = [{"role": "user", "content": "How many legs do two spiders have?"}]


def answer_panel(llm, *replies: str) -> None:
    for name, reply in zip(NAMES, replies):
        llm.script(model=name, reply=reply)


# --- /v1/models -----------------------------------------------------------------------------


def test_the_sdk_lists_routers_and_models(client, api, make_key, server):
    api.post("/v1/routers", json={"id": "support", "models": PANEL, "debate": True, "arbitrator": OUTSIDER,
                                  "rule": "vote", "answerRule": "number"}).raise_for_status()
    models = list(client.models.list())
    ids = [m.id for m in models]
    assert ids[:5] == ["router/debate", "router/quality", "router/budget", "router/support",
                       "self-moa/openai:gpt-4o-mini"]  # the default model
    assert set(PANEL) | {ARBITRATOR, OUTSIDER} <= set(ids[5:]) and len(ids) == len(set(ids))
    assert all(m.object == "model" and isinstance(m.created, int) for m in models)
    support = models[3]
    assert support.owned_by == "parley" and support.created > 0
    assert support.model_extra["metadata"] == {
        "kind": "router", "preset": False, "debate": True, "models": PANEL, "panel": PANEL, "panelSize": 3,
        "allowSameFamily": False, "arbitrator": OUTSIDER, "independentArbitrator": True, "rule": "vote",
        "answerRule": "number", "depth": "full"}
    preset = client.models.retrieve("router/debate")
    assert preset.id == "router/debate" and preset.model_extra["metadata"]["arbitrator"] == ARBITRATOR
    assert preset.model_extra["metadata"]["independentArbitrator"] is False  # claude-opus is a panelist's family
    assert preset.model_extra["metadata"]["rule"] == "synthesis"
    plain = client.models.retrieve("google:gemini-2.5-pro")
    assert plain.owned_by == "google" and plain.model_extra["metadata"] == {"kind": "model", "family": "gemini-2-5"}
    moa = client.models.retrieve("self-moa/openai:gpt-4o")
    assert moa.model_extra["metadata"]["panel"] == ["openai:gpt-4o"] * 3
    # Another workspace sees its own routers only (the same rule as /v1/routers).
    other = make_key(["chat"], user="bob", workspace="ws2")
    with openai.OpenAI(base_url=server.url + "/v1", api_key=other, max_retries=0) as theirs:
        assert "router/support" not in [m.id for m in theirs.models.list()]
        with pytest.raises(openai.NotFoundError):
            theirs.models.retrieve("router/support")


def test_an_unknown_model_is_404_in_openais_shape(client, api):
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("router/nope")
    assert caught.value.code == "model_not_found"
    body = api.get("/v1/models/openai:no-such-model").json()
    assert set(body) == {"error"} and body["error"]["code"] == "model_not_found"
    assert body["error"]["type"] == "not_found_error" and "openai:no-such-model" in body["error"]["message"]
    assert api.get("/v1/models/self-moa/").status_code == 404


def test_models_need_a_key_with_the_chat_scope(server, make_key):
    debate_only = make_key(["debate"])
    resp = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {debate_only}"})
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "scope_denied"
    assert httpx.get(server.url + "/v1/models").status_code == 401
    chat_only = make_key(["chat"])
    assert httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {chat_only}"}).status_code == 200


# --- rules over HTTP ------------------------------------------------------------------------


def test_a_request_votes_and_meta_says_how(client, llm):
    answer_panel(llm, "8 + 8.\nAnswer: 16", "Answer: 16", "Answer: 14")
    resp = client.chat.completions.create(model="router/debate", messages=QUESTION,
                                          extra_body={"rule": "vote", "answer_rule": "number"})
    assert resp.choices[0].message.content.startswith("8 + 8.\nAnswer: 16\n\n---\n\n**Majority vote**")
    assert resp.model == "openai:gpt-5"  # the answer returned is gpt-5's, verbatim
    m = meta(resp)
    assert m["rule"] == "vote" and m["routerMode"] == "debate" and m["modelUsed"] == "openai:gpt-5"
    assert m["decision"]["decidedBy"] == "majority" and m["decision"]["answer"] == "16"
    assert m["decision"]["tally"][0] == {"answer": "16", "votes": 2, "panelists": PANEL[:2]}
    assert set(m["debate"]["panelists"][0]) == {"model", "tokens", "cachedTokens", "reasoningTokens", "cost", "latencyMs",
                                                 "success"}
    assert not any(r["model"] == "claude-opus-4-5" for r in llm.requests)


def test_a_routers_rule_applies_and_a_request_overrides_it(client, api, llm):
    api.post("/v1/routers", json={"id": "judged", "models": PANEL, "debate": True, "arbitrator": OUTSIDER,
                                  "rule": "best-of-n"}).raise_for_status()
    llm.script(model="llama-4-maverick", match="Which answer is the best", json={"best": "B", "reason": "B."})
    answer_panel(llm, "One.", "Two.", "Three.")
    judged = client.chat.completions.create(model="router/judged", messages=QUESTION)
    m = meta(judged)
    assert m["rule"] == "best-of-n" and m["decision"]["judge"] == OUTSIDER and m["decision"]["independent"]
    assert judged.choices[0].message.content.startswith("Two.\n\n---\n\n**Best of 3**")
    llm.script(model="llama-4-maverick", reply="Synthesised.")
    synthesised = client.chat.completions.create(model="router/judged", messages=QUESTION,
                                                 extra_body={"rule": "synthesis"})
    assert synthesised.choices[0].message.content == "Synthesised." and synthesised.model == OUTSIDER
    assert meta(synthesised)["decision"] == {"rule": "synthesis", "decidedBy": "arbitrator", "model": OUTSIDER,
                                             "arbitrator": OUTSIDER, "independent": True}


def test_a_rank_streams_the_chosen_answer_and_its_events(client, api, llm, server, key):
    for reviewer, order in enumerate(review_orders(3, 5)):
        best = order.index(0) if reviewer != 0 else order.index(2)  # gpt-5's answer is everyone else's first
        llm.script(model=NAMES[reviewer], match="Rank these answers",
                   json={"ranking": [ANSWER_LETTERS[best], ANSWER_LETTERS[1 - best]], "reason": "Sound."})
    answer_panel(llm, "Sixteen.", "Fourteen.", "Twelve.")
    chunks = list(client.chat.completions.create(model="router/debate", messages=QUESTION, stream=True,
                                                 extra_body={"rule": "rank", "seed": 5}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text.startswith("Sixteen.\n\n---\n\n**Ranking**") and "1. openai:gpt-5 (1.00 points a review)" in text
    assert all(c.model == "openai:gpt-5" for c in chunks)
    m = chunks[-1].model_extra["_meta"]
    assert m["rule"] == "rank" and m["decision"]["seed"] == 5 and len(m["decision"]["reviews"]) == 3
    run_id = client.chat.completions.with_raw_response.create(
        model="router/debate", messages=QUESTION, extra_body={"rule": "rank", "seed": 5}).headers["X-Run-Id"]
    events = httpx.get(f"{server.url}/v1/runs/{run_id}/events", headers={"Authorization": f"Bearer {key}"},
                       timeout=30).text
    assert "event: review" in events and "event: decision" in events


@pytest.mark.parametrize(("body", "code", "param"), [
    ({"rule": "majority"}, "invalid_rule", "rule"),
    ({"rule": "vote", "answer_rule": "regex:("}, "invalid_answer_rule", "answer_rule"),
    ({"rule": "rank", "answer_rule": "number"}, "invalid_answer_rule", "answer_rule"),
    ({"rule": "vote", "panel": True}, "invalid_rule", "rule"),
    ({"rule": "vote", "debate": False}, "invalid_rule", "rule"),
])
def test_bad_rules_are_400_naming_the_field(api, body, code, param):
    resp = api.post("/v1/chat/completions", json={"model": "router/debate", "messages": QUESTION, **body})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == code and error["param"] == param and error["type"] == "invalid_request_error"


def test_a_rule_needs_a_router(api):
    resp = api.post("/v1/chat/completions", json={"model": "openai:gpt-5", "messages": QUESTION, "rule": "vote"})
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "router_required"


def test_router_rules_are_validated_and_returned(api):
    created = api.post("/v1/routers", json={"id": "v", "models": PANEL, "rule": "vote", "answerRule": "choice"})
    assert created.status_code == 201 and created.json()["rule"] == "vote" and created.json()["answerRule"] == "choice"
    assert api.get("/v1/routers/debate").json()["rule"] == "synthesis"
    for body, code, param in (({"id": "w", "models": PANEL, "rule": "coin"}, "invalid_rule", "rule"),
                              ({"id": "w", "models": PANEL, "rule": "rank", "panelSize": 2}, "invalid_rule", "rule"),
                              ({"id": "w", "models": PANEL, "answerRule": "number"}, "invalid_answer_rule",
                               "answerRule")):
        resp = api.post("/v1/routers", json=body)
        assert resp.status_code == 400 and resp.json()["error"]["code"] == code, body
        assert resp.json()["error"]["param"] == param
    # Changing the rule away from `vote` while its answer rule stays is refused; clearing both works.
    assert api.patch("/v1/routers/v", json={"rule": "rank"}).json()["error"]["code"] == "invalid_answer_rule"
    changed = api.patch("/v1/routers/v", json={"rule": "rank", "answerRule": None})
    assert changed.status_code == 200 and changed.json()["rule"] == "rank" and changed.json()["answerRule"] is None
    assert api.patch("/v1/routers/v", json={"rule": None}).status_code == 400
    assert [r["id"] for r in api.get("/v1/routers").json()["data"]] == ["debate", "quality", "budget", "v"]


def test_self_moa_samples_one_model(client, llm):
    llm.script(model="claude-opus-4-5", reply="The aggregate.")
    resp = client.chat.completions.create(model="self-moa/openai:gpt-4o", messages=QUESTION)
    m = meta(resp)
    assert [p["model"] for p in m["debate"]["panelists"]] == ["openai:gpt-4o", "openai:gpt-4o #2", "openai:gpt-4o #3"]
    assert m["debate"]["sameFamily"] is True and m["rule"] == "synthesis"
    # The deployment's arbitrator decides: a family outside the panel's one.
    assert resp.choices[0].message.content == "The aggregate." and resp.model == ARBITRATOR
    assert m["decision"]["independent"] is True
    assert sorted(r["model"] for r in llm.requests) == ["claude-opus-4-5", "gpt-4o", "gpt-4o", "gpt-4o"]
    assert len({r["temperature"] for r in llm.requests if r["model"] == "gpt-4o"}) == 3  # three distinct samples
