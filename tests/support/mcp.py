"""The official MCP client (the `mcp` Python SDK) against Parley: over streamable HTTP at `/mcp`, and over stdio
through `parley mcp`; a recorder of progress notifications; waiting for a run to reach a status."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
import httpx2
from mcp import Client, StdioServerParameters, types
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 30.0


@asynccontextmanager
async def http_client(url: str, key: str | None, *, mode: str = "auto") -> AsyncIterator[Client]:
    """A client of `url`/mcp presenting `key` (none: no Authorization header). `mode="legacy"` speaks the
    handshake-era protocol (2025-11-25), as most assistants do today; "auto" the newest (2026-07-28)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=None)) as http:
        async with Client(streamable_http_client(url + "/mcp", http_client=http), mode=mode) as client:
            yield client


def stdio_server(url: str, key: str | None, *args: str) -> StdioServerParameters:
    """`parley mcp` as a desktop assistant starts it: a command, with PARLEY_URL and PARLEY_API_KEY."""
    env = {"PARLEY_URL": url, "PYTHONPATH": str(ROOT)} | ({"PARLEY_API_KEY": key} if key else {})
    return StdioServerParameters(command=sys.executable, args=["-m", "parley.cli.main", "mcp", *args], cwd=str(ROOT),
                                 env=env)


@dataclass
class Progress:
    """A `progress_callback` that keeps every notification: (progress, total, message)."""

    seen: list[tuple[float, float | None, str | None]] = field(default_factory=list)

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))

    @property
    def messages(self) -> list[str | None]:
        return [message for _, _, message in self.seen]


async def run_record(url: str, key: str, run_id: str) -> dict:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        resp = await http.get(f"/v1/runs/{run_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()


async def until(check, what: str, timeout: float = DEADLINE_SECONDS) -> None:
    """Return once `check()` is true (the server gets there on its own); fail naming `what` after `timeout` s."""
    with anyio.move_on_after(timeout):
        while not check():
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"never happened within {timeout} s: {what}")


async def until_status(url: str, key: str, run_id: str, status: str, timeout: float = DEADLINE_SECONDS) -> dict:
    """The run's record once it is in `status` (the server gets there on its own); fail after `timeout` s."""
    with anyio.move_on_after(timeout):
        while (run := await run_record(url, key, run_id))["status"] != status:
            await anyio.sleep(0.05)
        return run
    raise AssertionError(f"run {run_id} never became {status} within {timeout} s")


async def latest_run(url: str, key: str, kind: str) -> dict:
    """The key's newest run of `kind` (a call cut off mid-run never answered with its id)."""
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        runs = (await http.get("/v1/runs", params={"kind": kind, "limit": 1})).json()["data"]
        assert runs, f"no {kind} run"
        return runs[0]


# --- MCP tasks (protocol 2025-11-25) ------------------------------------------------------------------------------


async def call_as_task(client: Client, name: str, arguments: dict, *, ttl: int | None = None) -> types.CreateTaskResult:
    """A task-augmented `tools/call`. The SDK (2.x) has the task types but checks every `tools/call` answer as a
    `CallToolResult`, which a `CreateTaskResult` is not: this sends the request through the session's dispatcher,
    stamped as the session stamps every request, and reads the answer as the task it is."""
    session = client.session
    data = types.CallToolRequest(params=types.CallToolRequestParams(
        name=name, arguments=arguments, task=types.TaskMetadata(ttl=ttl))).model_dump(
        by_alias=True, mode="json", exclude_none=True)
    opts: dict = {}
    session._stamp(data, opts)
    return types.CreateTaskResult.model_validate(await session._dispatcher.send_raw_request(
        data["method"], data["params"], opts))


async def get_task(client: Client, task_id: str) -> types.GetTaskResult:
    return await client.session.send_request(types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
                                             types.GetTaskResult)


async def task_result(client: Client, task_id: str) -> types.CallToolResult:
    return await client.session.send_request(
        types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)), types.CallToolResult)


async def list_tasks(client: Client, cursor: str | None = None) -> types.ListTasksResult:
    return await client.session.send_request(types.ListTasksRequest(params=types.PaginatedRequestParams(
        cursor=cursor)), types.ListTasksResult)


async def cancel_task(client: Client, task_id: str) -> types.CancelTaskResult:
    return await client.session.send_request(types.CancelTaskRequest(params=types.CancelTaskRequestParams(
        task_id=task_id)), types.CancelTaskResult)


async def until_task(client: Client, task_id: str, check, what: str,
                     timeout: float = DEADLINE_SECONDS) -> types.GetTaskResult:
    """The task (`tasks/get`) once `check(task)` holds (the server gets there on its own); fail after `timeout` s."""
    with anyio.move_on_after(timeout):
        while not check(task := await get_task(client, task_id)):
            await anyio.sleep(0.05)
        return task
    raise AssertionError(f"task {task_id}: never happened within {timeout} s: {what}")


class KeyedProxy:
    """An ASGI app that passes every request on to `upstream` as it came (its `Host` and `Origin` too) with
    `Authorization: Bearer <key>` added, streaming the answer back: for MCP clients that cannot send a header (the
    conformance suite's)."""

    def __init__(self, upstream: str, key: str) -> None:
        self.upstream, self.key = upstream, key

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in (b"content-length", b"authorization")]
        headers.append((b"authorization", f"Bearer {self.key}".encode()))
        url = self.upstream + scope["path"] + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")

        async def relay() -> None:
            async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None)) as client:
                async with client.stream(scope["method"], url, headers=headers, content=body) as answer:
                    await send({"type": "http.response.start", "status": answer.status_code, "headers": [
                        (k, v) for k, v in answer.headers.raw
                        if k.lower() not in (b"content-length", b"transfer-encoding")]})
                    async for chunk in answer.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b""})
            streams.cancel_scope.cancel()

        async def hang_up() -> None:  # the client went away: so does the relayed request (an SSE stream's too)
            while (await receive())["type"] != "http.disconnect":
                pass
            streams.cancel_scope.cancel()

        async with anyio.create_task_group() as streams:
            streams.start_soon(relay)
            streams.start_soon(hang_up)
