"""MCP tasks on `/mcp` (protocol 2025-11-25, `tasks`): a long tool called with `task` in its params starts its run and
answers at once with the task; `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel` work on it from any
worker, for as long as the task is kept (its `ttl`). Each task is a Parley run (`services.mcp_tasks`).

- `tools/call` with `task`: only the tools that start a run (`Tool.starts`: `duel`, `ask_panel`, `roundtable_ask`,
  `run_workflow`; `execution.taskSupport: "optional"` in `tools/list`) take it, another is `-32601`. The arguments
  are checked and the run started as a plain call does; a refusal then is a protocol error (`-32602`, or `-32603`
  for Parley's own failures) whose data is the HTTP body (`status`, `code`, ...), since no task exists.
- `tasks/result` waits for the run's end and answers with what the plain call would have (`McpEndpoint.tool_result`,
  the same code), its `_meta` naming the task. While it waits, its response stream carries
  `notifications/tasks/status`: the task each time its status or step changes (the stateless endpoint has no other
  stream to send them on).
- `input_required`: the run waits for a person. The endpoint is stateless, so it cannot ask the client anything
  itself (an `elicitation/create` on `tasks/result` needs a reply routed back to the worker that asked); the task's
  `statusMessage` says what the run waits for, and the client answers with the tool `steer_run` (a person's input,
  as `POST /v1/runs/{id}/input`), after which the task is `working` again.

The SDK (`mcp` 2.x) knows the task types but routes none of these methods (tasks left the core protocol in
2026-07-28): `tasks/*` are request handlers added to the low-level `Server`, the task-augmented `tools/call` is
answered by a middleware before the SDK's `tools/call` handler (whose result must be a `CallToolResult`), and the
capability is declared by `TaskServer.get_capabilities`, at the handshake-era versions only. A client of protocol
2026-07-28 gets plain calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolRequestParams,
    CallToolResult,
    CancelTaskRequestParams,
    CancelTaskResult,
    CreateTaskResult,
    GetTaskPayloadRequestParams,
    GetTaskRequestParams,
    GetTaskResult,
    ListTasksResult,
    PaginatedRequestParams,
    ServerCapabilities,
    ServerTasksCapability,
    ServerTasksRequestsCapability,
    Task,
    TasksCallCapability,
    TasksCancelCapability,
    TasksListCapability,
    TasksToolsCapability,
    TaskStatusNotification,
    TaskStatusNotificationParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from parley.api.errors import default_code, failure_error
from parley.api.mcp_tools import TOOLS, Call, Tool
from parley.services import access
from parley.services import mcp_tasks as service
from parley.services.progress import progress_line

if TYPE_CHECKING:
    from parley.api.mcp_server import McpEndpoint

RELATED_TASK = "io.modelcontextprotocol/related-task"
IMMEDIATE_RESPONSE = "io.modelcontextprotocol/model-immediate-response"
TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}
CAPABILITY = ServerTasksCapability(list=TasksListCapability(), cancel=TasksCancelCapability(),
                                   requests=ServerTasksRequestsCapability(tools=TasksToolsCapability(
                                       call=TasksCallCapability())))


def protocol_error(exc: Exception, **data: Any) -> MCPError:
    """A refusal as an MCP protocol error: the HTTP API's message, `-32602` for what the client asked wrongly
    (`-32603` for Parley's own failures), with the HTTP body's `status`, `code` and details (and `data`)."""
    err = failure_error(exc)
    return MCPError(INVALID_PARAMS if err.status < 500 else INTERNAL_ERROR, err.message,
                    {**data, "status": err.status, "code": err.code or default_code(err.status), **err.extra})


async def refusing(work: Awaitable[Any]) -> Any:
    """`work`'s value; what it raises as `protocol_error`."""
    try:
        return await work
    except MCPError:
        raise
    except Exception as exc:
        raise protocol_error(exc) from exc


class TaskServer(Server[Any]):
    """The low-level `Server`, declaring the tasks capability (list, cancel, task-augmented `tools/call`) to clients
    of the handshake-era protocol, where tasks are part of the protocol."""

    def get_capabilities(self, *args: Any, protocol_version: str | None = None, **kwargs: Any) -> ServerCapabilities:
        capabilities = super().get_capabilities(*args, protocol_version=protocol_version, **kwargs)
        if protocol_version in MODERN_PROTOCOL_VERSIONS:
            return capabilities
        return capabilities.model_copy(update={"tasks": CAPABILITY})


class McpTasks:
    """The `tasks/*` methods and task-augmented tool calls of the endpoint `endpoint`."""

    def __init__(self, endpoint: McpEndpoint) -> None:
        self.endpoint = endpoint

    def register(self, server: Server[Any]) -> None:
        server.add_request_handler("tasks/get", GetTaskRequestParams, self.get)
        server.add_request_handler("tasks/result", GetTaskPayloadRequestParams, self.result)
        server.add_request_handler("tasks/list", PaginatedRequestParams, self.list)
        server.add_request_handler("tasks/cancel", CancelTaskRequestParams, self.cancel)
        server.middleware.append(self.augmented_calls)

    @property
    def engine(self) -> Any:
        return self.endpoint.app.state.backend.runs

    # --- tools/call with `task` ----------------------------------------------------------------

    async def augmented_calls(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Answer a task-augmented `tools/call` (handshake-era protocol) with its task; pass every other request on."""
        params = ctx.params
        if (ctx.method != "tools/call" or ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
                or not isinstance(params, Mapping) or params.get("task") is None):
            return await call_next(ctx)
        try:
            asked = CallToolRequestParams.model_validate(params, by_name=False)
        except ValidationError as exc:
            raise MCPError(INVALID_PARAMS, "Invalid request parameters", str(exc)) from None
        return await self.create(ctx, asked)

    async def create(self, ctx: ServerRequestContext[Any, Any], asked: CallToolRequestParams) -> CreateTaskResult:
        tool = TOOLS_BY_NAME.get(asked.name)
        if tool is None:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {asked.name}")
        if tool.starts is None:
            raise MCPError(METHOD_NOT_FOUND, f"The tool {asked.name} cannot be called as a task "
                                             "(its execution.taskSupport is forbidden): call it without `task`")
        call = self.endpoint.call(ctx)

        async def start() -> dict[str, Any]:
            access.check_scope(call.principal, tool.scope, write=tool.write)
            started = await tool.starts.start(call, tool.arguments(asked.arguments or {}))
            return await service.open_task(self.engine, call.principal, run_id=started.run_id, tool=tool.name,
                                           ttl_ms=asked.task.ttl if asked.task else None)

        task = await refusing(start())
        return CreateTaskResult.model_validate({"task": task, "_meta": {IMMEDIATE_RESPONSE: (
            f"Parley started run {task['taskId']} ({tool.name}) as a task; it takes minutes. Its result comes with "
            f"tasks/result, or with the tool get_run.")}})

    # --- tasks/* -------------------------------------------------------------------------------

    async def get(self, ctx: ServerRequestContext[Any, Any], params: GetTaskRequestParams) -> GetTaskResult:
        task = await refusing(service.get_task(self.engine, self.endpoint.principal(ctx), params.task_id))
        return GetTaskResult.model_validate(task)

    async def list(self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams) -> ListTasksResult:
        tasks, cursor = await refusing(service.list_tasks(self.engine, self.endpoint.principal(ctx), params.cursor))
        return ListTasksResult(tasks=[Task.model_validate(task) for task in tasks], next_cursor=cursor)

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: CancelTaskRequestParams) -> CancelTaskResult:
        task = await refusing(service.cancel_task(self.engine, self.endpoint.principal(ctx), params.task_id))
        return CancelTaskResult.model_validate(task)

    async def result(self, ctx: ServerRequestContext[Any, Any],
                     params: GetTaskPayloadRequestParams) -> CallToolResult:
        """What the task's plain call would have answered, once its run has ended (waiting here till then)."""
        principal = self.endpoint.principal(ctx)
        task, run = await refusing(service.visible_task(self.engine, principal, params.task_id))
        tool: Tool = TOOLS_BY_NAME[task["tool"]]
        assert tool.starts is not None
        if run["status"] not in service.TERMINAL:  # (a run asked to cancel is a cancelled task while it stops)
            await self.follow(ctx, task, run)
            run = await self.engine.wait(run["_id"])
        call: Call = self.endpoint.call(ctx)
        answered = await self.endpoint.tool_result(tool, lambda: tool.starts.finish(call, run))
        return answered.model_copy(update={"meta": {**(answered.meta or {}), RELATED_TASK: {"taskId": task["_id"]}}})

    async def follow(self, ctx: ServerRequestContext[Any, Any], task: dict, run: dict) -> None:
        """Until the run ends, send `notifications/tasks/status` on this request's stream whenever the task's status
        or step changes."""
        sent: tuple[str, str | None] | None = None

        async def notify(status: str, message: str | None) -> None:
            nonlocal sent
            if (status, message) == sent:
                return
            sent = (status, message)
            shown = {**service.view(task, run, message), "status": status}
            await ctx.session.send_notification(TaskStatusNotification(
                params=TaskStatusNotificationParams.model_validate(shown)), related_request_id=ctx.request_id)

        _, seen = await service.latest_step(self.engine, run)  # steps from here on are news
        await notify(service.status_of(run), await service.status_message(self.engine, run))
        async for batch in self.engine.follow(run["_id"], after=seen):
            for event in batch:
                if event.event == "waiting":
                    run = await self.engine.get(run["_id"])
                    await notify(service.status_of(run), await service.status_message(self.engine, run))
                elif line := progress_line(run["kind"], event.event, event.data):
                    await notify("working", line)

