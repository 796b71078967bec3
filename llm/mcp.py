"""Parley as an MCP client: the tools of an outbound MCP server that a workspace admin registered, listed and
called with the official `mcp` SDK's `Client`.

A server is reached one of two ways (`Server`): a stdio command, started as a child process in a process group of
its own with a clean environment (the SDK's short list of inherited variables, PATH, HOME, USER and the like, plus
the `env` the admin registered, whose names `env_refusal` checks; never Parley's settings or secrets), or a
streamable-HTTP URL with the admin's headers (`header_refusal`). Which commands and URLs may be used at all is the
deployment's choice (`PARLEY_TOOL_COMMANDS`, `PARLEY_TOOL_URLS`): `refusal` says why a server is not allowed, and is
asked again before every connection, so narrowing a setting stops calls at once. A URL is checked, stored and called
in one form, by the rules Parley holds every outbound URL to (`core.outbound`: `normalise_url`, `header_refusal`,
the allow-list, the bounded client), so what the allow-list admits is what the server receives.

Each call opens its own connection within the call's time limit, and reads at most `MAX_TOOL_ANSWER_BYTES` of each
answer; an HTTP server's redirect is not followed, and a stdio server's process group ends with the call: a call
leaves nothing behind, and no state passes between two calls.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from parley.core import outbound
from parley.core.limits import MAX_TOOL_ANSWER_BYTES, TOOL_SERVER_STOP_SECONDS
from parley.core.outbound import header_refusal, normalise_url, shown_url
from parley.core.settings import Settings

if TYPE_CHECKING:
    import httpx2
    from anyio.abc import Process
    from mcp import Client

# The MCP SDK (and the HTTP libraries it brings) is imported by the functions that connect, not here: a graph whose
# speakers may call tools imports this module, and must not pay for the SDK until a tool is called.

log = logging.getLogger(__name__)

TRANSPORTS = ("stdio", "http")


@dataclass(frozen=True)
class Server:
    """How to reach one MCP server: `command` and `args` (stdio) or `url` (streamable HTTP); `name`, the server as
    registered (None while it is being registered)."""

    transport: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    name: str | None = None

    @classmethod
    def of(cls, record: dict[str, Any]) -> Server:
        """The server of a stored record (`store.tools`)."""
        return cls(transport=record["transport"], command=record.get("command"), args=tuple(record.get("args") or ()),
                   env=dict(record.get("env") or {}), url=record.get("url"), headers=dict(record.get("headers") or {}),
                   name=record.get("name"))

    @property
    def where(self) -> str:
        """The server in words, without its secrets: its command or URL."""
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
    """The server could not be started, reached or spoken to (the message says which, without secrets; in a run,
    whose readers need not be admins, it names the server as registered, never its command or URL)."""


class AnswerTooLarge(ServerUnreachable):
    """The server's answer (an HTTP response's body, a stdio server's line) was larger than Parley reads."""


# --- what an admin may register ---------------------------------------------------------------------------------

# A stdio server's `env` sets the server's own variables (`WEATHER_TOKEN`, `DATABASE_URL`): names in capitals, digits
# and '_', starting with a letter, and none that decides which code or configuration a program loads, whatever
# program the command is (the dynamic loader, libc, shells, language runtimes, package managers, libraries that load
# modules), nor any whose name says it is a search path, options, a configuration, a home, a file or a folder.
ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,127}$")
LOADER_NAME = re.compile(r"""
    ^(?: LD_ | DYLD_ | _RLD | LIBPATH$ | SHLIB_PATH$ | GCONV | GLIBC_ | MALLOC_ | LOCPATH$ | NLSPATH$ | HOSTALIASES$
       | RESOLV_ | OPENSSL_ | SSL_ | GIO_ | GTK_ | GDK_ | GST_ | QT_ | XDG_ | DBUS_ | KRB5 | SASL_
       | PATH$ | HOME$ | SHELL$ | ENV$ | BASH | ZDOTDIR$ | PS4$ | IFS$ | PROMPT_COMMAND$ | TMPDIR$ | EDITOR$
       | VISUAL$ | PAGER$ | BROWSER$ | TERMINFO | SSH_ | SUDO_ | LESSOPEN$ | LESSCLOSE$ | MANPAGER$ | GIT_
       | PYTHON | PIP_ | PIPX_ | UV_ | POETRY_ | CONDA | VIRTUAL_ENV | PERL | RUBY | GEM_ | BUNDLE_ | NODE_ | NPM_
       | YARN_ | PNPM_ | BUN_ | DENO_ | COREPACK_ | JAVA | JDK_ | CLASSPATH$ | MAVEN_ | GRADLE_ | SBT_
       | GO(?:PATH|ROOT|FLAGS|PROXY|TOOLCHAIN|ENV|BIN|EXPERIMENT|PRIVATE|NOPROXY|NOSUMDB|SUMDB|INSECURE|CACHE
             |MODCACHE|DEBUG)$
       | CARGO_ | RUSTUP_ | RUSTC | RUSTFLAGS$ | DOTNET_ | COMPLUS_ | CORECLR_ | COR_ | LUA_ | TCL | PHP | R_
       | JULIA_ | ERL_ | ELIXIR_ | MIX_ | NIX_ )
    | (?: PATH | LIB | LIBS | HOME | OPT | OPTS | OPTIONS | FLAGS | PRELOAD | CONF | CONFIG | RC | _FILE | _DIR
        | _DIRS )$
""", re.VERBOSE)


def env_refusal(name: str) -> str | None:
    """Why an admin may not set the variable `name` for a stdio server, or None when they may (`ENV_NAME`, and not
    `LOADER_NAME`)."""
    if not ENV_NAME.match(name):
        return (f"env: {name!r} may not be set: a server's own variables are named in capitals, digits and '_', "
                "starting with a letter (e.g. WEATHER_TOKEN)")
    if LOADER_NAME.search(name):
        return (f"env: {name} may not be set: it decides which code or configuration a program loads (a search path, "
                "options, a configuration, a home or a runtime's setting); pass such a value in args if the "
                "deployment's command takes it")
    return None


def refusal(server: Server, settings: Settings) -> str | None:
    """Why the deployment does not let Parley reach `server`, or None when it does.

    A command must be one of `PARLEY_TOOL_COMMANDS`, spelled the same (a bare name there is found on PATH), and set
    only variables an admin may set (`env_refusal`); a URL must be an http(s) URL whose normal form
    (`normalise_url`) lies under one of `PARLEY_TOOL_URLS` (normalised the same: same scheme, host and port, a path
    at or below the prefix's), with no credential in it and no header an admin may not set (`header_refusal`).
    """
    if server.transport == "stdio":
        allowed = settings.parley_tool_commands
        command = server.command or ""
        if not allowed:
            return "stdio servers are not enabled on this deployment (PARLEY_TOOL_COMMANDS is empty)"
        if command not in allowed:
            return f"the command {command!r} is not among PARLEY_TOOL_COMMANDS ({', '.join(allowed)})"
        return next(filter(None, map(env_refusal, server.env)), None)
    try:
        url = normalise_url(server.url or "")
    except ValueError as exc:
        return str(exc)
    if why := next(filter(None, (header_refusal(n, v) for n, v in server.headers.items())), None):
        return why
    return outbound.allowed_refusal(url, settings.parley_tool_urls, setting="PARLEY_TOOL_URLS", what="URL servers")


# --- a call's connection -----------------------------------------------------------------------------------------


class _Guard:
    """Stops a call for a reason of Parley's own (an answer past its cap, a redirect): keeps the first reason, and
    cancels the call's scope, so the call ends at once whatever the SDK makes of the broken stream."""

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.reason: ServerUnreachable | None = None

    def stop(self, reason: ServerUnreachable) -> ServerUnreachable:
        if self.reason is None:
            self.reason = reason
        self.scope.cancel()
        return self.reason


def _too_large() -> AnswerTooLarge:
    return AnswerTooLarge(f"The tool's answer was larger than {MAX_TOOL_ANSWER_BYTES:,} bytes, more than Parley "
                          "reads; the rest was not read. Ask for less.")


def _redirected(server: Server, status: int, location: str) -> ServerUnreachable:
    if server.name is not None:  # in a run: its readers learn no address
        return ServerUnreachable(f"The tool server {server.name!r} answered with a redirect ({status}), which Parley "
                                 "does not follow")
    target = shown_url(location).split("?", 1)[0]
    return ServerUnreachable(f"The tool's server answered with a redirect ({status}) to {target}; Parley follows no "
                             "redirect: register the URL it redirects to, if that is the server")


def _http_client(server: Server, settings: Settings, guard: _Guard, timeout: float) -> httpx2.AsyncClient:
    """The client of a URL server's call (`core.outbound.bounded_client`, connecting only to an address the
    deployment lets it reach): what it refuses stops the call."""
    reach = outbound.Reach(tuple(settings.parley_tool_urls), "PARLEY_TOOL_URLS",
                           tuple(settings.parley_outbound_networks))
    return outbound.bounded_client(limit=MAX_TOOL_ANSWER_BYTES, timeout=timeout, headers=server.headers, reach=reach,
                                   stop=lambda why: guard.stop(_refused(server, why)))


def _refused(server: Server, why: outbound.OutboundRefused) -> ServerUnreachable:
    if isinstance(why, outbound.Redirected):
        return _redirected(server, why.status, why.location)
    if isinstance(why, outbound.TooLarge):
        return _too_large()
    if isinstance(why, outbound.AddressRefused):
        if server.name is not None:  # in a run: its readers learn no address
            return ServerUnreachable(f"The tool server {server.name!r} is not allowed by this deployment: its host "
                                     "leads to an address the deployment does not name")
        return ServerUnreachable(f"The tool's server is not allowed: {why}")
    return ServerUnreachable("The tool's server answered compressed, which Parley does not read")


@asynccontextmanager
async def _stdio(server: Server, guard: _Guard) -> AsyncIterator[tuple[Any, Any]]:
    """A stdio server's streams, as the SDK's `stdio_client` gives them (POSIX), with two bounds of Parley's: a line
    from the server is read only up to MAX_TOOL_ANSWER_BYTES (past it, `guard` stops the call), and the server's
    process group, whatever it started in the background, ends with the connection (`_stop`)."""
    import mcp_types
    from mcp.client.stdio import get_default_environment
    from mcp.shared.message import SessionMessage

    command = shutil.which(server.command or "") or server.command or ""
    process = await anyio.open_process([command, *server.args], env=get_default_environment() | dict(server.env),
                                       stderr=sys.stderr, start_new_session=True)
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    def message(line: bytes) -> SessionMessage | Exception:
        try:
            return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        except ValueError as exc:  # the session surfaces it
            return exc

    async def read() -> None:
        buffer = bytearray()
        async with read_writer:
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                async for chunk in process.stdout:
                    start = len(buffer)  # what was searched already holds no line break
                    buffer += chunk
                    while (end := buffer.find(b"\n", start)) >= 0:
                        if end > MAX_TOOL_ANSWER_BYTES:
                            break
                        line, start = bytes(buffer[:end]), 0
                        del buffer[:end + 1]
                        if line.strip():
                            await read_writer.send(message(line))
                    if len(buffer) > MAX_TOOL_ANSWER_BYTES:
                        guard.stop(_too_large())
                        return

    async def write() -> None:
        async with write_reader:
            with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for sent in write_reader:
                    data = sent.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read)
            tasks.start_soon(write)
            try:
                yield read_stream, write_stream
            finally:
                tasks.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process, graceful=guard.reason is None)
            for stream in (read_stream, write_stream):
                await stream.aclose()


async def _stop(process: Process, *, graceful: bool) -> None:
    """End a stdio server and every process of its group: close its input and output (what it writes now is read
    by nobody: a write fails, rather than blocks) and give it TOOL_SERVER_STOP_SECONDS to exit (`graceful`: not
    for a server Parley stopped for its answer), then SIGTERM the group, and SIGKILL what is left
    TOOL_SERVER_STOP_SECONDS later. (A process that left the group, by starting a session of its own, is beyond
    reach: allow no command that daemonises.)"""
    for pipe in (process.stdin, process.stdout):
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await pipe.aclose()
    with anyio.move_on_after(TOOL_SERVER_STOP_SECONDS if graceful else 0):
        while process.returncode is None:
            await anyio.sleep(0.01)
    group = process.pid  # the leader's pid names the group (start_new_session), even once the leader is reaped
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGTERM)
    with anyio.move_on_after(TOOL_SERVER_STOP_SECONDS):
        while _group_runs(group):
            _ = process.returncode  # reaps the leader where reading it does
            await anyio.sleep(0.01)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    with suppress(PermissionError):  # asyncio's transport would otherwise stay open until collected
        getattr(transport, "close", lambda: None)()


def _group_runs(group: int) -> bool:
    """Whether a process of `group` still runs: a zombie (dead, not yet reaped by a parent that does not reap, such
    as a container's first process) does not."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for stat in proc.glob("[0-9]*/stat"):
        with suppress(OSError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group and fields[0] != "Z":
                return True
    return False


async def _session(server: Server, settings: Settings, work: Any, timeout: float) -> Any:
    """Run `work(client)` on a fresh connection to `server`, all of it within `timeout` seconds."""
    why = refusal(server, settings)
    if why is not None:
        if server.name is None:
            raise ServerUnreachable(f"The tool's server is not allowed: {why}")
        log.warning("tool server %r is not allowed: %s", server.name, why)
        raise ServerUnreachable(f"The tool server {server.name!r} is not allowed by this deployment (its admin can "
                                "read why in Parley's log)")
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    guard = _Guard()
    try:
        with anyio.fail_after(timeout), guard.scope:
            async with AsyncExitStack() as stack:
                if server.transport == "stdio":
                    transport = _stdio(server, guard)
                else:
                    http = await stack.enter_async_context(_http_client(server, settings, guard, timeout))
                    transport = streamable_http_client(normalise_url(server.url or ""), http_client=http)
                client = await stack.enter_async_context(Client(transport, read_timeout_seconds=timeout))
                return await work(client)
    except TimeoutError:
        raise
    except ServerUnreachable:
        raise
    except Exception as exc:  # the SDK's and the transport's failures, whatever their type
        if guard.reason is not None:
            raise guard.reason from exc
        raise _unreachable(server, exc) from exc
    raise guard.reason or ServerUnreachable("The call to the tool's server was stopped")


def _unreachable(server: Server, exc: Exception) -> ServerUnreachable:
    """The failure `exc` as its reader reads it: an admin registering the server, its command or URL and the cause;
    a run's reader, the server's name and the cause's kind (the log keeps the rest)."""
    cause = exc
    while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        cause = cause.exceptions[0]
    text = str(cause).splitlines()[0][:300] if str(cause) else ""
    detail = f"{type(cause).__name__}{': ' + text if text else ''}"
    if server.name is None:
        return ServerUnreachable(f"Could not reach the tool's server ({server.where}): {detail}")
    log.warning("tool server %r (%s) could not be reached: %s", server.name, server.where, detail)
    return ServerUnreachable(f"Could not reach the tool server {server.name!r} ({type(cause).__name__}); its admin "
                             "can read why in Parley's log")


async def list_tools(server: Server, settings: Settings, *, timeout: float) -> list[ToolSpec]:
    """Every tool `server` lists (all pages).

    Raises:
        ServerUnreachable: not allowed, or it could not be started, reached or listed (`AnswerTooLarge`: a page
            larger than Parley reads).
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
        ServerUnreachable: not allowed, or it could not be started, reached or spoken to (`AnswerTooLarge`: its
            answer was larger than Parley reads).
        TimeoutError: the call (its connection included) took more than `timeout` seconds.
    """
    async def work(client: Client) -> ToolOutput:
        result = await client.call_tool(name, arguments)
        return ToolOutput(result_text(result.content, result.structured_content), bool(result.is_error))

    return await _session(server, settings, work, timeout)
