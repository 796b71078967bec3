"""The official MCP conformance suite (`@modelcontextprotocol/conformance`, installed by `make test` from
tests/support/node) against `/mcp`: its generic server scenarios. The suite sends no API key, so it speaks to Parley
through `KeyedProxy`, which adds one and passes everything else (`Host`, `Origin`) on as it came."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import httpx
import pytest

from tests.api.test_panel_api import server  # noqa: F401
from tests.support.mcp import KeyedProxy
from tests.support.servers import ServerThread

ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE_BIN = ROOT / "tests/support/node/node_modules/.bin/conformance"
SCENARIOS = ["server-initialize", "ping", "tools-list", "server-sse-multiple-streams", "dns-rebinding-protection"]


@pytest.fixture
def proxied(server, make_key):  # noqa: F811
    with ServerThread(KeyedProxy(server.url, make_key(["debate"]))) as proxy:
        yield proxy


def conformance(url: str, scenario: str, out: Path) -> list[dict]:
    """Run one scenario of the suite against `url`; the checks it made."""
    assert CONFORMANCE_BIN.exists(), ("the conformance test needs the suite that `make test` installs (Node 20 and "
                                      "npm): run `cd tests/support/node && npm ci`")
    done = subprocess.run([str(CONFORMANCE_BIN), "server", "--url", url, "--scenario", scenario, "-o", str(out)],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [checks] = out.glob(f"server-{scenario}-*/checks.json")
    return json.loads(checks.read_text())


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_generic_server_scenarios_pass(proxied, scenario, tmp_path):
    checks = conformance(proxied.url + "/mcp", scenario, tmp_path)
    statuses = {check["id"]: check["status"] for check in checks}
    if scenario == "server-sse-multiple-streams":
        # The suite tries several streams only within a session, and the endpoint is stateless (any worker answers
        # any request): it warns and stops. What it would try is tried below.
        assert statuses == {"server-sse-multiple-streams-session": "WARNING"}
        return
    assert checks and set(statuses.values()) <= {"SUCCESS", "INFO"}, checks
    if scenario == "dns-rebinding-protection":
        assert statuses == {"localhost-host-rebinding-rejected": "SUCCESS", "localhost-host-valid-accepted": "SUCCESS"}


async def test_several_post_sse_streams_are_served_at_once(server, make_key):  # noqa: F811
    """What the suite's multiple-streams scenario asks of a session: three `tools/list` posted together, each
    answered on an SSE stream of its own."""
    headers = {"Authorization": f"Bearer {make_key(['debate'])}", "Accept": "text/event-stream, application/json",
               "MCP-Protocol-Version": "2025-11-25"}
    answers: dict[int, httpx.Response] = {}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
        async def post(request_id: int) -> None:
            answers[request_id] = await http.post("/mcp", json={"jsonrpc": "2.0", "id": request_id,
                                                                 "method": "tools/list", "params": {}})

        async with anyio.create_task_group() as posts:
            for request_id in (1000, 1001, 1002):
                posts.start_soon(post, request_id)
    for request_id, answer in answers.items():
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
        data = json.loads(next(line[5:] for line in answer.text.splitlines() if line.startswith("data:")))
        assert data["id"] == request_id and data["result"]["tools"][0]["name"] == "duel"
    assert sorted(answers) == [1000, 1001, 1002]
