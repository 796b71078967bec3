"""The Responses API (`POST /v1/responses`) over Parley, driven by the official openai SDK (and the OpenAI Agents SDK)
against the scripted model server: text and items, instructions, streamed and not, function tools, JSON schemas,
debates with their `_meta`, stored responses continued with `previous_response_id`, and what is refused."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import agents
import bson
import httpx
import openai
import openresponses_types
import pytest
from openai.types.responses import Response
from pydantic import BaseModel
from pymongo import AsyncMongoClient

from parley.runs.modes.base import RunFailure
from parley.runs.modes.panel import PanelRun

# The panel API's fixtures: the debate preset on PANEL with ARBITRATOR, a key with credit, the openai SDK and httpx.
from tests.api.test_panel_api import ARBITRATOR, PANEL, api, client, key, server  # noqa: F401
from tests.api.test_tools_api import CALL, RESULT, sent_to

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city now.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                          "additionalProperties": False}, "strict": True}
QUESTION = "Should I take an umbrella in Paris today?"


def meta(response) -> dict:
    return response.model_extra["_meta"]


# The Open Responses specification's model of each stream event, by its `type` (each model's `type` is a one-member
# enum).
OPEN_EVENTS = {next(iter(model.model_fields["type"].annotation)).value: model
               for name, model in vars(openresponses_types).items() if name.endswith("StreamingEvent")}


def open_response(body: dict) -> dict:
    """`body` checked against the Open Responses specification's `response` object (its pydantic model)."""
    openresponses_types.ResponseResource.model_validate(body)
    return body


def open_events(lines: list[str]) -> list[dict]:
    """The events of an SSE stream, each checked against the Open Responses specification's model of its type."""
    payloads = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    for payload in payloads:
        OPEN_EVENTS[payload["type"]].model_validate(payload)
    return payloads


def streamed_lines(api, body: dict) -> list[str]:
    with api.stream("POST", "/v1/responses", json={**body, "stream": True}) as raw:
        assert raw.status_code == 200, raw.read()
        return [line for line in raw.iter_lines() if line]


def script_debate(llm, answer: str | None = "Take the umbrella.") -> None:
    llm.script(model="gpt-5", reply="It may rain: take one.")
    llm.script(model="claude-sonnet-4-5", reply="Yes, rain is forecast.")
    llm.script(model="gemini-2.5-pro", reply="An umbrella is wise.")
    if answer:
        llm.script(model="claude-opus-4-5", reply=answer)


# --- text and items -------------------------------------------------------------------------


def test_a_text_input_is_answered_as_a_response(client, api, llm, sync_db):
    llm.script(model="gpt-4o", reply="Yes, take one.")
    resp = client.responses.create(model="openai:gpt-4o", input=QUESTION)
    Response.model_validate(api.get(f"/v1/responses/{resp.id}").json())  # as the SDK's types say, checked strictly
    assert resp.object == "response" and resp.id.startswith("resp_") and resp.status == "completed"
    assert resp.output_text == "Yes, take one." and resp.model == "openai:gpt-4o"
    [item] = resp.output
    assert item.type == "message" and item.role == "assistant" and item.status == "completed"
    assert item.content[0].type == "output_text"
    assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    run_id = resp.metadata["parley_run_id"]
    assert resp.metadata["parley_router_mode"] == "direct" and meta(resp)["routerMode"] == "direct"
    assert sync_db.runs.find_one({"_id": run_id})["kind"] == "panel"  # a chat completion's run, billed as one
    [sent] = sent_to(llm, "gpt-4o")
    assert sent["messages"] == [{"role": "user", "content": QUESTION}]


def test_items_and_instructions_become_the_conversation(client, llm):
    llm.script(model="gpt-4o", reply="Bring it.")
    resp = client.responses.create(
        model="openai:gpt-4o", instructions="Answer in two words.", temperature=0.2, max_output_tokens=50,
        metadata={"ticket": "T-1"},
        input=[{"role": "user", "content": "Is it raining in Paris?"},
               {"type": "message", "role": "assistant", "id": "msg_earlier", "status": "completed",
                "content": [{"type": "output_text", "text": "Yes.", "annotations": []}]},
               {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]}])
    assert resp.output_text == "Bring it."
    assert resp.instructions == "Answer in two words." and resp.temperature == 0.2 and resp.max_output_tokens == 50
    assert resp.metadata["ticket"] == "T-1"
    [sent] = sent_to(llm, "gpt-4o")
    assert sent["messages"] == [{"role": "system", "content": "Answer in two words."},
                                {"role": "user", "content": "Is it raining in Paris?"},
                                {"role": "assistant", "content": "Yes."},
                                {"role": "user", "content": QUESTION}]
    assert sent["temperature"] == 0.2 and 50 in (sent.get("max_tokens"), sent.get("max_completion_tokens"))


def test_a_streamed_response_arrives_as_the_responses_events(client, api, llm):
    llm.script(model="gpt-4o", reply="Yes, take one: rain is forecast all afternoon.", times=1)
    with api.stream("POST", "/v1/responses", json={"model": "openai:gpt-4o", "input": QUESTION,
                                                    "stream": True}) as raw:
        assert raw.status_code == 200 and raw.headers["x-run-id"]
        lines = [line for line in raw.iter_lines() if line]
    names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    payloads = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert [p["type"] for p in payloads] == names  # each event named as its type
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    deltas = names.count("response.output_text.delta")
    assert deltas > 3  # token by token
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", *["response.output_text.delta"] * deltas,
                     "response.output_text.done", "response.content_part.done", "response.output_item.done",
                     "response.completed"]
    assert payloads[0]["response"]["status"] == "in_progress"
    completed = payloads[-1]["response"]
    assert completed["status"] == "completed" and completed["usage"]["total_tokens"] > 0
    assert completed["output"][0]["content"][0]["text"] == "Yes, take one: rain is forecast all afternoon."
    assert completed["output"][0]["id"] == payloads[2]["item"]["id"]
    # The SDK's own accumulator puts the answer together.
    llm.script(model="gpt-4o", reply="Yes, take one.")
    with client.responses.stream(model="openai:gpt-4o", input=QUESTION) as stream:
        texts = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(texts) == final.output_text == "Yes, take one."


# --- function tools ----------------------------------------------------------------------------------


def test_a_function_tool_call_then_its_output_with_previous_response_id(client, llm):
    llm.script(model="gpt-4o", tool_calls=[CALL], with_tools=True, times=1)
    first = client.responses.create(model="openai:gpt-4o", input=QUESTION, tools=[WEATHER], tool_choice="auto")
    [call] = first.output
    assert call.type == "function_call" and (call.call_id, call.name) == ("call_paris", "get_weather")
    assert json.loads(call.arguments) == {"city": "Paris"} and call.id.startswith("fc_")
    [sent] = sent_to(llm, "gpt-4o")
    assert sent["tools"] == [{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}]
    assert sent["tool_choice"] == "auto"
    llm.script(model="gpt-4o", match=RESULT, reply="Yes: it is raining.")
    second = client.responses.create(model="openai:gpt-4o", previous_response_id=first.id, tools=[WEATHER],
                                     input=[{"type": "function_call_output", "call_id": "call_paris",
                                             "output": RESULT}])
    assert second.output_text == "Yes: it is raining." and second.previous_response_id == first.id
    followup = sent_to(llm, "gpt-4o")[-1]["messages"]
    assert followup[0] == {"role": "user", "content": QUESTION}
    assert followup[1]["role"] == "assistant" and followup[1]["tool_calls"][0]["id"] == "call_paris"
    assert followup[2] == {"role": "tool", "tool_call_id": "call_paris", "content": RESULT}
    # Retrieved, a stored response is what was answered.
    again = client.responses.retrieve(first.id)
    assert again.output[0].id == call.id and again.output[0].arguments == call.arguments
    assert again.status == "completed" and again.model_dump(exclude={"completed_at"}) == first.model_dump(
        exclude={"completed_at"})


def test_a_streamed_function_call_arrives_as_arguments_deltas(client, llm):
    llm.script(model="gpt-4o", tool_calls=[CALL], with_tools=True)
    with client.responses.stream(model="openai:gpt-4o", input=QUESTION, tools=[WEATHER],
                                 tool_choice={"type": "function", "name": "get_weather"}) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds.count("response.function_call_arguments.delta") > 1 and "response.function_call_arguments.done" in kinds
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == {"city": "Paris"}
    [call] = final.output
    assert call.type == "function_call" and call.call_id == "call_paris" and json.loads(call.arguments) == {
        "city": "Paris"}
    assert sent_to(llm, "gpt-4o")[0]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_a_debate_calls_the_tool_through_its_arbitrator(client, llm):
    script_debate(llm, answer=None)
    llm.script(model="claude-opus-4-5", tool_calls=[CALL], with_tools=True)
    resp = client.responses.create(model="router/debate", input=QUESTION, tools=[WEATHER])
    assert resp.output[0].type == "function_call" and resp.output[0].name == "get_weather"
    assert meta(resp)["routerMode"] == "debate" and resp.model == ARBITRATOR


# --- JSON schema ------------------------------------------------------------------------------------------


class Verdict(BaseModel):
    umbrella: bool
    reason: str


def test_a_json_schema_format_gives_that_json_and_the_sdk_parses_it(client, llm):
    llm.script(model="gpt-4o", json={"umbrella": True, "reason": "rain"})
    resp = client.responses.parse(model="openai:gpt-4o", input=QUESTION, text_format=Verdict)
    assert resp.output_parsed == Verdict(umbrella=True, reason="rain")
    [sent] = sent_to(llm, "gpt-4o")
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["name"] == "Verdict"


def test_a_debate_answers_json_streamed_and_not(client, llm):
    for _ in range(2):
        for model in ("gpt-5", "claude-sonnet-4-5", "gemini-2.5-pro"):
            llm.script(model=model, reply="Rain is likely: take it.", times=1)
        llm.script(model="claude-opus-4-5", json={"umbrella": True, "reason": "the panel agrees"}, times=1)
    fmt = {"format": {"type": "json_schema", "name": "verdict", "strict": True, "schema": {
        "type": "object", "properties": {"umbrella": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["umbrella", "reason"], "additionalProperties": False}}}
    plain = client.responses.create(model="router/debate", input=QUESTION, text=fmt)
    assert json.loads(plain.output_text) == {"umbrella": True, "reason": "the panel agrees"}
    assert meta(plain)["debate"]["arbitrator"] == ARBITRATOR
    with client.responses.stream(model="router/debate", input=QUESTION, text=fmt) as stream:
        streamed = stream.get_final_response()
    assert json.loads(streamed.output_text) == {"umbrella": True, "reason": "the panel agrees"}


# --- debates -------------------------------------------------------------------------------------------------


def test_a_debate_carries_its_meta_streamed_and_not(client, api, llm, sync_db):
    script_debate(llm)
    resp = client.responses.create(model="router/debate", input=QUESTION)
    assert resp.output_text == "Take the umbrella." and resp.model == ARBITRATOR
    m = meta(resp)
    assert m["routerMode"] == "debate" and [p["model"] for p in m["debate"]["panelists"]] == PANEL
    assert m["status"]["outcome"] == "answered" and "analysis" in m
    assert resp.metadata["parley_router_mode"] == "debate"
    assert {r["model"] for r in sync_db.usage.find({"requestId": resp.id})} == {*PANEL, ARBITRATOR}
    with api.stream("POST", "/v1/responses", json={"model": "router/debate", "input": QUESTION, "stream": True}
                    ) as raw:
        lines = [line for line in raw.iter_lines() if line]
    assert any(line.startswith(": panelist") for line in lines)  # progress, as comments the SDK skips
    completed = json.loads(next(line for line in reversed(lines) if line.startswith("data: ")).removeprefix("data: "))
    assert completed["type"] == "response.completed"
    assert completed["response"]["_meta"]["debate"]["arbitrator"] == ARBITRATOR
    with client.responses.stream(model="router/debate", input=QUESTION) as stream:
        final = stream.get_final_response()
    assert final.output_text == "Take the umbrella." and meta(final)["routerMode"] == "debate"


def test_a_council_is_chosen_as_in_chat(client, llm):
    council = ["openai:gpt-5", "anthropic:claude-opus-4-5", "mistral:mistral-large-latest"]
    for model in ("gpt-5", "claude-opus-4-5", "mistral-large-latest"):
        llm.script(model=model, reply="Take an umbrella.")
    llm.script(model="gemini-2.5-pro", reply="The council's answer.")
    resp = client.responses.create(model="router/debate", input=QUESTION,
                                   extra_body={"models": council, "arbitrator": "google:gemini-2.5-pro"})
    assert resp.output_text == "The council's answer." and resp.model == "google:gemini-2.5-pro"
    assert [p["model"] for p in meta(resp)["debate"]["panelists"]] == council


def test_a_failed_debate_is_an_openai_error_and_a_failed_event(client, api, llm):
    llm.script(model="claude-sonnet-4-5", status=401)
    llm.script(model="gemini-2.5-pro", status=401)
    with pytest.raises(openai.APIStatusError) as caught:
        client.responses.create(model="router/debate", input=QUESTION)
    assert caught.value.status_code == 502 and caught.value.body["code"] == "too_few_panelists"
    with client.responses.stream(model="router/debate", input=QUESTION) as stream:
        events = list(stream)
    assert events[-1].type == "response.failed"
    assert events[-1].response.status == "failed" and events[-1].response.error.code == "too_few_panelists"


# --- the Open Responses schema -------------------------------------------------------------------------------


def test_responses_and_their_events_fit_the_open_responses_schema(client, api, llm):
    """Every `response` object (answered, a tool call, failed, read back) and every stream event (text, a tool call's
    arguments, a failure, the `error` of a cancelled stream) is what the published schema's models take."""
    llm.script(model="gpt-4o", reply="Yes, take one.", times=2)
    text = open_response(api.post("/v1/responses", json={"model": "openai:gpt-4o", "input": QUESTION}).json())
    assert text["temperature"] == 1.0 and text["top_p"] == 1.0 and text["presence_penalty"] == 0.0
    assert text["service_tier"] == "default" and text["max_tool_calls"] is None and text["top_logprobs"] == 0
    open_response(api.get(f"/v1/responses/{text['id']}").json())
    events = open_events(streamed_lines(api, {"model": "openai:gpt-4o", "input": QUESTION, "temperature": 0.3,
                                              "safety_identifier": "u-1", "prompt_cache_key": "k-1"}))
    assert events[-1]["type"] == "response.completed" and events[-1]["response"]["temperature"] == 0.3
    assert events[-1]["response"]["safety_identifier"] == "u-1" and events[-1]["response"]["prompt_cache_key"] == "k-1"
    llm.script(model="gpt-4o", tool_calls=[CALL], with_tools=True, times=2)
    call = open_response(api.post("/v1/responses", json={"model": "openai:gpt-4o", "input": QUESTION,
                                                         "tools": [WEATHER]}).json())
    assert call["output"][0]["type"] == "function_call"
    kinds = [e["type"] for e in open_events(streamed_lines(api, {"model": "openai:gpt-4o", "input": QUESTION,
                                                                  "tools": [WEATHER]}))]
    assert "response.function_call_arguments.done" in kinds
    llm.script(model="claude-sonnet-4-5", status=401)
    llm.script(model="gemini-2.5-pro", status=401)
    failed = open_events(streamed_lines(api, {"model": "router/debate", "input": QUESTION}))
    assert failed[-1]["type"] == "response.failed"
    assert open_response(api.get(f"/v1/responses/{failed[0]['response']['id']}").json())["status"] == "failed"
    llm.script(model="gpt-4o", reply="Slowly.", hold="cancel")
    with api.stream("POST", "/v1/responses", json={"model": "openai:gpt-4o", "input": QUESTION,
                                                    "stream": True}) as raw:
        lines = raw.iter_lines()
        created = json.loads(next(line for line in lines if line.startswith("data: ")).removeprefix("data: "))
        llm.wait_held("cancel")
        held = open_response(api.get(f"/v1/responses/{created['response']['id']}").json())
        assert held["status"] == "in_progress"
        assert api.post(f"/v1/runs/{held['metadata']['parley_run_id']}/cancel").status_code == 202
        rest = [line for line in lines if line]
        llm.release("cancel")
    [error] = [e for e in open_events(rest) if e["type"] == "error"]
    assert error["code"] == "cancelled" and error["error"]["code"] == "cancelled"


# --- stored responses ---------------------------------------------------------------------------------------


def test_a_response_not_stored_cannot_be_continued_or_read(client, llm, sync_db):
    llm.script(model="gpt-4o", reply="Yes.")
    resp = client.responses.create(model="openai:gpt-4o", input=QUESTION, store=False)
    assert resp.store is False and sync_db.responses.count_documents({}) == 0
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="openai:gpt-4o", input="And tomorrow?", previous_response_id=resp.id)
    assert caught.value.body["code"] == "response_not_found" and "store: false" in caught.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)


def test_another_users_or_workspaces_response_is_not_found(server, client, make_key, llm):
    llm.script(model="gpt-4o", reply="Yes.")
    resp = client.responses.create(model="openai:gpt-4o", input=QUESTION)
    for user, workspace in (("bob", "ws1"), ("alice", "ws2")):
        with openai.OpenAI(base_url=server.url + "/v1", api_key=make_key(["chat"], user=user, workspace=workspace),
                           max_retries=0) as other:
            with pytest.raises(openai.NotFoundError) as caught:
                other.responses.create(model="openai:gpt-4o", input="And tomorrow?", previous_response_id=resp.id)
            assert caught.value.body["code"] == "response_not_found"
            with pytest.raises(openai.NotFoundError):
                other.responses.retrieve(resp.id)
            with pytest.raises(openai.NotFoundError):
                other.responses.delete(resp.id)
    assert client.responses.retrieve(resp.id).output_text == "Yes."
    client.responses.delete(resp.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)


def test_a_response_still_running_cannot_be_continued(client, api, llm):
    llm.script(model="gpt-4o", reply="Slowly.", hold="slow")
    with api.stream("POST", "/v1/responses", json={"model": "openai:gpt-4o", "input": QUESTION,
                                                    "stream": True}) as raw:
        lines = raw.iter_lines()
        created = json.loads(next(line for line in lines if line.startswith("data: ")).removeprefix("data: "))
        response_id = created["response"]["id"]
        llm.wait_held("slow")
        assert client.responses.retrieve(response_id).status == "in_progress"
        refused = api.post("/v1/responses", json={"model": "openai:gpt-4o", "input": "More?",
                                                  "previous_response_id": response_id})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "response_not_completed"
        llm.release("slow")
        assert any("response.completed" in line for line in lines)
    assert client.responses.retrieve(response_id).output_text == "Slowly."


def turn_text(turn: int) -> str:
    return f"Turn {turn}: " + "the forecast, again. " * 100


def continue_chain(client, turns: int, previous: str | None = None) -> list[str]:
    ids = []
    for turn in range(turns):
        previous = client.responses.create(model="openai:gpt-4o", input=turn_text(turn),
                                           previous_response_id=previous).id
        ids.append(previous)
    return ids


def test_a_turn_stores_what_it_adds_and_the_model_reads_the_whole_conversation(client, llm, sync_db):
    """Each response keeps its own input and refers to the one it continues; so does its run. The model still reads
    the whole conversation, put back together from the chain."""
    llm.script(model="gpt-4o", reply="Noted.")
    ids = continue_chain(client, 6)
    sent = sent_to(llm, "gpt-4o")[-1]["messages"]
    assert sent == [message for turn in range(6) for message in (
        {"role": "user", "content": turn_text(turn)}, {"role": "assistant", "content": "Noted."})][:-1]
    docs = {doc["_id"]: doc for doc in sync_db.responses.find()}
    for turn, response_id in enumerate(ids):
        doc = docs[response_id]
        assert doc["messages"] == [{"role": "user", "content": turn_text(turn)}]
        assert doc["previous"] == (ids[turn - 1] if turn else None)
        run = sync_db.runs.find_one({"_id": doc["run"]})
        assert run["input"]["graph"]["messages"] == [{"role": "user", "content": turn_text(turn)}]
        assert run["input"].get("history", {}).get("response") == doc["previous"]
    sizes = [len(bson.encode(docs[response_id])) for response_id in ids]
    assert max(sizes) - min(sizes) < 200, sizes  # the sixth turn stores what the first did, not six times it
    assert sync_db.stored_bytes.find_one({"_id": "ws1"})["responses"] == sum(doc["bytes"] for doc in docs.values())
    # Storing a turn keeps the responses it continues as long as itself.
    assert {docs[response_id]["expiresAt"] for response_id in ids} == {docs[ids[-1]]["expiresAt"]}


def test_a_conversation_whose_chain_is_gone_cannot_be_continued(client, api, llm, sync_db):
    """Deleting a response in the middle of a conversation leaves the later ones readable; continuing one of them
    is a 404 `response_chain_broken` naming the response gone, and stores nothing. An earlier one goes on."""
    llm.script(model="gpt-4o", reply="Noted.")
    first, middle, last = continue_chain(client, 3)
    client.responses.delete(middle)
    counted = sync_db.stored_bytes.find_one({"_id": "ws1"})["responses"]
    asked = len(llm.requests)
    refused = api.post("/v1/responses", json={"model": "openai:gpt-4o", "input": "And then?",
                                              "previous_response_id": last})
    assert refused.status_code == 404, refused.text
    error = refused.json()["error"]
    assert error["code"] == "response_chain_broken" and middle in error["message"]
    assert error["param"] == "previous_response_id"
    assert len(llm.requests) == asked and sync_db.responses.count_documents({}) == 2
    assert sync_db.stored_bytes.find_one({"_id": "ws1"})["responses"] == counted
    assert client.responses.retrieve(last).output_text == "Noted."
    again = client.responses.create(model="openai:gpt-4o", input="Once more.", previous_response_id=first)
    assert sent_to(llm, "gpt-4o")[-1]["messages"] == [{"role": "user", "content": turn_text(0)},
                                                      {"role": "assistant", "content": "Noted."},
                                                      {"role": "user", "content": "Once more."}]
    # A response of the chain that expired (the TTL index had not removed it yet) is gone as well.
    sync_db.responses.update_one({"_id": first}, {"$set": {"expiresAt": datetime.now(UTC) - timedelta(seconds=1)}})
    expired = api.post("/v1/responses", json={"model": "openai:gpt-4o", "input": "And then?",
                                              "previous_response_id": again.id})
    assert expired.status_code == 404 and expired.json()["error"]["code"] == "response_chain_broken"


def test_a_run_reads_the_conversation_it_continues_back_from_the_chain(client, llm, sync_db, parley_env):
    """A run started (or resumed on another worker) reads the conversation back; one whose chain is gone by then
    fails `response_chain_broken`, rather than answer a conversation missing turns."""
    llm.script(model="gpt-4o", reply="Noted.")
    first, second = continue_chain(client, 2)
    run = sync_db.runs.find_one({"_id": sync_db.responses.find_one({"_id": second})["run"]})

    async def prepared() -> list[dict]:
        mongo = AsyncMongoClient(parley_env.mongodb_uri, tz_aware=True)
        try:
            mode = PanelRun(run, SimpleNamespace(db=mongo[parley_env.mongodb_db]))
            await mode.prepare()
            return mode.graph_input()["messages"]
        finally:
            await mongo.close()

    assert asyncio.run(prepared()) == [{"role": "user", "content": turn_text(0)},
                                       {"role": "assistant", "content": "Noted."},
                                       {"role": "user", "content": turn_text(1)}]
    client.responses.delete(first)
    with pytest.raises(RunFailure) as failed:
        asyncio.run(prepared())
    assert failed.value.error["code"] == "response_chain_broken" and first in failed.value.error["message"]


def test_a_workspaces_stored_responses_are_bounded(parley_env, client, api, llm, sync_db):
    """Past PARLEY_WORKSPACE_MAX_STORED_BYTES a response to store is a 413 `storage_quota_exceeded` that starts no
    run and loses nothing stored; `store: false` is still answered, and deleting a response (or its expiry) makes
    room."""
    llm.script(model="gpt-4o", reply="Noted.")
    [kept] = continue_chain(client, 1)
    size = sync_db.responses.find_one({"_id": kept})["bytes"]
    parley_env.parley_workspace_max_stored_bytes = 2 * size + size // 2
    [second] = continue_chain(client, 1)
    asked = len(llm.requests)
    refused = api.post("/v1/responses", json={"model": "openai:gpt-4o", "input": turn_text(0)})
    assert refused.status_code == 413, refused.text
    error = refused.json()["error"]
    assert error["code"] == "storage_quota_exceeded" and "PARLEY_WORKSPACE_MAX_STORED_BYTES" in error["message"]
    assert len(llm.requests) == asked and sync_db.runs.count_documents({}) == 2
    assert sync_db.stored_bytes.find_one({"_id": "ws1"})["responses"] == 2 * size
    assert [client.responses.retrieve(i).output_text for i in (kept, second)] == ["Noted.", "Noted."]
    assert client.responses.create(model="openai:gpt-4o", input=turn_text(0), store=False).output_text == "Noted."
    client.responses.delete(kept)
    [third] = continue_chain(client, 1)
    assert api.post("/v1/responses", json={"model": "openai:gpt-4o", "input": turn_text(0)}).status_code == 413
    # Expired responses the TTL index has not removed yet are counted out when the bound would refuse, once the
    # last count is a minute old (a refused client does not make the database count at each request).
    past = datetime.now(UTC) - timedelta(seconds=1)
    sync_db.responses.update_many({}, {"$set": {"expiresAt": past}})
    assert api.post("/v1/responses", json={"model": "openai:gpt-4o", "input": turn_text(0)}).status_code == 413
    sync_db.stored_bytes.update_one({"_id": "ws1"}, {"$set": {"countedAt": past - timedelta(minutes=1)}})
    continue_chain(client, 1)
    assert sync_db.stored_bytes.find_one({"_id": "ws1"})["responses"] == size


# --- refusals ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "code", "names"), [
    ({"input": ""}, "invalid_request", "input"),
    ({"input": " \n"}, "invalid_request", "non-blank"),
    ({"input": []}, "invalid_request", "input"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "invalid_input", "function_call_output"),
    ({"input": [{"role": "user", "content": "  "}]}, "invalid_request", "non-empty"),
    ({"input": [{"type": "function_call_output", "call_id": "call_x", "output": "42"}]}, "invalid_tool_messages",
     "call_x"),
    ({"tools": [{"type": "web_search"}]}, "invalid_tools", "web_search"),
    ({"tools": [{"type": "function", "name": "bad name!"}]}, "invalid_tools", "bad name!"),
    ({"tool_choice": {"type": "file_search"}}, "invalid_tools", "tool_choice"),
    ({"text": {"format": {"type": "yaml"}}}, "invalid_response_format", "text.format"),
    ({"background": True}, "unsupported_parameter", "background"),
    ({"conversation": "conv_1"}, "unsupported_parameter", "conversation"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "invalid_request", "metadata"),
    ({"metadata": {"k": "v" * 513}}, "invalid_request", "metadata"),
    ({"debate": True}, "router_required", "router"),
    ({"temperature": 3}, "invalid_request", "temperature"),
])
def test_bad_bodies_are_400_in_openai_shape(api, llm, body, code, names):
    resp = api.post("/v1/responses", json={"model": "openai:gpt-4o", "input": QUESTION, **body})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error" and names in error["message"], error
    assert llm.requests == []


def test_a_budget_is_checked_as_in_chat(client, llm, sync_db):
    with pytest.raises(openai.APIStatusError) as refused:
        client.responses.create(model="openai:gpt-5", input=QUESTION, extra_body={"parley_budget": {"maxTokens": 10}})
    assert refused.value.status_code == 402 and refused.value.body["code"] == "budget_too_small"
    assert not llm.requests
    answered = client.responses.create(model="openai:gpt-5", input=QUESTION,
                                       extra_body={"parley_budget": {"maxCost": 0.5}})
    run = sync_db.runs.find_one({"_id": answered.metadata["parley_run_id"]})
    assert run["budget"]["limits"] == {"maxCost": 0.5} and run["budget"]["spent"]["costUsd"] <= 0.5


def test_the_responses_routes_need_the_chat_scope(server, make_key):
    with openai.OpenAI(base_url=server.url + "/v1", api_key=make_key(["conversations"]), max_retries=0) as sdk:
        with pytest.raises(openai.PermissionDeniedError) as caught:
            sdk.responses.create(model="openai:gpt-4o", input=QUESTION)
    assert caught.value.body["code"] == "scope_denied"
    resp = httpx.post(server.url + "/v1/responses", json={"model": "openai:gpt-4o", "input": QUESTION})
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "invalid_api_key"


# --- the OpenAI Agents SDK ------------------------------------------------------------------------------------


def test_the_agents_sdk_runs_an_agent_with_a_tool_on_parley(server, key, llm, monkeypatch):
    """Its default model (the Responses API) on the default client pointed at Parley, and the same model named,
    streamed."""
    asked: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        asked.append(city)
        return RESULT

    llm.script(model="gpt-4o", tool_calls=[CALL], with_tools=True, times=1)
    llm.script(model="gpt-4o", match=RESULT, reply="Take an umbrella: rain, 18 degrees.")
    monkeypatch.setattr(agents.models._openai_shared, "_default_openai_client", None)  # given back after the test

    async def run() -> tuple[str, str]:
        sdk = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)
        agents.set_default_openai_client(sdk, use_for_tracing=False)
        agent = agents.Agent(name="Forecaster", instructions="Answer with the weather tool.", model="openai:gpt-4o",
                             tools=[get_weather])
        plain = await agents.Runner.run(agent, QUESTION)
        llm.script(model="gpt-4o", tool_calls=[CALL], with_tools=True, times=1)
        named = agent.clone(model=agents.OpenAIResponsesModel(model="openai:gpt-4o", openai_client=sdk))
        streamed = agents.Runner.run_streamed(named, QUESTION)
        async for _ in streamed.stream_events():
            pass
        await sdk.close()
        return plain.final_output, streamed.final_output

    agents.set_tracing_disabled(True)
    plain, streamed = asyncio.run(run())
    assert plain == streamed == "Take an umbrella: rain, 18 degrees."
    assert asked == ["Paris", "Paris"]
    calls = sent_to(llm, "gpt-4o")
    assert len(calls) == 4
    assert calls[0]["messages"][0] == {"role": "system", "content": "Answer with the weather tool."}
    assert calls[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_paris", "content": RESULT}
    assert calls[2]["stream"] is True
