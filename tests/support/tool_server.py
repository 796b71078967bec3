"""A small MCP server of tools for Parley's agents to call in tests, on the official `mcp` SDK (`MCPServer`).

Its tools: `get_weather(city)` (a fixed forecast naming the city), `add(a, b)`, `fail(reason)` (always a tool error),
`slow(seconds)` (answers after waiting, for the per-call timeout), `show_env(name)` (the value of one of its own
environment variables, to show what a stdio server is started with) and `secret_tool()` (never allowed by the tests).

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
def secret_tool() -> str:
    """A tool no test allows."""
    return "should never be called"


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
    port = sock.getsockname()[1]
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning")
    print(f"READY http://127.0.0.1:{port}/mcp", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
