"""Parley as an MCP server: the streamable-HTTP endpoint `/mcp` of `parley serve` (`McpEndpoint`).

Every request presents an API key as a bearer token (as on every other route: `Authorization: Bearer <key>` or
`x-api-key`); the key's scopes decide which tools `tools/list` shows it (`api.mcp_tools.TOOLS`) and which
resources it reads. The endpoint is stateless (any worker serves any request, for clients of every protocol
version): a tool's progress and result go back on the response to its own request. A client cancels a call by
closing that response (protocol 2026-07-28), or, at the older versions, by posting `notifications/cancelled`,
which no session carries here: it cancels the key's one call in flight on this worker with that request id.
`parley mcp` (`cli/mcp.py`) serves the same tools over stdio by relaying to this endpoint.

Resources: `parley://runs/{runId}`, a run's transcript as Markdown (`services.transcripts`; the key's recent runs
are listed), and `parley://agents`, the workspace's round-table agents as JSON.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
    ToolExecution,
)
from mcp.types import Tool as ToolDefinition
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from parley.api.deps import presented_key
from parley.api.entry import replaying
from parley.api.errors import ApiError, error_response, failure_error
from parley.api.mcp_tasks import McpTasks, TaskServer, protocol_error
from parley.api.mcp_tools import TOOLS, Answer, Call, Tool
from parley.services import access
from parley.services import runs as run_service
from parley.services.access import Principal
from parley.services.errors import NotFound
from parley.services.transcripts import run_transcript
from parley.store import agents as agent_store

log = logging.getLogger("parley.mcp")

PATH = "/mcp"
RUN_URI = "parley://runs/"
AGENTS_URI = "parley://agents"
LISTED_RUNS = 20  # the key's most recent runs that `resources/list` shows
INSTRUCTIONS = (
    "Parley runs multi-agent debates. `duel` debates a topic against an AI opponent and judges it; `ask_panel` "
    "asks a panel of models and returns one arbitrated answer; `roundtable_ask` puts a question to the "
    "workspace's agents, who debate until they converge; `run_workflow` runs a designer workflow. Each call "
    "starts a run and reports its steps as progress (or, called as a task, answers at once: poll tasks/get, then "
    "tasks/result); `get_run`, `list_runs`, `steer_run` (a person's input to a run, such as one waiting for a "
    "person) and `cancel_run` work on runs of every kind, and `parley://runs/{runId}` is a run's transcript."
)
TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}


def definition(tool: Tool) -> ToolDefinition:
    """The tool as `tools/list` shows it."""
    return ToolDefinition(
        name=tool.name, title=tool.title, description=tool.description,
        input_schema=tool.input.model_json_schema(), output_schema=tool.output.model_json_schema(),
        annotations=ToolAnnotations(read_only_hint=not tool.write, destructive_hint=tool.name == "cancel_run",
                                    idempotent_hint=not tool.write),
        # The tools that start a run may be called as tasks (`api.mcp_tasks`); the others may not.
        execution=ToolExecution(task_support="optional") if tool.starts else None,
    )


def error_result(err: ApiError, run_id: str | None = None) -> CallToolResult:
    """A tool error: the HTTP API's message for the model to read, its status, code and details for the client."""
    data = {"error": err.message, "status": err.status, "code": err.code, **err.extra}
    return CallToolResult(content=[TextContent(type="text", text=err.message)], structured_content=data,
                          is_error=True, _meta={"parley/runId": run_id} if run_id else None)


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
LOOPBACK_HOSTS = [*LOOPBACK_NAMES, *(f"{name}:*" for name in LOOPBACK_NAMES)]


def _matches(value: str, allowed: list[str]) -> bool:
    """Whether `value` is one of `allowed`, where `x:*` admits `x` with any port."""
    return any(value == pattern or (pattern.endswith(":*") and value.startswith(pattern[:-1]) and
                                    value[len(pattern) - 1:].isdigit()) for pattern in allowed)


def rebinding_refusal(scope: Scope, settings: Any) -> ApiError | None:
    """Why `/mcp` refuses a request against DNS rebinding (MCP's streamable HTTP transport asks servers to check
    `Origin`), or None: its `Host` must be allowed (`PARLEY_MCP_ALLOWED_HOSTS`; by default the loopback names alone,
    whatever address Parley listens on: a deployment names the hosts its clients use), and its `Origin`, when it has
    one, too (`PARLEY_MCP_ALLOWED_ORIGINS`; by default loopback origins on a loopback address, else the request's
    own origin)."""
    headers = dict(scope.get("headers") or ())
    host = headers.get(b"host", b"").decode("latin-1").lower()
    origin = headers.get(b"origin", b"").decode("latin-1").lower()
    server = (scope.get("server") or ("", None))[0] or ""
    loopback = server in ("127.0.0.1", "::1", "localhost") or server.startswith("127.")
    hosts = settings.parley_mcp_allowed_hosts or LOOPBACK_HOSTS
    if not _matches(host, [h.lower() for h in hosts]):
        return ApiError(421, f"/mcp does not answer the host {host or '(none)'!r}: it answers only the hosts "
                             "PARLEY_MCP_ALLOWED_HOSTS names (unset: localhost, 127.0.0.1 and [::1]); an operator "
                             "adds the names clients reach Parley by there", code="host_not_allowed")
    if origin:
        origins = settings.parley_mcp_allowed_origins or (
            [f"{scheme}://{name}{port}" for scheme in ("http", "https") for name in LOOPBACK_NAMES
             for port in ("", ":*")] if loopback else [f"{scope.get('scheme', 'http')}://{host}"])
        if not _matches(origin, [o.lower() for o in origins]):
            return ApiError(403, f"/mcp does not answer pages from the origin {origin!r}; an operator allows more "
                                 "with PARLEY_MCP_ALLOWED_ORIGINS", code="origin_not_allowed")
    return None


class McpEndpoint:
    """The ASGI app served at `/mcp`: authenticates the key, then hands the request to the MCP transport.

    `running()` must be entered in the host app's lifespan (once the services are up): it runs the transport's
    task group, in which every tool call runs.
    """

    def __init__(self, app: FastAPI, *, max_body_bytes: int) -> None:
        self.app = app
        self.stopping = False
        self.calls: dict[tuple[str, str], set[anyio.CancelScope]] = {}  # (key id, request id) → its calls here
        self.server: Server[Any] = TaskServer(
            "parley", version=app.version, title="Parley", instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools, on_call_tool=self.call_tool, on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates, on_read_resource=self.read_resource,
        )
        self.sessions = StreamableHTTPSessionManager(
            app=self.server, stateless=True,
            # `Host` and `Origin` are checked before the key (`rebinding_refusal`, with Parley's settings and error
            # bodies); the SDK's own check knows only fixed lists.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=max_body_bytes,
        )
        McpTasks(self).register(self.server)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.sessions.run():
            try:
                yield
            finally:
                # Calls cut off now leave their runs to be handed over, as every run of a stopping worker is.
                self.stopping = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if (refused := rebinding_refusal(scope, self.app.state.settings)) is not None:
            await error_response(request, refused)(scope, receive, send)
            return
        principal = await access.authenticate(self.app.state.db, presented_key(request))
        if principal is None:
            err = ApiError(401, "Unauthorized", code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
            await error_response(request, err)(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        if scope["method"] == "POST":
            body = await request.body()
            self.cancel_calls(principal, body)
            receive = replaying(body, receive)
        await self.sessions.handle_request(scope, receive, send)

    def cancel_calls(self, principal: Principal, body: bytes) -> None:
        """Cancel the calls a posted `notifications/cancelled` names: the key's call with that request id, when it
        is the only one in flight on this worker (two clients sharing a key may number their requests alike)."""
        try:
            messages = json.loads(body)
        except ValueError:
            return  # the transport answers it
        for message in messages if isinstance(messages, list) else [messages]:
            if not isinstance(message, dict) or message.get("method") != "notifications/cancelled":
                continue
            request_id = (message.get("params") or {}).get("requestId")
            calls = self.calls.get((principal.key_id, str(request_id)), set())
            if len(calls) == 1:
                next(iter(calls)).cancel()

    # --- what a handler knows -----------------------------------------------------------------

    @staticmethod
    def principal(ctx: ServerRequestContext[Any]) -> Principal:
        return ctx.request.state.principal

    def call(self, ctx: ServerRequestContext[Any]) -> Call:
        request = ctx.request

        async def report(progress: float, total: float | None, message: str) -> None:
            await ctx.session.report_progress(progress, total, message)

        return Call(principal=request.state.principal, backend=self.app.state.backend,
                    client_address=request.client.host if request.client else "unknown", report=report,
                    stopping=lambda: self.stopping)

    # --- tools --------------------------------------------------------------------------------

    async def list_tools(self, ctx: ServerRequestContext[Any],
                         params: PaginatedRequestParams | None) -> ListToolsResult:
        principal = self.principal(ctx)
        return ListToolsResult(tools=[definition(tool) for tool in TOOLS if tool.usable_by(principal)])

    async def call_tool(self, ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        tool = TOOLS_BY_NAME.get(params.name)
        if tool is None:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}")
        call = self.call(ctx)
        calls = self.calls.setdefault((call.principal.key_id, str(ctx.request_id)), set())
        with anyio.CancelScope() as cancellable:
            calls.add(cancellable)
            try:
                async def answer() -> Answer:
                    access.check_scope(call.principal, tool.scope, write=tool.write)
                    return await tool.answer(call, tool.arguments(params.arguments or {}))

                result = await self.tool_result(tool, answer)
            finally:
                calls.discard(cancellable)
                if not calls:
                    self.calls.pop((call.principal.key_id, str(ctx.request_id)), None)
        if cancellable.cancelled_caught:  # by the client's notification: nobody reads this answer
            return error_result(ApiError(499, "The call was cancelled", code="cancelled"))
        return result

    @staticmethod
    async def tool_result(tool: Tool, answer: Callable[[], Awaitable[Answer]]) -> CallToolResult:
        """The tool's result for what `answer()` answers: its text and structured result (checked against the tool's
        output schema), or the tool error of what it raised, worded as the HTTP API words it. A plain call's
        result and a task's (`tasks/result`) are made here."""
        try:
            answered = await answer()
            data = tool.output.model_validate(answered.data).model_dump(mode="json", by_alias=True)
        except Exception as exc:  # every failure is the tool's error
            return error_result(failure_error(exc), run_id=getattr(exc, "run_id", None))
        return CallToolResult(content=[TextContent(type="text", text=answered.text)], structured_content=data,
                              _meta={"parley/runId": answered.run_id} if answered.run_id else None)

    # --- resources ----------------------------------------------------------------------------

    async def list_resources(self, ctx: ServerRequestContext[Any],
                             params: PaginatedRequestParams | None) -> ListResourcesResult:
        principal = self.principal(ctx)
        resources = []
        if access.may_use(principal, "conversations"):
            resources.append(Resource(uri=AGENTS_URI, name="agents", title="The workspace's agents",
                                      description="The round-table agents of this workspace, in seating order.",
                                      mime_type="application/json"))
        page = await run_service.list_runs(self.app.state.backend.runs, principal, limit=LISTED_RUNS)
        resources += [Resource(uri=RUN_URI + run["id"], name=run["id"], title=run["title"],
                               description=f"{run['kind']} run, {run['status']}, started {run['createdAt']}",
                               mime_type="text/markdown") for run in page["data"]]
        return ListResourcesResult(resources=resources)

    async def list_resource_templates(self, ctx: ServerRequestContext[Any],
                                      params: PaginatedRequestParams | None) -> ListResourceTemplatesResult:
        return ListResourceTemplatesResult(resource_templates=[ResourceTemplate(
            uri_template=RUN_URI + "{runId}", name="run", title="A run's transcript",
            description="What was said in a run of any kind (duel, panel, round table, workflow) and how it ended, "
                        "as Markdown.", mime_type="text/markdown")])

    async def read_resource(self, ctx: ServerRequestContext[Any],
                            params: ReadResourceRequestParams) -> ReadResourceResult:
        principal, uri = self.principal(ctx), str(params.uri)
        try:
            if uri.startswith(RUN_URI) and uri != RUN_URI:
                text = await run_transcript(self.app.state.backend.runs, principal, uri.removeprefix(RUN_URI))
                return ReadResourceResult(contents=[TextResourceContents(uri=uri, mime_type="text/markdown",
                                                                         text=text)])
            if uri == AGENTS_URI:
                access.check_scope(principal, "conversations")
                agents = await agent_store.list_agents(self.app.state.db, workspace=principal.workspace)
                text = json.dumps({"agents": [agent_store.public_agent(a) for a in agents]}, ensure_ascii=False)
                return ReadResourceResult(contents=[TextResourceContents(uri=uri, mime_type="application/json",
                                                                         text=text)])
            raise NotFound(f"No resource '{uri}': Parley serves {RUN_URI}{{runId}} and {AGENTS_URI}")
        except Exception as exc:  # a resource has no error result: the refusal is the request's error
            raise protocol_error(exc, uri=uri) from exc
