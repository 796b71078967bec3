"""`parley mcp` as a desktop assistant runs it: a stdio subprocess relaying to a Parley served by the test, driven by
the official `mcp` client; and the MCP Inspector's CLI (`mcp-inspector --cli`, what `npx
@modelcontextprotocol/inspector --cli` runs) against both transports."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import httpx
import pytest
from mcp import Client, MCPError

# The panel tests' Parley and preset: PANEL, and ARBITRATOR of a panelist's family.
from tests.api.test_panel_api import ARBITRATOR, PANEL, server  # noqa: F401
from tests.support.duel import script_duel
from tests.support.mcp import ROOT, Progress, latest_run, stdio_server, until, until_status

DUEL = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 1}
# Pinned in tests/support/node/package.json (the version whose output docs/mcp.md shows); `make test` installs it
# from npm with the lock file, without a browser (about 10 s).
INSPECTOR_BIN = ROOT / "tests" / "support" / "node" / "node_modules" / ".bin" / "mcp-inspector"


@pytest.fixture
def parley(server):
    """Parley with the panel tests' preset (PANEL, ARBITRATOR), served over HTTP."""
    return server


async def test_parley_mcp_serves_the_keys_tools_over_stdio_with_progress_and_results(parley, make_key, llm,
                                                                                   sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    script_duel(llm)
    llm.script(model="claude-opus-4-5", reply="Pick two of three.")
    key = make_key(["debate", "chat"])
    async with Client(stdio_server(parley.url, key)) as client:
        assert client.server_info.name == "parley" and client.instructions.startswith("Parley runs")
        tools = (await client.list_tools()).tools
        assert [tool.name for tool in tools] == ["duel", "ask_panel", "get_run", "list_runs", "steer_run",
                                                 "cancel_run"]
        assert tools[0].output_schema["properties"]["winner"]  # the endpoint's own definitions, relayed

        duel_progress, panel_progress = Progress(), Progress()
        duel = await client.call_tool("duel", DUEL, progress_callback=duel_progress)
        panel = await client.call_tool("ask_panel", {"question": "Explain the CAP theorem"},
                                       progress_callback=panel_progress)
        refused = await client.call_tool("duel", {"topic": "  ", "userProfile": {"name": "Ada"}})
        with pytest.raises(MCPError, match="Unknown tool: poem"):
            await client.call_tool("poem", {})
        transcript = (await client.read_resource(f"parley://runs/{duel.structured_content['runId']}")).contents[0]

    assert not duel.is_error and duel.structured_content["winner"] == "user"
    assert duel.meta["parley/runId"] == duel.structured_content["runId"]
    assert duel_progress.messages[0] == "opponent: Margaret Hale" and duel_progress.messages[-1] == "verdict: user"
    assert [total for _, total, _ in duel_progress.seen] == [7.0] * 7  # 1 round: opponent, 4 turn steps, judging
    assert panel.structured_content["answer"] == "Pick two of three." and panel.structured_content["model"] == ARBITRATOR
    assert panel.structured_content["_meta"]["routerMode"] == "debate"
    assert panel_progress.messages[0] == "panel: " + ", ".join(PANEL)
    assert refused.is_error and refused.content[0].text == "Missing topic or userProfile"
    assert "## Verdict" in transcript.text


async def test_cancelling_a_duel_over_stdio_cancels_its_run(parley, make_key, llm, sync_db):
    script_duel(llm, opponent_turn={"hold": "opponent"})
    key = make_key(["debate"])
    progress = Progress()
    async with Client(stdio_server(parley.url, key)) as client:
        async with anyio.create_task_group() as calls:
            calls.start_soon(lambda: client.call_tool("duel", {**DUEL, "rounds": 2}, progress_callback=progress))
            await anyio.to_thread.run_sync(llm.wait_held, "opponent")
            await until(lambda: "Ada has spoken" in progress.messages, "the first turn's progress")
            asked = len(llm.requests)
            calls.cancel_scope.cancel()  # the client sends notifications/cancelled to `parley mcp`
        run = await until_status(parley.url, key, (await latest_run(parley.url, key, "duel"))["id"], "cancelled")
    llm.release("opponent")
    assert sync_db.debates.find_one({"_id": run["id"]})["status"] == "cancelled"
    assert len(llm.requests) == asked


async def test_parley_mcp_says_why_it_cannot_serve(parley, make_key, tmp_path):
    async with Client(stdio_server(parley.url, "pk_not_a_key")) as client:
        with pytest.raises(MCPError, match=f"Parley at {parley.url} refused the key \\(401 Unauthorized\\): set "
                                           "PARLEY_API_KEY"):
            await client.list_tools()
    async with Client(stdio_server("http://127.0.0.1:9", make_key(["debate"]))) as client:
        with pytest.raises(MCPError, match="Cannot reach Parley at http://127.0.0.1:9 .*is `parley serve` running"):
            await client.call_tool("duel", DUEL)
    nokey = subprocess.run([sys.executable, "-m", "parley.cli.main", "mcp", "--url", parley.url], cwd=ROOT, timeout=120,
                           capture_output=True, text=True, stdin=subprocess.DEVNULL,
                           env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)})
    assert nokey.returncode == 2 and "no API key: set PARLEY_API_KEY or pass --key" in nokey.stderr
    assert nokey.stdout == ""  # stdout is the protocol's


def inspector(*args: str) -> dict:
    """Run the MCP Inspector's CLI (installed by `make test` from tests/support/node); its JSON answer."""
    assert INSPECTOR_BIN.exists(), ("the MCP Inspector test needs the Inspector that `make test` installs (Node 20 and "
                                    "npm): run `cd tests/support/node && npm ci`")
    done = subprocess.run([str(INSPECTOR_BIN), "--cli", *args], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_mcp_inspector_lists_the_tools_and_calls_one_over_http_and_stdio(parley, make_key, llm):
    script_duel(llm)
    key = make_key(["debate"])
    over_http = ["--transport", "http", "--header", f"Authorization: Bearer {key}"]
    listed = inspector(parley.url + "/mcp", *over_http, "--method", "tools/list")
    assert [tool["name"] for tool in listed["tools"]] == ["duel", "get_run", "list_runs", "steer_run",
                                                          "cancel_run"]
    called = inspector(parley.url + "/mcp", *over_http, "--method", "tools/call", "--tool-name", "duel",
                       "--tool-arg", f"topic={DUEL['topic']}", 'userProfile={"name": "Ada"}', "rounds=1")
    assert called["structuredContent"]["winner"] == "user" and called["content"][0]["text"].startswith("Winner: Ada")
    run = httpx.get(f"{parley.url}/v1/runs/{called['_meta']['parley/runId']}",
                    headers={"Authorization": f"Bearer {key}"}).json()
    assert run["status"] == "completed"
    over_stdio = ["--cwd", str(ROOT), "-e", f"PARLEY_URL={parley.url}", "-e", f"PARLEY_API_KEY={key}",
                  "-e", f"PYTHONPATH={ROOT}", sys.executable, "-m", "parley.cli.main", "mcp"]
    relayed = inspector(*over_stdio, "--method", "tools/list")
    # the same definitions, but that the relay takes no task (`execution.taskSupport`): tasks are /mcp's own
    assert [tool.pop("execution", None) for tool in listed["tools"]][:4] == [{"taskSupport": "optional"}, None, None,
                                                                             None]
    assert relayed["tools"] == listed["tools"]
