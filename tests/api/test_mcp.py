"""Parley's MCP endpoint (`/mcp`, streamable HTTP) driven by the official `mcp` client, against Parley served over
real HTTP with the scripted model server: tools by scope, progress, structured results, errors worded as the HTTP
API's, cancellation (at both protocol eras) and resources."""

from __future__ import annotations

import json

import anyio
import pytest
from mcp import MCPError

# The panel tests' Parley and preset: PANEL, and ARBITRATOR of a panelist's family.
from tests.api.test_panel_api import ARBITRATOR, PANEL, server  # noqa: F401
from tests.api.test_runs_api import WORKFLOW, auth
from tests.support.duel import script_duel
from tests.support.mcp import Progress, http_client, latest_run, run_record, until, until_status

EVERY_TOOL = ["duel", "ask_panel", "roundtable_ask", "run_workflow", "get_run", "list_runs", "steer_run",
              "cancel_run"]
DUEL = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 2}


@pytest.fixture
def parley(server):
    """Parley with the panel tests' preset (PANEL, ARBITRATOR), served over HTTP."""
    return server


async def test_the_keys_scopes_decide_which_tools_are_listed(parley, make_key):
    expected = {
        ("admin",): EVERY_TOOL,
        ("readonly",): ["get_run", "list_runs"],
        ("debate",): ["duel", "get_run", "list_runs", "steer_run", "cancel_run"],
        ("chat", "conversations"): ["ask_panel", "roundtable_ask", "get_run", "list_runs", "steer_run",
                                    "cancel_run"],
    }
    for scopes, tools in expected.items():
        async with http_client(parley.url, make_key(scopes)) as client:
            listed = (await client.list_tools()).tools
            assert [tool.name for tool in listed] == tools, scopes
    async with http_client(parley.url, make_key(["admin"])) as client:
        duel = next(tool for tool in (await client.list_tools()).tools if tool.name == "duel")
    assert duel.input_schema["required"] == ["topic", "userProfile"]
    assert {"runId", "winner", "synthesis", "messages"} <= set(duel.output_schema["properties"])
    assert duel.description and duel.title == "Duel" and duel.annotations.read_only_hint is False


async def test_a_tool_the_key_may_not_use_is_refused_as_the_http_api_refuses_it(parley, http, make_key):
    reader = make_key(["readonly"])
    async with http_client(parley.url, reader) as client:
        result = await client.call_tool("duel", DUEL)
    assert result.is_error and result.content[0].text == "This key is read-only"
    assert result.structured_content == {"error": "This key is read-only", "status": 403, "code": "read_only_key"}
    assert http.post("/api/debate", json=DUEL, headers=auth(reader)).json()["error"] == "This key is read-only"
    async with http_client(parley.url, make_key(["chat"])) as client:
        result = await client.call_tool("run_workflow", {"workflow": WORKFLOW})
    assert result.is_error and result.content[0].text == "This key lacks the 'workflows' scope"
    assert http.post("/v1/workflows/runs", json={"workflow": WORKFLOW}, headers=auth(make_key(["chat"]))).json()[
        "error"] == "This key lacks the 'workflows' scope"


async def test_no_key_or_an_unknown_key_is_401(parley, http):
    resp = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"
    assert resp.json() == {"error": "Unauthorized", "code": "invalid_api_key"}
    with pytest.raises(BaseException) as refused:
        async with http_client(parley.url, "pk_not_a_key") as client:
            await client.list_tools()
    cause = refused.value
    while isinstance(cause, BaseExceptionGroup):  # raised in the client's task group
        cause = cause.exceptions[0]
    assert isinstance(cause, MCPError) and cause.message == "Server returned an error response"  # the SDK's 401


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_duel_reports_each_step_and_answers_with_its_verdict(parley, make_key, llm, mode):
    script_duel(llm)
    key = make_key(["debate"])
    progress = Progress()
    async with http_client(parley.url, key, mode=mode) as client:
        result = await client.call_tool("duel", DUEL, progress_callback=progress)
    assert not result.is_error, result.content
    data = result.structured_content
    run_id = data["runId"]
    assert result.meta["parley/runId"] == run_id
    assert data["winner"] == "user" and data["synthesis"]["winner"] == "user" and len(data["verdicts"]) == 2
    assert [m["name"] for m in data["messages"]] == ["Ada", "Margaret Hale"] * 2
    assert data["opponentProfile"]["name"] == "Margaret Hale" and data["userProfile"] == {"name": "Ada"}
    assert result.content[0].text.startswith("Winner: Ada (user)")
    assert progress.messages == ["opponent: Margaret Hale", "Ada is speaking", "Ada has spoken",
                                 "Margaret Hale is speaking", "Margaret Hale has spoken", "Ada is speaking",
                                 "Ada has spoken", "Margaret Hale is speaking", "Margaret Hale has spoken",
                                 "the judges are deciding", "verdict: user"]
    assert [p for p, _, _ in progress.seen] == list(range(1, 12)) and {t for _, t, _ in progress.seen} == {11}
    run = await run_record(parley.url, key, run_id)
    assert run["kind"] == "duel" and run["status"] == "completed" and run["result"]["winner"] == "user"


async def test_ask_panel_asks_a_router_and_answers_with_the_arbitrators_answer_and_meta(parley, make_key, llm,
                                                                                      sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(model="claude-opus-4-5", reply="Consistency, availability, partition tolerance: pick two.")
    key = make_key(["chat"])
    progress = Progress()
    async with http_client(parley.url, key) as client:
        result = await client.call_tool("ask_panel", {"question": "Explain the CAP theorem", "router": "debate"},
                                        progress_callback=progress)
        transcript = (await client.read_resource(f"parley://runs/{result.structured_content['runId']}")).contents[0]
    assert not result.is_error, result.content
    data = result.structured_content
    assert data["answer"] == result.content[0].text == "Consistency, availability, partition tolerance: pick two."
    assert data["model"] == ARBITRATOR and data["usage"]["total_tokens"] > 0
    assert data["_meta"]["routerMode"] == "debate" and len(data["_meta"]["debate"]["panelists"]) == 3
    assert progress.messages[0] == "panel: " + ", ".join(PANEL)
    assert sum(message.startswith("panelist ") for message in progress.messages) == 3
    assert progress.messages[-2:] == [f"arbitrator {ARBITRATOR} is answering",
                                      f"rule synthesis: arbitrator chose {ARBITRATOR}"]
    run = await run_record(parley.url, key, data["runId"])
    assert run["kind"] == "panel" and run["status"] == "completed"
    assert run["input"]["graph"]["messages"] == [{"role": "user", "content": "Explain the CAP theorem"}]
    assert transcript.text.count("### ") == 3 and f"## Answer ({ARBITRATOR})" in transcript.text
    assert transcript.text.rstrip().endswith("Consistency, availability, partition tolerance: pick two.")


async def test_ask_panel_takes_a_council_and_reports_its_map_and_adaptive_path(parley, make_key, llm, sync_db):
    """The MCP tool chooses the panel and judge as a chat completion's body does, and its progress says where the
    first seats stood and how far the answers agree."""
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    council = ["openai:gpt-5", "google:gemini-2.5-pro", "mistral:mistral-large-latest"]
    llm.script(model="gpt-5", reply="Use a queue. Retries stay simple.")
    llm.script(model="gemini-2.5-pro", reply="Use a queue. Retries stay simple.")
    progress = Progress()
    async with http_client(parley.url, make_key(["chat"])) as client:
        result = await client.call_tool("ask_panel", {
            "question": "Queue or direct calls?", "models": council, "arbitrator": "anthropic:claude-opus-4-5",
            "criteria": "Prefer what fails loudly.", "depth": "adaptive"}, progress_callback=progress)
    assert not result.is_error, result.content
    meta = result.structured_content["_meta"]
    assert [p["model"] for p in meta["debate"]["panelists"]] == council[:2] and meta["adaptive"]["path"] == "agreed"
    assert meta["analysis"]["agreement"] == 1.0 and meta["status"]["outcome"] == "answered"
    assert "adaptive: the first 2 seats agree (1.00 ≥ 0.60); deciding on them" in progress.messages
    assert any(line.startswith("agreement 1.00: ") for line in progress.messages)
    assert "the first seats agreed: openai:gpt-5's answer, as written" in progress.messages
    assert sorted(r["model"] for r in llm.requests) == ["gemini-2.5-pro", "gpt-5"]  # no third seat, no arbitrator


async def test_ask_panel_passes_its_rule_to_the_chat_completion(parley, http, make_key, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    for model, reply in zip(("gpt-5", "claude-sonnet-4-5", "gemini-2.5-pro"), ("8 + 8.\nAnswer: 16", "Answer: 16",
                                                                              "Answer: 14")):
        llm.script(model=model, reply=reply)
    key = make_key(["chat"])
    progress = Progress()
    async with http_client(parley.url, key) as client:
        voted = await client.call_tool("ask_panel", {"question": "What is 8 + 8?", "rule": "vote",
                                                     "answer_rule": "number"}, progress_callback=progress)
        unknown = await client.call_tool("ask_panel", {"question": "What is 8 + 8?", "rule": "majority"})
    meta = voted.structured_content["_meta"]
    assert meta["rule"] == "vote" and meta["decision"]["answer"] == "16" and meta["decision"]["decidedBy"] == "majority"
    assert voted.structured_content["answer"].startswith("8 + 8.\nAnswer: 16")
    assert progress.messages[-1].startswith("rule vote: ")
    assert not any(r["model"] == "claude-opus-4-5" for r in llm.requests)  # a vote needs no arbitrator
    by_http = http.post("/v1/chat/completions", headers=auth(key), json={
        "model": "router/debate", "messages": [{"role": "user", "content": "What is 8 + 8?"}], "rule": "majority"})
    assert unknown.is_error and unknown.structured_content["code"] == by_http.json()["error"]["code"] == "invalid_rule"
    assert unknown.content[0].text == by_http.json()["error"]["message"]


async def test_refusals_are_tool_errors_with_the_http_apis_messages(parley, http, make_key, sync_db, llm):
    key = make_key(["admin"])
    async with http_client(parley.url, key) as client:
        async def refused(tool: str, arguments: dict) -> dict:
            result = await client.call_tool(tool, arguments)
            assert result.is_error and result.content[0].text == result.structured_content["error"]
            return result.structured_content

        # the duel's arguments are checked as POST /api/debate checks its body
        assert (await refused("duel", {"topic": "", "userProfile": {"name": "Ada"}}))["error"] == \
            http.post("/api/debate", json={"topic": "", "userProfile": {"name": "Ada"}},
                      headers=auth(key)).json()["error"] == "Missing topic or userProfile"
        assert (await refused("duel", {"topic": "x", "userProfile": {"name": "Ada"}, "rounds": 99}))["error"] == \
            "rounds must be an integer from 1 to 10"
        # ask_panel's, as chat completions check theirs
        no_router = await refused("ask_panel", {"question": "Hi", "router": "nope"})
        by_http = http.post("/v1/chat/completions", headers=auth(key), json={
            "model": "router/nope", "messages": [{"role": "user", "content": "Hi"}]}).json()["error"]
        assert no_router == {"error": by_http["message"], "status": 404, "code": by_http["code"]}
        assert (await refused("ask_panel", {"question": "Hi", "max_tokens": 0}))["error"] == \
            "Invalid request: max_tokens: Input should be greater than or equal to 1"
        assert "either `question` or `messages`" in (await refused("ask_panel", {"router": "debate"}))["error"]
        broke = await refused("ask_panel", {"question": "Hi"})  # the workspace has no credit
        assert broke["status"] == 402 and broke["code"] == "insufficient_credits"
        # the runs', as /v1/runs words them
        missing = await refused("get_run", {"runId": "run_nope"})
        assert missing == {"error": "No run 'run_nope' in this workspace", "status": 404, "code": "run_not_found"}
        assert http.get("/v1/runs/run_nope", headers=auth(key)).json()["error"] == missing["error"]
        assert (await refused("list_runs", {"cursor": "garbage"}))["code"] == "invalid_request"
        assert (await refused("roundtable_ask", {"question": "Lyon?"}))["error"] == \
            "No agents found. Please create agents first."
        assert sync_db.conversations.count_documents({}) == 0  # the conversation opened for it is gone again
        assert (await refused("run_workflow", {"workflowId": "wf_nope"}))["error"] == \
            "No workflow 'wf_nope' in this workspace"
        # a finished run cannot be cancelled
        script_duel(llm)
        done = (await client.call_tool("duel", DUEL)).structured_content["runId"]
        ended = await refused("cancel_run", {"runId": done})
        assert ended["code"] == "run_finished" and ended["run"]["status"] == "completed"
        assert ended["error"] == http.post(f"/v1/runs/{done}/cancel", headers=auth(key)).json()["error"]
        with pytest.raises(MCPError, match="Unknown tool: poem"):
            await client.call_tool("poem", {})


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_cancelling_a_duel_call_cancels_its_run(parley, make_key, llm, sync_db, mode):
    """The 2026-07-28 client closes the call's response; the 2025-11-25 client posts `notifications/cancelled`."""
    script_duel(llm, opponent_turn={"hold": "opponent"})
    key = make_key(["debate"])
    progress = Progress()
    async with http_client(parley.url, key, mode=mode) as client:
        async with anyio.create_task_group() as calls:
            calls.start_soon(lambda: client.call_tool("duel", DUEL, progress_callback=progress))
            await anyio.to_thread.run_sync(llm.wait_held, "opponent")
            await until(lambda: "Ada has spoken" in progress.messages, "the first turn's progress")
            asked = len(llm.requests)
            calls.cancel_scope.cancel()
        run = await until_status(parley.url, key, (await latest_run(parley.url, key, "duel"))["id"], "cancelled")
    llm.release("opponent")
    assert run["cancelRequested"] is True
    debate = sync_db.debates.find_one({"_id": run["id"]})
    assert debate["status"] == "cancelled" and [m["name"] for m in debate["messages"]] == ["Ada"]
    assert len(llm.requests) == asked  # no model was asked anything after the cancel


async def test_roundtable_ask_opens_a_conversation_or_asks_in_one(parley, http, make_key, llm):
    key = make_key(["conversations"])
    for name in ("Claire", "Marc"):
        assert http.post("/v1/agents", json={"name": name, "role": "Finance"}, headers=auth(key)).status_code == 201
    progress = Progress()
    async with http_client(parley.url, key) as client:
        first = await client.call_tool("roundtable_ask", {"question": "Open an office in Lyon?"},
                                       progress_callback=progress)
        assert not first.is_error, first.content
        conversation = first.structured_content["conversationId"]
        again = await client.call_tool("roundtable_ask", {"question": "And in Nantes?",
                                                          "conversationId": conversation})
        transcript = (await client.read_resource(f"parley://runs/{first.structured_content['runId']}")).contents[0]
    data = first.structured_content
    assert {"summary", "recommendedAction"} <= set(data["synthesis"]) and data["totalRounds"] >= 1
    assert first.content[0].text.startswith(data["synthesis"]["summary"])
    assert progress.messages[0].startswith("round 0 (initial): Claire, Marc")
    assert any(message.startswith("round 0: Claire has spoken") for message in progress.messages)
    assert progress.messages[-1] == f"synthesis after {data['totalRounds']} rounds"
    assert again.structured_content["conversationId"] == conversation
    assert transcript.text.startswith("# Open an office in Lyon?\n\nRound table · completed")
    assert "## Round 0 (initial)" in transcript.text and "**Claire**, Finance: " in transcript.text
    assert f"## Synthesis after {data['totalRounds']} rounds" in transcript.text
    stored = http.get(f"/v1/conversations/{conversation}", headers=auth(key)).json()["conversation"]
    assert stored["title"] == "Open an office in Lyon?"
    assert [m["content"] for m in stored["messages"] if m["senderType"] == "user"] == [
        "Open an office in Lyon?", "And in Nantes?"]


async def test_run_workflow_runs_a_document_or_a_stored_workflow(parley, http, make_key, llm):
    llm.script(reply="Because it is.")
    key = make_key(["workflows"])
    stored = http.post("/v1/workflows", json=WORKFLOW, headers=auth(key)).json()["id"]
    progress = Progress()
    async with http_client(parley.url, key) as client:
        inline = await client.call_tool("run_workflow", {"workflow": WORKFLOW, "input": {"question": "Why?"}},
                                        progress_callback=progress)
        by_id = await client.call_tool("run_workflow", {"workflowId": stored, "input": {"question": "Why?"}})
        bad_input = await client.call_tool("run_workflow", {"workflowId": stored, "input": {"colour": "red"}})
        transcript = (await client.read_resource(f"parley://runs/{inline.structured_content['runId']}")).contents[0]
    assert inline.structured_content["output"]["answer"] == "Because it is."
    assert json.loads(inline.content[0].text) == inline.structured_content["output"]
    assert by_id.structured_content["workflowId"] == stored and by_id.structured_content["workflowName"] == "One answer"
    assert progress.messages == ["node answer (llm) started", "node answer finished"]
    assert "## Input" in transcript.text and "## Node `answer`" in transcript.text
    assert '"answer": "Because it is."' in transcript.text.split("## Final state")[1]
    assert bad_input.is_error and bad_input.structured_content["code"] == "invalid_input"
    assert bad_input.structured_content["error"] == http.post(
        f"/v1/workflows/{stored}/runs", json={"input": {"colour": "red"}}, headers=auth(key)).json()["error"]


async def test_runs_are_listed_read_and_their_transcripts_are_resources(parley, http, make_key, llm):
    script_duel(llm)
    key = make_key(["admin"])
    assert http.post("/v1/agents", json={"name": "Claire", "role": "Finance"}, headers=auth(key)).status_code == 201
    async with http_client(parley.url, key) as client:
        run_id = (await client.call_tool("duel", DUEL)).structured_content["runId"]
        listed = await client.call_tool("list_runs", {"kind": "duel"})
        read = await client.call_tool("get_run", {"runId": run_id})
        resources = (await client.list_resources()).resources
        templates = (await client.list_resource_templates()).resource_templates
        transcript = (await client.read_resource(f"parley://runs/{run_id}")).contents[0]
        agents = (await client.read_resource("parley://agents")).contents[0]
        with pytest.raises(MCPError, match="No run 'run_nope' in this workspace"):
            await client.read_resource("parley://runs/run_nope")
    assert listed.structured_content == http.get("/v1/runs?kind=duel", headers=auth(key)).json()
    assert read.structured_content == http.get(f"/v1/runs/{run_id}", headers=auth(key)).json()
    assert [str(r.uri) for r in resources] == ["parley://agents", f"parley://runs/{run_id}"]
    assert [t.uri_template for t in templates] == ["parley://runs/{runId}"]
    assert transcript.mime_type == "text/markdown"
    assert transcript.text.startswith(f"# {DUEL['topic']}\n\nDuel · completed · run `{run_id}`")
    assert "**Ada** (you) against **Margaret Hale**" in transcript.text and "## Round 2" in transcript.text
    assert "## Verdict" in transcript.text and "**Winner:** Ada (user)" in transcript.text
    assert [a["name"] for a in json.loads(agents.text)["agents"]] == ["Claire"]
    async with http_client(parley.url, make_key(["debate"], user="bob")) as client:
        assert [str(r.uri) for r in (await client.list_resources()).resources] == []  # alice's duel is hers
        with pytest.raises(MCPError, match=f"No run '{run_id}' in this workspace"):
            await client.read_resource(f"parley://runs/{run_id}")
        with pytest.raises(MCPError, match="This key lacks the 'conversations' scope"):
            await client.read_resource("parley://agents")
