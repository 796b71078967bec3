"""The speakers' tools of one run (`nodes.tools.ToolAccess`): a workspace's MCP servers and Parley's built-in tools,
found from the grants a speaker holds.

Each mode's run context gets one (`ModeRun.tool_access`). What a grant reaches is read when the turn starts: a server
the admin removed, or a tool no longer allowed, is simply not offered; a server no longer allowed by the deployment's
settings answers each call with that refusal (`llm.mcp.refusal`, asked before every connection).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from parley.core.limits import TOOL_CALL_TIMEOUT_SECONDS
from parley.core.settings import Settings
from parley.llm import mcp
from parley.nodes.tools import (
    BUILTIN_SERVER,
    EARLIER_SYNTHESES,
    SEARCH_DOCUMENTS,
    AgentTool,
    Toolbox,
    earlier_syntheses,
    search_documents,
)
from parley.store import agents as agent_store
from parley.store import conversations as conv_store
from parley.store import tools as tool_store

log = logging.getLogger(__name__)


class WorkspaceTools:
    """The tools a run's speakers were granted in `workspace` (`conversation_id`: the round table's conversation,
    whose earlier conclusions `parley/earlier_syntheses` reads)."""

    def __init__(self, db: AsyncDatabase, settings: Settings, workspace: str, *,
                 conversation_id: str | None = None, timeout: float = TOOL_CALL_TIMEOUT_SECONDS) -> None:
        self.db, self.settings, self.workspace = db, settings, workspace
        self.conversation_id, self.timeout = conversation_id, timeout

    async def toolbox(self, grants: Sequence[str], *, agent_id: str | None = None) -> Toolbox | None:
        names = sorted({g.split("/", 1)[0] for g in grants} - {BUILTIN_SERVER})
        servers = {s["name"]: s for s in await tool_store.list_servers(self.db, workspace=self.workspace,
                                                                      names=names)} if names else {}
        tools: list[AgentTool] = []
        for grant in grants:
            server_name, _, tool = grant.partition("/")
            if server_name == BUILTIN_SERVER:
                tools += self._builtin(tool, agent_id)
            elif server_name in servers:
                tools += self._served(servers[server_name], tool)
            else:
                log.warning("grant %s names no server of workspace %s; not offered", grant, self.workspace)
        return Toolbox(tools, timeout=self.timeout) if tools else None

    def _builtin(self, tool: str, agent_id: str | None) -> list[AgentTool]:
        if tool == SEARCH_DOCUMENTS and agent_id:
            async def documents() -> list[dict[str, Any]]:
                return [{"title": d["title"], "text": d["text"]}
                        for d in await agent_store.list_documents(self.db, agent_ids=[agent_id])]
            return [search_documents(documents)]
        if tool == EARLIER_SYNTHESES and self.conversation_id:
            async def conclusions() -> list[dict[str, Any]]:
                return await conv_store.conclusions(self.db, conversation_id=self.conversation_id)
            return [earlier_syntheses(conclusions)]
        return []

    def _served(self, record: dict[str, Any], tool: str) -> list[AgentTool]:
        server = mcp.Server.of(record)
        allowed = set(record.get("allowedTools") or ())
        listed = [t for t in record.get("tools") or [] if t["name"] in allowed and tool in ("*", t["name"])]
        return [
            AgentTool(name=t["name"], description=t.get("description") or "", parameters=t.get("parameters") or {},
                      grant=f"{record['name']}/{t['name']}",
                      run=functools.partial(self._call, server, t["name"]))
            for t in listed
        ]

    async def _call(self, server: mcp.Server, name: str, arguments: dict[str, Any]) -> mcp.ToolOutput:
        return await mcp.call_tool(server, self.settings, name, arguments, timeout=self.timeout)
