"""Parley as an MCP client: the tools of an outbound MCP server that a workspace admin registered, listed and
called with the official `mcp` SDK's `Client`.

A server is reached one of two ways (`Server`): a stdio command, started as a child process with a clean
environment (the SDK's short list of inherited variables, PATH, HOME, USER and the like, plus the `env` the admin
registered; never Parley's settings or secrets), or a streamable-HTTP URL with the admin's headers. Which commands
and URLs may be used at all is the deployment's choice (`PARLEY_TOOL_COMMANDS`, `PARLEY_TOOL_URLS`): `refusal` says
why a server is not allowed, and is asked again before every connection, so narrowing a setting stops calls at
once.

Each call opens its own connection (a stdio server is started for the call and stopped after it) within the call's
time limit: a call leaves nothing behind, and no state passes between two calls.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from typing import TYPE_CHECKING

import anyio

from parley.core.settings import Settings

if TYPE_CHECKING:
    import httpx2
    from mcp import Client

# The MCP SDK (and the HTTP server libraries it brings) is imported by the functions that connect, not here: a
# graph whose speakers may call tools imports this module, and must not pay for the SDK until a tool is called.

TRANSPORTS = ("stdio", "http")


@dataclass(frozen=True)
class Server:
    """How to reach one MCP server: `command` and `args` (stdio) or `url` (streamable HTTP)."""

    transport: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, record: dict[str, Any]) -> Server:
        """The server of a stored record (`store.tools`)."""
        return cls(transport=record["transport"], command=record.get("command"), args=tuple(record.get("args") or ()),
                   env=dict(record.get("env") or {}), url=record.get("url"), headers=dict(record.get("headers") or {}))

    @property
    def where(self) -> str:
        """The server in words, without its secrets."""
        return f"the command {self.command!r}" if self.transport == "stdio" else f"{self.url}"


@dataclass(frozen=True)
class ToolSpec:
    """One tool a server lists: its name, description and JSON Schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

    def dump(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass(frozen=True)
class ToolOutput:
    """What a call answered: its text (every text part, joined; other parts named) and whether it is an error."""

    text: str
    is_error: bool = False


class ServerUnreachable(RuntimeError):
    """The server could not be started, reached or spoken to (the message says which, without secrets)."""


def refusal(server: Server, settings: Settings) -> str | None:
    """Why the deployment does not let Parley reach `server`, or None when it does.

    A command must be one of `PARLEY_TOOL_COMMANDS`, spelled the same (a bare name there is found on PATH);
    a URL must be http(s), carry no user name or password, and start with one of `PARLEY_TOOL_URLS`.
    """
    if server.transport == "stdio":
        allowed = settings.parley_tool_commands
        command = server.command or ""
        if not allowed:
            return "stdio servers are not enabled on this deployment (PARLEY_TOOL_COMMANDS is empty)"
        if command not in allowed:
            return f"the command {command!r} is not among PARLEY_TOOL_COMMANDS ({', '.join(allowed)})"
        return None
    url = server.url or ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"url must be an http:// or https:// URL, not {url!r}"
    if parts.username or parts.password:
        return "url must not carry a user name or password; send credentials in headers"
    allowed = settings.parley_tool_urls
    if not allowed:
        return "URL servers are not enabled on this deployment (PARLEY_TOOL_URLS is empty)"
    if not any(_under(url, prefix) for prefix in allowed):
        return f"{url} is not under any of PARLEY_TOOL_URLS ({', '.join(allowed)})"
    return None


def _under(url: str, prefix: str) -> bool:
    """Whether `url` is `prefix` or below it: same scheme, host and port, and a path below the prefix's (a prefix
    `https://a.example/mcp` admits `https://a.example/mcp` and `https://a.example/mcp/x`, not `https://a.example/mcpx`
    nor `https://a.example.evil/`)."""
    u, p = urlsplit(url), urlsplit(prefix)
    if (u.scheme, u.hostname, u.port) != (p.scheme, p.hostname, p.port):
        return False
    base = p.path.rstrip("/")
    return u.path == base or u.path.startswith(base + "/") or not base


def _transport(server: Server, http: httpx2.AsyncClient | None) -> Any:
    from mcp import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    if server.transport == "stdio":
        command = shutil.which(server.command or "") or server.command or ""
        return StdioServerParameters(command=command, args=list(server.args), env=dict(server.env))
    return streamable_http_client(server.url or "", http_client=http)


async def _session(server: Server, settings: Settings, work: Any, timeout: float) -> Any:
    """Run `work(client)` on a fresh connection to `server`, all of it within `timeout` seconds."""
    why = refusal(server, settings)
    if why is not None:
        raise ServerUnreachable(f"The tool's server is not allowed: {why}")
    from mcp import Client
    from mcp.client.streamable_http import create_mcp_http_client

    try:
        with anyio.fail_after(timeout):
            async with AsyncExitStack() as stack:
                http = None
                if server.transport == "http":  # redirects: the SDK follows only those within the URL's origin
                    http = await stack.enter_async_context(create_mcp_http_client(headers=server.headers))
                client = await stack.enter_async_context(Client(_transport(server, http),
                                                                read_timeout_seconds=timeout))
                return await work(client)
    except TimeoutError:
        raise
    except ServerUnreachable:
        raise
    except Exception as exc:  # the SDK's and the transport's failures, whatever their type
        raise ServerUnreachable(f"Could not reach the tool's server ({server.where}): "
                                f"{type(exc).__name__}{': ' + _first_line(exc) if str(exc) else ''}") from exc


def _first_line(exc: BaseException) -> str:
    message = str(exc)
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        message = str(exc.exceptions[0])
    return message.splitlines()[0][:300] if message else ""


async def list_tools(server: Server, settings: Settings, *, timeout: float) -> list[ToolSpec]:
    """Every tool `server` lists (all pages).

    Raises:
        ServerUnreachable: not allowed, or it could not be started, reached or listed.
        TimeoutError: not within `timeout` seconds.
    """
    async def work(client: Client) -> list[ToolSpec]:
        found: list[ToolSpec] = []
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor)
            found += [ToolSpec(t.name, t.description or t.title or "", dict(t.input_schema or {"type": "object"}))
                      for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                return found

    return await _session(server, settings, work, timeout)


def result_text(content: Sequence[Any], structured: Any = None) -> str:
    """A tool result's content as the text a model reads: its text parts joined, other parts named; the structured
    content (JSON) when there is no text."""
    parts = []
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and getattr(getattr(block, "resource", None), "text", None) is not None:
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind or 'content'} omitted]")
    if not parts and structured is not None:
        return json.dumps(structured, ensure_ascii=False)
    return "\n".join(parts)


async def call_tool(server: Server, settings: Settings, name: str, arguments: dict[str, Any], *,
                    timeout: float) -> ToolOutput:
    """Call the tool `name` of `server` with `arguments`; the tool's own error is an output (`is_error`).

    Raises:
        ServerUnreachable: not allowed, or it could not be started, reached or spoken to.
        TimeoutError: the call (its connection included) took more than `timeout` seconds.
    """
    async def work(client: Client) -> ToolOutput:
        result = await client.call_tool(name, arguments)
        return ToolOutput(result_text(result.content, result.structured_content), bool(result.is_error))

    return await _session(server, settings, work, timeout)
