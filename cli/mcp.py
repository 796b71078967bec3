"""`parley mcp`: Parley's MCP tools over stdio, for the desktop assistants and IDEs that start a server as a command.

It serves what a running Parley serves at `/mcp` (`api/mcp_server.py`) to the key it is given, by relaying each
request there over streamable HTTP: the same tools, schemas and descriptions (the ones the key may use), the same
progress, results and errors, the same resources. So it needs no database and no model, only the Parley at
`--url` and a key; and a call cancelled here closes the relayed call, which cancels its run.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import httpx2
import typer
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.types import (
    INTERNAL_ERROR,
    CallToolRequestParams,
    CallToolResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
)

from parley.cli.common import fail

log = logging.getLogger("parley.mcp")

DEFAULT_URL = "http://127.0.0.1:8000"
T = TypeVar("T")


class ParleyUnreachable(MCPError):
    """The Parley to relay to cannot be reached, or refuses the key."""

    def __init__(self, message: str) -> None:
        super().__init__(INTERNAL_ERROR, message)


class Relay:
    """Relays MCP requests to the `/mcp` endpoint of the Parley at `url`, with `key` as the bearer token.

    Each request gets its own connection (the endpoint is stateless), so a Parley that restarts, or starts after
    this process, is simply found at the next request.
    """

    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url.rstrip("/"), key
        self.endpoint = self.url + "/mcp"

    @asynccontextmanager
    async def upstream(self, refusals: list[httpx2.Response] | None = None) -> AsyncIterator[Client]:
        """A connection to the Parley; its HTTP answers that are not MCP (a 401, a 404) go to `refusals`."""

        async def note_refusal(response: httpx2.Response) -> None:
            if response.status_code >= 400 and refusals is not None:
                await response.aread()
                if "jsonrpc" not in response.text:  # a JSON-RPC error is the client's to report
                    refusals.append(response)

        # No read timeout: a debate's result can be minutes away, its progress notifications minutes apart.
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.key}"},
                                      timeout=httpx2.Timeout(30.0, read=None),
                                      event_hooks={"response": [note_refusal]}) as http:
            async with Client(streamable_http_client(self.endpoint, http_client=http)) as client:
                yield client

    async def ask(self, request: Callable[[Client], Awaitable[T]]) -> T:
        """`request` made of the Parley; what stops it from answering is said as an `MCPError`."""
        refusals: list[httpx2.Response] = []
        try:
            async with self.upstream(refusals) as client:
                return await request(client)
        except Exception as exc:
            if refusals:  # the client would say only "Server returned an error response"
                raise ParleyUnreachable(self.refused(refusals[0])) from exc
            cause = _unwrapped(exc)
            if isinstance(cause, MCPError):  # the Parley's own answer (an unknown tool, a resource not found)
                raise cause from None
            raise ParleyUnreachable(self.unreachable(cause)) from exc

    def refused(self, response: httpx2.Response) -> str:
        """What an HTTP refusal from the Parley at `url` means, and what to do about it."""
        try:
            said = response.json().get("error")
        except ValueError:
            said = None
        said = f" ({response.status_code} {said})" if isinstance(said, str) else f" ({response.status_code})"
        if response.status_code == 401:
            return f"Parley at {self.url} refused the key{said}: set PARLEY_API_KEY (or --key) to a valid key"
        if response.status_code == 404:
            return f"Parley at {self.url} has no MCP endpoint{said}: is it a Parley new enough to serve MCP?"
        return f"Parley at {self.url} refused the request{said}"

    def unreachable(self, exc: BaseException) -> str:
        """Why the Parley at `url` could not be asked, and what to do about it."""
        if isinstance(exc, httpx2.TransportError):
            return (f"Cannot reach Parley at {self.url} ({type(exc).__name__}: {exc}): is `parley serve` running "
                    "there? Set PARLEY_URL (or --url) to where it is")
        return f"Parley at {self.url} could not be asked ({type(exc).__name__}: {exc})"

    # --- the handlers: each request, relayed ------------------------------------------------------------

    async def list_tools(self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
                         ) -> ListToolsResult:
        listed = await self.ask(lambda client: client.list_tools(cursor=params.cursor if params else None))
        return ListToolsResult(tools=listed.tools, next_cursor=listed.next_cursor)

    async def call_tool(self, ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        async def relay_progress(progress: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(progress, total, message)

        return await self.ask(lambda client: client.call_tool(params.name, params.arguments,
                                                              progress_callback=relay_progress))

    async def list_resources(self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
                             ) -> ListResourcesResult:
        return await self.ask(lambda client: client.list_resources(cursor=params.cursor if params else None))

    async def list_resource_templates(self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
                                      ) -> ListResourceTemplatesResult:
        return await self.ask(lambda client: client.list_resource_templates(cursor=params.cursor if params else None))

    async def read_resource(self, ctx: ServerRequestContext[Any], params: ReadResourceRequestParams
                            ) -> ReadResourceResult:
        return await self.ask(lambda client: client.read_resource(str(params.uri)))

    def server(self, instructions: str | None, version: str) -> Server[Any]:
        return Server("parley", version=version, title="Parley", instructions=instructions,
                      on_list_tools=self.list_tools, on_call_tool=self.call_tool,
                      on_list_resources=self.list_resources,
                      on_list_resource_templates=self.list_resource_templates, on_read_resource=self.read_resource)

    async def serve(self) -> None:
        """Serve over this process's stdin and stdout until the client closes them."""
        instructions, version = None, ""
        try:  # the Parley's own words for the assistant, when it is up already
            instructions, version = await self.ask(_identity)
        except MCPError as exc:
            log.warning("%s; serving anyway, each request will try again", exc.message)
        server = self.server(instructions, version)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


async def _identity(client: Client) -> tuple[str | None, str]:
    return client.instructions, client.server_info.version if client.server_info else ""


def _unwrapped(exc: BaseException) -> BaseException:
    """The one error an exception group (the client's task group) carries."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def serve_mcp(
    url: str = typer.Option(DEFAULT_URL, envvar="PARLEY_URL", help="The running Parley to serve the tools of."),
    key: str = typer.Option(None, envvar="PARLEY_API_KEY", show_default=False,
                            help="The API key to call it with; its scopes decide which tools are served."),
) -> None:
    """Serve Parley's MCP tools over stdio (for desktop assistants and IDEs), relayed to a running Parley."""
    if not key:
        raise fail("no API key: set PARLEY_API_KEY or pass --key (`parley keys create` makes one)", code=2)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="parley mcp: %(message)s")
    anyio.run(Relay(url, key).serve)


def register(app: typer.Typer) -> None:
    app.command("mcp")(serve_mcp)
