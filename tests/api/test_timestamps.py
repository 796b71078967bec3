"""Every resource the API returns writes its times one way (`core.clock.iso`): `2026-10-09T10:02:44.318Z`.

One of each resource is made over HTTP against the real database, and every `…At` field of every body read back
(`createdAt`, `updatedAt`, and the runs' and tools' other moments) must have that shape.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from parley.api.main import create_app
from parley.core import clock
from parley.core.settings import get_settings
from parley.designer import load_example
from tests.support.duel import script_duel
from tests.support.servers import ServerThread

ISO_MS_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
TOOL_SERVER = str(Path(__file__).resolve().parents[1] / "support" / "tool_server.py")


def test_the_one_shape():
    assert clock.iso(datetime(2026, 10, 9, 10, 2, 44, 318999, tzinfo=UTC)) == "2026-10-09T10:02:44.318Z"
    assert clock.iso(datetime(2026, 10, 9, 10, 2, 44)) == "2026-10-09T10:02:44.000Z"  # naive is UTC, as pymongo's
    assert clock.iso(None) is None
    assert clock.now().microsecond % 1000 == 0  # what BSON keeps


def moments(body: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every `…At` field in a JSON body, with where it is."""
    if isinstance(body, dict):
        for key, value in body.items():
            if key.endswith("At") and not isinstance(value, (dict, list)):
                yield f"{path}.{key}", value
            else:
                yield from moments(value, f"{path}.{key}")
    elif isinstance(body, list):
        for i, item in enumerate(body):
            yield from moments(item, f"{path}[{i}]")


@pytest.fixture
def client(parley_env, monkeypatch) -> Iterator[httpx.Client]:
    """Parley allowing the test's stdio MCP server (tests/support/tool_server.py) to be registered."""
    monkeypatch.setenv("PARLEY_TOOL_COMMANDS", sys.executable)
    get_settings.cache_clear()
    with ServerThread(create_app(get_settings())) as server, httpx.Client(base_url=server.url, timeout=120) as http:
        yield http


def test_every_resource_shows_its_times_in_one_shape(client, make_key, llm, sync_db):
    headers = {"Authorization": f"Bearer {make_key(['admin'])}"}
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})  # for the priced models of the panel

    def ok(resp: httpx.Response) -> Any:
        assert resp.status_code in (200, 201), resp.text
        return resp.json()

    read: dict[str, Any] = {}
    # round table: agents, a document, a conversation, its messages, debates and rounds, the memories it left
    agent = ok(client.post("/v1/agents", json={"name": "Claire", "role": "Finance", "persona": "Careful."},
                           headers=headers))["agent"]
    read["agent"] = agent
    read["document"] = ok(client.post(f"/v1/agents/{agent['id']}/documents",
                                      json={"title": "Lease", "text": "The lease has a break clause."},
                                      headers=headers))
    conversation = ok(client.post("/v1/conversations", json={"title": "Open Lyon?"}, headers=headers))
    read["new conversation"] = conversation
    llm.script(match="short notes", json={"notes": ["Lyon demand is real."]})
    ok(client.post(f"/v1/conversations/{conversation['conversation']['id']}/message",
                   json={"content": "Open now or wait?"}, headers=headers))
    read["conversation"] = ok(client.get(f"/v1/conversations/{conversation['conversation']['id']}", headers=headers))
    read["conversations"] = ok(client.get("/v1/conversations", headers=headers))
    read["agents"] = ok(client.get("/v1/agents", headers=headers))  # with the devil's advocate the debate made
    read["memories"] = ok(client.get(f"/v1/agents/{agent['id']}/memories", headers=headers))
    # duel
    script_duel(llm)
    staged = client.post("/api/debate", json={"topic": "Remote work by default?", "userProfile": {"name": "Ada"},
                                              "rounds": 1}, headers=headers)
    assert staged.status_code == 200 and "event: done" in staged.text, staged.text
    read["debates"] = ok(client.get("/api/debates", headers=headers))
    read["debate"] = ok(client.get(f"/api/debate/{read['debates']['debates'][0]['id']}", headers=headers))
    # panel: a router and a completion through it
    read["router"] = ok(client.post("/v1/routers", json={"id": "pair", "models": ["openai:gpt-4o-mini",
                                                                                   "anthropic:claude-sonnet-4-5"]},
                                    headers=headers))
    ok(client.post("/v1/chat/completions", json={"model": "router/pair",
                                                 "messages": [{"role": "user", "content": "Hi?"}]}, headers=headers))
    read["routers"] = ok(client.get("/v1/routers", headers=headers))
    # designer: a stored workflow and its run
    workflow = ok(client.post("/v1/workflows", json=load_example("outline-brief"), headers=headers))
    read["workflow"] = workflow
    read["workflow run"] = ok(client.post(f"/v1/workflows/{workflow['id']}/runs",
                                          json={"input": load_example("outline-brief")["sampleInput"]},
                                          headers=headers))
    read["workflow runs"] = ok(client.get(f"/v1/workflows/{workflow['id']}/runs", headers=headers))
    # tools: a registered server and a grant
    read["tool server"] = ok(client.post("/v1/tools", json={"name": "weather", "command": sys.executable,
                                                            "args": ["-I", TOOL_SERVER],
                                                            "allowedTools": ["get_weather"]}, headers=headers))
    read["grant"] = ok(client.put(f"/v1/tools/grants/agent:{agent['id']}", json={"tools": ["weather/get_weather"]},
                                  headers=headers))
    # every mode's runs
    runs = ok(client.get("/v1/runs", headers=headers))
    assert {r["kind"] for r in runs["data"]} == {"duel", "panel", "roundtable", "workflow"}
    read["runs"] = runs
    read["run"] = ok(client.get(f"/v1/runs/{runs['data'][0]['id']}", headers=headers))

    seen = {name: dict(moments(body)) for name, body in read.items()}
    for name, body in seen.items():
        assert any(path.endswith(".createdAt") or name == "grant" for path in body), (name, read[name])
        wrong = {path: value for path, value in body.items() if value is not None and not (
            isinstance(value, str) and ISO_MS_Z.match(value))}
        assert not wrong, (name, wrong)
    assert any(path.endswith(".updatedAt") and value for body in seen.values() for path, value in body.items())
