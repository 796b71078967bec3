"""MCP tasks on `/mcp` (protocol 2025-11-25) with the official `mcp` client: a long tool called as a task answers at
once; the task is its run, answered for by any worker (two `parley serve` processes on one database); a run waiting
for a person is `input_required` until the client's `steer_run`; `tasks/cancel` cancels the run; a task is seen by
whom its run is seen."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest
from mcp import MCPError

from parley.core.limits import MCP_TASK_MAX_TTL_MS, MCP_TASK_POLL_INTERVAL_MS, MCP_TASK_TTL_MS
from tests.api.test_panel_api import server  # noqa: F401
from tests.api.test_runs_api import auth
from tests.api.test_steering_api import script_split_table
from tests.runs.conftest import workers  # noqa: F401
from tests.support.duel import script_duel
from tests.support.mcp import (
    Progress,
    call_as_task,
    cancel_task,
    get_task,
    http_client,
    list_tasks,
    run_record,
    task_result,
    until_status,
    until_task,
)

DUEL = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 2}
RELATED = "io.modelcontextprotocol/related-task"


async def test_a_duel_task_answers_at_once_and_another_worker_gives_its_status_and_result(workers, llm, make_key):
    """The client hangs up, asks another worker, and the worker that ran the debate dies: the task goes on."""
    first, second = workers
    script_duel(llm, opponent_turn={"hold": "opponent"})
    key = make_key(["debate"])
    async with http_client(first.url, key, mode="legacy") as client:
        tasks = client.server_capabilities.tasks
        assert tasks.list is not None and tasks.cancel is not None and tasks.requests.tools.call is not None
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert listed["duel"].execution.task_support == "optional" and listed["get_run"].execution is None
        created = await call_as_task(client, "duel", DUEL, ttl=60_000)
    # the client has hung up; the run goes on
    task = created.task
    assert task.status == "working" and task.ttl == 60_000 and task.poll_interval == MCP_TASK_POLL_INTERVAL_MS
    assert task.task_id.startswith("debate_") and task.created_at and task.last_updated_at
    immediate = created.meta["io.modelcontextprotocol/model-immediate-response"]
    assert immediate.startswith(f"Parley started run {task.task_id}")
    await anyio.to_thread.run_sync(llm.wait_held, "opponent")
    run = await run_record(first.url, key, task.task_id)
    assert run["kind"] == "duel" and run["status"] == "running" and first.named(run["worker"])

    async with http_client(second.url, key, mode="legacy") as client:
        seen = await until_task(client, task.task_id, lambda t: t.status_message == "Margaret Hale is speaking",
                                "the second worker reads the run's latest step")
        assert seen.status == "working" and seen.created_at == task.created_at and seen.ttl == 60_000
        first.kill()  # the worker executing the run dies: the second takes the run over once its lease expires
        llm.release("opponent")
        result = await task_result(client, task.task_id)  # waits for the run's end
        ended = await get_task(client, task.task_id)
        plain = await client.call_tool("get_run", {"runId": task.task_id})
    assert not result.is_error, result.content
    assert result.meta[RELATED] == {"taskId": task.task_id} and result.meta["parley/runId"] == task.task_id
    data = result.structured_content
    assert data["runId"] == task.task_id and data["winner"] == "user" and len(data["verdicts"]) == 2
    assert [m["name"] for m in data["messages"]] == ["Ada", "Margaret Hale"] * 2
    assert result.content[0].text.startswith("Winner: Ada (user)")
    assert ended.status == "completed" and ended.status_message == "verdict: user"
    assert plain.structured_content["status"] == "completed" and second.named(plain.structured_content["worker"])
    assert plain.structured_content["claims"] == 2


async def test_a_tasks_result_is_the_plain_calls_and_the_ttl_is_bounded(server, make_key, llm):  # noqa: F811
    script_duel(llm)
    key = make_key(["debate"])
    async with http_client(server.url, key, mode="legacy") as client:
        plain = await client.call_tool("duel", DUEL)
        created = await call_as_task(client, "duel", DUEL)
        as_task = await task_result(client, created.task.task_id)
        longest = await call_as_task(client, "duel", DUEL, ttl=10 * MCP_TASK_MAX_TTL_MS)
        with pytest.raises(MCPError) as not_a_task:  # a tool that starts no run takes no task
            await call_as_task(client, "get_run", {"runId": created.task.task_id})
        with pytest.raises(MCPError) as refused:  # refused before any task exists: the HTTP API's words
            await call_as_task(client, "duel", {"topic": "", "userProfile": {"name": "Ada"}})
        await task_result(client, longest.task.task_id)
    assert created.task.ttl == MCP_TASK_TTL_MS and longest.task.ttl == MCP_TASK_MAX_TTL_MS
    strip = {"runId", "messages", "verdicts", "synthesis"}
    assert {k: v for k, v in as_task.structured_content.items() if k not in strip} == {
        k: v for k, v in plain.structured_content.items() if k not in strip}
    assert as_task.content[0].text == plain.content[0].text and not as_task.is_error
    assert not_a_task.value.error.code == -32601
    assert refused.value.error.code == -32602 and refused.value.error.message == "Missing topic or userProfile"
    assert refused.value.error.data == {"status": 400, "code": "invalid_request"}


async def test_a_waiting_round_table_is_input_required_and_goes_on_after_the_clients_answer(  # noqa: F811
        server, make_key, llm, http, sync_db):
    llm.script(match="You are Claire,", reply="Claire argues for Lyon.", hold="claire", times=1)
    script_split_table(llm)
    key = make_key(["conversations"])
    for name in ("Claire", "Marc"):
        assert http.post("/v1/agents", json={"name": name, "role": "Finance"}, headers=auth(key)).status_code == 201
    async with http_client(server.url, key, mode="legacy") as client:
        task = (await call_as_task(client, "roundtable_ask", {"question": "Open in Lyon now or wait?"})).task
        await anyio.to_thread.run_sync(llm.wait_held, "claire")
        paused = await client.call_tool("steer_run", {"runId": task.task_id, "action": "pause"})
        assert not paused.is_error, paused.content
        llm.release("claire")
        waiting = await until_task(client, task.task_id, lambda t: t.status == "input_required",
                                   "the table waits for a person after its round")
        asked = len(llm.requests)
        answered = await client.call_tool("steer_run", {"runId": task.task_id, "action": "guide",
                                                        "content": "Our lease offer in Lyon expires in May."})
        result = await task_result(client, task.task_id)
        ended = await get_task(client, task.task_id)
    assert waiting.status_message.startswith("The run waits for a person (after_round, round 1): answer with the "
                                             "tool steer_run")
    assert answered.structured_content["input"]["action"] == "guide"
    assert not result.is_error, result.content
    assert {"summary", "recommendedAction"} <= set(result.structured_content["synthesis"])
    assert ended.status == "completed" and len(llm.requests) > asked  # it went on after the answer
    inputs = list(sync_db.run_inputs.find({"runId": task.task_id}).sort("at"))
    assert [(i["user"], i.get("action")) for i in inputs] == [("alice", "pause"), ("alice", "guide")]
    assert any("Our lease offer in Lyon expires in May." in str(m.get("content"))
               for r in llm.requests[asked:] for m in r["messages"])  # the next round read the person's guidance


async def test_tasks_result_streams_the_tasks_status_until_it_answers(server, make_key, llm):  # noqa: F811
    script_duel(llm, opponent_turn={"hold": "opponent"})
    key = make_key(["debate"])
    async with http_client(server.url, key, mode="legacy") as client:
        task = (await call_as_task(client, "duel", DUEL)).task
        await until_task(client, task.task_id, lambda t: t.status_message == "Margaret Hale is speaking",
                         "the opponent's turn is stored as started")
    messages = []
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-11-25"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=httpx.Timeout(30, read=None)) as http:
        async with http.stream("POST", "/mcp", json={"jsonrpc": "2.0", "id": 7, "method": "tasks/result",
                                                     "params": {"taskId": task.task_id}}) as answer:
            async for line in answer.aiter_lines():
                if line.startswith("data:"):
                    messages.append(json.loads(line.removeprefix("data:")))
                    if len(messages) == 1:  # the task as it stood: the rest of the debate comes as news
                        llm.release("opponent")
    *notes, result = messages
    assert {note["method"] for note in notes} == {"notifications/tasks/status"}
    statuses = [(note["params"]["status"], note["params"]["statusMessage"]) for note in notes]
    assert statuses == [("working", line) for line in (  # the task as it stood, then each step once
        "Margaret Hale is speaking", "Margaret Hale has spoken", "Ada is speaking", "Ada has spoken",
        "Margaret Hale is speaking", "Margaret Hale has spoken", "the judges are deciding", "verdict: user")]
    assert all(note["params"]["taskId"] == task.task_id and note["params"]["ttl"] == MCP_TASK_TTL_MS
               for note in notes)
    assert result["id"] == 7 and result["result"]["structuredContent"]["winner"] == "user"
    assert result["result"]["_meta"][RELATED] == {"taskId": task.task_id}


async def test_cancelling_a_task_cancels_its_run(server, make_key, llm, sync_db):  # noqa: F811
    script_duel(llm, opponent_turn={"hold": "opponent"})
    key = make_key(["debate"])
    async with http_client(server.url, key, mode="legacy") as client:
        task = (await call_as_task(client, "duel", DUEL)).task
        await anyio.to_thread.run_sync(llm.wait_held, "opponent")
        cancelled = await cancel_task(client, task.task_id)
        run = await until_status(server.url, key, task.task_id, "cancelled")
        llm.release("opponent")
        with pytest.raises(MCPError) as again:
            await cancel_task(client, task.task_id)
        result = await task_result(client, task.task_id)
        seen = await get_task(client, task.task_id)
    assert cancelled.status == "cancelled" and cancelled.status_message == "The task was cancelled"
    assert run["cancelRequested"] is True and sync_db.debates.find_one({"_id": task.task_id})["status"] == "cancelled"
    assert again.value.error.code == -32602
    assert again.value.error.message == "Cannot cancel task: already in terminal status 'cancelled'"
    assert result.is_error and result.structured_content["code"] == "cancelled"
    assert result.meta[RELATED] == {"taskId": task.task_id}
    assert seen.status == "cancelled"


async def test_a_task_is_seen_by_whom_its_run_is_seen(server, make_key, llm):  # noqa: F811
    script_duel(llm)
    alice = make_key(["debate"])
    async with http_client(server.url, alice, mode="legacy") as client:
        plain = (await client.call_tool("duel", DUEL)).structured_content["runId"]  # a run, not a task
        task = (await call_as_task(client, "duel", DUEL)).task
        await task_result(client, task.task_id)
        mine = await list_tasks(client)
        with pytest.raises(MCPError) as not_a_task:
            await get_task(client, plain)
    assert [t.task_id for t in mine.tasks] == [task.task_id] and mine.tasks[0].status == "completed"
    assert mine.next_cursor is None and not_a_task.value.error.code == -32602
    for other in (make_key(["debate"], user="bob"), make_key(["admin"], workspace="ws2")):
        async with http_client(server.url, other, mode="legacy") as client:
            assert (await list_tasks(client)).tasks == []
            for method in (get_task, task_result, cancel_task):
                with pytest.raises(MCPError) as refused:
                    await method(client, task.task_id)
                assert refused.value.error.code == -32602, method
                assert refused.value.error.message == (f"Task not found: {task.task_id!r} (none of this key's, or "
                                                       "it has expired)")
    async with http_client(server.url, make_key(["admin"]), mode="legacy") as client:  # alice's workspace's admin
        assert [t.task_id for t in (await list_tasks(client)).tasks] == [task.task_id]
        with pytest.raises(MCPError) as bad_cursor:
            await list_tasks(client, cursor="garbage")
    assert bad_cursor.value.error.code == -32602


async def test_calls_without_a_task_and_newer_clients_are_answered_as_before(server, make_key, llm):  # noqa: F811
    script_duel(llm)
    progress = Progress()
    async with http_client(server.url, make_key(["debate"])) as client:  # 2026-07-28: tasks are not in it
        assert client.server_capabilities.tasks is None
        result = await client.call_tool("duel", DUEL, progress_callback=progress)
    assert not result.is_error and result.structured_content["winner"] == "user"
    assert progress.messages[-1] == "verdict: user"


async def test_steer_run_lets_a_run_at_its_input_cap_go_on_and_end(server, make_key, llm, monkeypatch):  # noqa: F811
    """A waiting run sent MAX_RUN_INPUTS messages once refused `steer_run`'s `continue` and `end` too: a control is
    not counted against the cap (lowered here to 1)."""
    monkeypatch.setattr("parley.store.runs.MAX_RUN_INPUTS", 1)
    script_duel(llm, opponent_turn={"hold": "opponent"})
    key = make_key(["debate"])
    async with http_client(server.url, key, mode="legacy") as client:
        task = (await call_as_task(client, "duel", {**DUEL, "await": "after_turn"})).task
        await until_task(client, task.task_id, lambda t: t.status == "input_required", "the duel waits after turn 1")
        told = await client.call_tool("steer_run", {"runId": task.task_id, "content": "Think of the juniors."})
        full = await client.call_tool("steer_run", {"runId": task.task_id, "content": "And of the seniors."})
        went_on = await client.call_tool("steer_run", {"runId": task.task_id, "action": "continue"})
        await anyio.to_thread.run_sync(llm.wait_held, "opponent")
        ended = await client.call_tool("steer_run", {"runId": task.task_id, "action": "end"})
        llm.release("opponent")
        result = await task_result(client, task.task_id)
    assert not told.is_error and full.is_error and full.structured_content["code"] == "too_many_inputs"
    assert not went_on.is_error, went_on.content
    assert went_on.structured_content["input"]["action"] == "continue"
    assert not ended.is_error, ended.content
    assert not result.is_error, result.content
    said = [(m["role"], m["name"]) for m in result.structured_content["messages"]]
    assert said == [("user", "Ada"), ("human", "alice"), ("opponent", "Margaret Hale")], said  # it ended after turn 2
