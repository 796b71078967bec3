"""A small MCP server of tools for Parley's agents to call in tests, on the official `mcp` SDK (`MCPServer`).

Its tools: `get_weather(city)` (a fixed forecast naming the city), `add(a, b)`, `fail(reason)` (always a tool error),
`slow(seconds)` (answers after waiting, for the per-call timeout), `show_env(name)` (the value of one of its own
environment variables, to show what a stdio server is started with), `big(size)` (an answer of `size` characters, for
the bound on what Parley reads), `spawn(pidfile, hang)` (starts a background `sleep`, writes its pid to `pidfile`,
then answers, or hangs `hang` seconds first, for the process group Parley ends) and `secret_tool()` (never allowed by
the tests). Over HTTP, `/moved` answers every request with a 307 redirect to `/mcp`.

Over stdio, as Parley starts a registered command (`-I` keeps this folder, whose mcp.py is not the SDK, off
sys.path):

    python -I tests/support/tool_server.py

Over streamable HTTP on 127.0.0.1 (prints ``READY http://127.0.0.1:P/mcp`` once listening):

    python -I tests/support/tool_server.py --http --port 0
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("parley-test-tools", log_level="WARNING")


@server.tool()
def get_weather(city: str) -> str:
    """Today's forecast for a city."""
    return f"Forecast for {city}: sunny, 21 degrees, light wind."


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def fail(reason: str = "broken") -> str:
    """A tool that always fails."""
    raise ToolError(f"the tool failed on purpose: {reason}")


@server.tool()
async def slow(seconds: float) -> str:
    """Answer after `seconds`."""
    await asyncio.sleep(seconds)
    return "finally"


@server.tool()
def show_env(name: str) -> str:
    """The value of one of this server's environment variables ("(unset)" when it has none)."""
    return os.environ.get(name, "(unset)")


@server.tool()
def big(size: int) -> str:
    """An answer of `size` characters."""
    return "x" * size


@server.tool()
async def spawn(pidfile: str, hang: float = 0) -> str:
    """Start a background `sleep` (its pid written to `pidfile`), then answer after `hang` seconds."""
    child = subprocess.Popen(["sleep", "120"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    with open(pidfile, "w") as out:
        out.write(str(child.pid))
    await asyncio.sleep(hang)
    return f"started {child.pid}"


@server.tool()
def secret_tool() -> str:
    """A tool no test allows."""
    return "should never be called"


def moved(app):
    """`app`, with `/moved` redirecting (307, same origin) to `/mcp`."""
    async def serve(scope, receive, send):
        if scope["type"] == "http" and scope["path"] == "/moved":
            await send({"type": "http.response.start", "status": 307, "headers": [(b"location", b"/mcp")]})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    return serve


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if not args.http:
        server.run("stdio")
        return
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)  # before READY: a client may connect before uvicorn has started
    port = sock.getsockname()[1]
    app = moved(server.streamable_http_app())
    config = uvicorn.Config(app, log_level="warning")
    print(f"READY http://127.0.0.1:{port}/mcp", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
