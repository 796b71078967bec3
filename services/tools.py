"""Agents' tools, as a workspace's admin manages them (`/v1/tools`): the MCP servers registered for the workspace,
and the tools granted to each subject.

A server is a stdio command or a streamable-HTTP URL that the deployment allows (`PARLEY_TOOL_COMMANDS`,
`PARLEY_TOOL_URLS`: `llm.mcp.refusal`), with the names of the tools its agents may call (`allowedTools`). Parley
lists the server's tools when it is registered or changed (and on `refresh`), so a name it does not serve is refused
at once, and a run offers the listed descriptions and schemas without connecting first.

A grant gives a subject tools, each `server/tool`, `server/*` (every allowed tool of the server) or a built-in
(`nodes.tools.BUILTINS`). Subjects:

- `agent:<agentId>`: a round-table agent (the built-ins are for agents only);
- `duel:user`, `duel:opponent`: the duel's two debaters;
- `workflow:<workflowId>:<nodeId>`: one streamed `llm` node (no `output_schema`) of a stored workflow;
- `router:<routerId>`: every panelist of a stored router (chat completions with `model: "router/<routerId>"`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pymongo.asynchronous.database import AsyncDatabase

from parley.core.limits import (
    MAX_GRANTED_TOOLS,
    MAX_SERVER_TOOLS,
    MAX_TOOL_NAME_CHARS,
    MAX_TOOL_SERVERS,
    TOOL_CALL_TIMEOUT_SECONDS,
)
from parley.core.settings import Settings
from parley.llm import mcp
from parley.nodes.tools import BUILTIN_SERVER, BUILTINS, earlier_syntheses, search_documents
from parley.services import access
from parley.services.access import Principal
from parley.services.errors import BadGateway, Conflict, InvalidRequest, NotFound
from parley.store import agents as agent_store
from parley.store import routers as router_store
from parley.store import tools as tool_store
from parley.store import workflows as workflow_store

SERVER_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
RESERVED_NAMES = (BUILTIN_SERVER, "grants")
DUEL_SIDES = ("user", "opponent")
SUBJECT_HELP = ("`agent:<agentId>`, `duel:user`, `duel:opponent`, `workflow:<workflowId>:<nodeId>` or "
                "`router:<routerId>`")

ToolName = Annotated[str, Field(min_length=1, max_length=MAX_TOOL_NAME_CHARS, pattern=r"^[A-Za-z0-9_.-]+$")]
Secret = Annotated[str, Field(max_length=4096)]


def agent_subject(agent_id: str) -> str:
    """The grant subject of a round-table agent."""
    return f"agent:{agent_id}"


def duel_subject(side: str) -> str:
    """The grant subject of a duel's side (`user`, `opponent`)."""
    return f"duel:{side}"


def workflow_subject(workflow_id: str, node_id: str) -> str:
    """The grant subject of one node of a stored workflow."""
    return f"workflow:{workflow_id}:{node_id}"


def router_subject(router_id: str) -> str:
    """The grant subject of a stored router's panelists."""
    return f"router:{router_id}"


class _ServerFields(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class ServerCreate(_ServerFields):
    """An MCP server to register: a `command` (stdio) or a `url` (streamable HTTP), and the tools agents may call."""

    name: str = Field(pattern=SERVER_NAME_PATTERN,
                      description="Unique in the workspace; grants name its tools `<name>/<tool>`.")
    command: str | None = Field(None, min_length=1, max_length=1000,
                                description="The executable of a stdio server; one of PARLEY_TOOL_COMMANDS.")
    args: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=64,
                                                                description="The command's arguments.")
    env: dict[str, Secret] = Field(default_factory=dict, max_length=64, description=(
        "Environment variables of the command (secret: stored, never shown; only their names are)."))
    url: str | None = Field(None, min_length=1, max_length=2000,
                            description="The streamable-HTTP endpoint; under one of PARLEY_TOOL_URLS.")
    headers: dict[str, Secret] = Field(default_factory=dict, max_length=64, description=(
        "HTTP headers sent to the URL, e.g. `Authorization` (secret: stored, never shown; only their names are)."))
    allowed_tools: list[ToolName] = Field(min_length=1, max_length=MAX_SERVER_TOOLS, description=(
        "The tools of the server that agents may be granted; each must be one the server lists."))

    @model_validator(mode="after")
    def _one_transport(self) -> ServerCreate:
        _check_transport(self.command, self.url, self.args, self.env, self.headers)
        return self


class ServerUpdate(_ServerFields):
    """A change to a registered server; fields left out keep their value (`env` and `headers`, when given, replace
    the stored ones whole). The server's tools are listed again."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              json_schema_extra={"minProperties": 1})

    command: str | None = Field(None, min_length=1, max_length=1000)
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(None, max_length=64)
    env: dict[str, Secret] | None = Field(None, max_length=64)
    url: str | None = Field(None, min_length=1, max_length=2000)
    headers: dict[str, Secret] | None = Field(None, max_length=64)
    allowed_tools: list[ToolName] | None = Field(None, min_length=1, max_length=MAX_SERVER_TOOLS)


class GrantSet(BaseModel):
    """The tools a subject is granted (replacing what it had; an empty list removes the grant)."""

    model_config = ConfigDict(extra="forbid")

    tools: list[Annotated[str, Field(min_length=3, max_length=200)]] = Field(max_length=MAX_GRANTED_TOOLS, description=(
        "Each `server/tool`, `server/*` (every allowed tool of the server), `parley/search_documents` or "
        "`parley/earlier_syntheses` (round-table agents only)."))


def _check_transport(command: str | None, url: str | None, args: Any, env: Any, headers: Any) -> None:
    """Check that the fields describe one server, with env names an admin may set (`llm.mcp.env_refusal`) and
    headers they may send (`llm.mcp.header_refusal`); the URL is the deployment's to allow (`_listed`).

    Raises:
        ValueError: saying which field is at fault (never repeating a secret).
    """
    for why in (*map(mcp.env_refusal, env or {}), *(mcp.header_refusal(n, v) for n, v in (headers or {}).items())):
        if why is not None:
            raise ValueError(why)
    if (command is None) == (url is None):
        raise ValueError("send either command (a stdio server) or url (a streamable-HTTP server), not both or neither")
    if url is not None and (args or env):
        raise ValueError("args and env are for a stdio server (command), not a URL")
    if command is not None and headers:
        raise ValueError("headers are for a URL server, not a stdio command")


def _record(body: ServerCreate | dict[str, Any]) -> dict[str, Any]:
    data = body.model_dump() if isinstance(body, BaseModel) else body
    if data.get("command") is not None:
        return {"transport": "stdio", "command": data["command"], "args": list(data.get("args") or []),
                "env": dict(data.get("env") or {}), "url": None, "headers": {},
                "allowedTools": list(dict.fromkeys(data["allowed_tools"]))}
    return {"transport": "http", "command": None, "args": [], "env": {}, "url": data["url"],
            "headers": dict(data.get("headers") or {}), "allowedTools": list(dict.fromkeys(data["allowed_tools"]))}


async def _listed(record: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """`record` with the tools its server lists (those it allows) and its URL in the form that was checked and is
    called (`llm.mcp.normalise_url`), once its server is allowed and reachable.

    Raises:
        InvalidRequest: the deployment does not allow the server (`tool_server_not_allowed`), or an allowed tool is
            not one the server lists (`unknown_tool`).
        BadGateway: the server could not be started, reached or listed in time (`tool_server_unreachable`).
    """
    server = mcp.Server.of(record)
    why = mcp.refusal(server, settings)
    if why is not None:
        raise InvalidRequest(f"This server is not allowed: {why}", code="tool_server_not_allowed")
    if record["url"] is not None:
        record = {**record, "url": mcp.normalise_url(record["url"])}
    try:
        listed = await mcp.list_tools(server, settings, timeout=TOOL_CALL_TIMEOUT_SECONDS)
    except TimeoutError as exc:
        raise BadGateway(f"The server did not list its tools within {TOOL_CALL_TIMEOUT_SECONDS:g} seconds",
                         code="tool_server_unreachable") from exc
    except mcp.ServerUnreachable as exc:
        raise BadGateway(str(exc), code="tool_server_unreachable") from exc
    names = {t.name for t in listed}
    missing = [n for n in record["allowedTools"] if n not in names]
    if missing:
        raise InvalidRequest(f"allowedTools: the server lists no tool {', '.join(map(repr, missing))}; it lists "
                             f"{', '.join(sorted(names)) or 'none'}", code="unknown_tool")
    return {**record, "tools": [t.dump() for t in listed if t.name in record["allowedTools"]]}


def builtin_tools() -> list[dict[str, Any]]:
    """Parley's own tools, as `GET /v1/tools` shows them beside the servers."""
    async def none() -> list:
        return []

    return [{"grant": t.grant, "name": t.name, "description": t.description, "parameters": dict(t.parameters),
             "for": list(BUILTINS[t.grant])} for t in (search_documents(none), earlier_syntheses(none))]


async def register_server(db: AsyncDatabase, settings: Settings, *, workspace: str,
                          body: ServerCreate) -> dict[str, Any]:
    """Register an MCP server for the workspace's agents, once it is allowed and lists the allowed tools.

    Raises:
        InvalidRequest: a reserved name, too many servers, not allowed, an allowed tool it does not list.
        Conflict: a server of that name exists.
        BadGateway: it could not be reached.
    """
    if body.name in RESERVED_NAMES:
        raise InvalidRequest(f"name: {body.name!r} is reserved", code="invalid_request")
    if await tool_store.count_servers(db, workspace=workspace) >= MAX_TOOL_SERVERS:
        raise InvalidRequest(f"A workspace registers at most {MAX_TOOL_SERVERS} tool servers",
                             code="too_many_tool_servers")
    record = await _listed(_record(body), settings)
    doc = await tool_store.insert_server(db, workspace=workspace, server={"name": body.name, **record})
    if doc is None:
        raise Conflict(f"A tool server named {body.name!r} exists already", code="tool_server_exists")
    return tool_store.public_server(doc)


async def _server_or_404(db: AsyncDatabase, workspace: str, name: str) -> dict[str, Any]:
    doc = await tool_store.get_server(db, workspace=workspace, name=name)
    if doc is None:
        raise NotFound("Tool server not found", code="tool_server_not_found")
    return doc


# What says how a server is reached: shown to `admin` keys only.
REACH_FIELDS = ("command", "args", "envNames", "url", "headerNames")


def shown_server(doc: dict[str, Any], principal: Principal) -> dict[str, Any]:
    """A server as `principal` may see it, wherever Parley shows one: an `admin` key sees how it is reached (its
    command, args and env names, or its URL and header names); any other key (a `readonly` one) its name, allowed
    tools and their descriptions only. Secret values are shown to none."""
    server = tool_store.public_server(doc)
    if not access.is_admin(principal):
        return {key: value for key, value in server.items() if key not in REACH_FIELDS}
    if server.get("url"):
        server["url"] = mcp.shown_url(server["url"])  # one stored before credentials in URLs were refused
    return server


async def list_servers(db: AsyncDatabase, *, principal: Principal) -> dict[str, Any]:
    servers = await tool_store.list_servers(db, workspace=principal.workspace)
    return {"servers": [shown_server(s, principal) for s in servers], "builtins": builtin_tools()}


async def get_server(db: AsyncDatabase, *, principal: Principal, name: str) -> dict[str, Any]:
    return shown_server(await _server_or_404(db, principal.workspace, name), principal)


async def update_server(db: AsyncDatabase, settings: Settings, *, workspace: str, name: str,
                        body: ServerUpdate | None) -> dict[str, Any]:
    """Change a server (None: change nothing, list its tools again), once it is allowed and lists the allowed
    tools. A tool no longer allowed is no longer offered to the agents granted it.

    Raises:
        NotFound: no such server. InvalidRequest, BadGateway: as `register_server`.
    """
    doc = await _server_or_404(db, workspace, name)
    current = {"command": doc.get("command"), "args": doc.get("args") or [], "env": doc.get("env") or {},
               "url": doc.get("url"), "headers": doc.get("headers") or {}, "allowed_tools": doc["allowedTools"]}
    changes = body.model_dump(exclude_unset=True) if body is not None else {}
    if "command" in changes and changes["command"] is not None:
        current |= {"url": None, "headers": {}}
    if "url" in changes and changes["url"] is not None:
        current |= {"command": None, "args": [], "env": {}}
    merged = {**current, **{k: v for k, v in changes.items() if v is not None}}
    try:
        _check_transport(merged["command"], merged["url"], merged["args"], merged["env"], merged["headers"])
    except ValueError as exc:
        raise InvalidRequest(str(exc), code="invalid_request") from exc
    record = await _listed(_record(merged), settings)
    updated = await tool_store.replace_server(db, workspace=workspace, name=name, server=record)
    if updated is None:
        raise NotFound("Tool server not found", code="tool_server_not_found")
    return tool_store.public_server(updated)


async def delete_server(db: AsyncDatabase, *, workspace: str, name: str) -> None:
    """Remove a server, and its tools from every grant.

    Raises:
        NotFound: no such server.
    """
    if not await tool_store.delete_server(db, workspace=workspace, name=name):
        raise NotFound("Tool server not found", code="tool_server_not_found")


# --- grants ---------------------------------------------------------------------------------


_SUBJECT = re.compile(r"^(agent):([^:]{1,200})$|^(duel):(user|opponent)$|^(workflow):([^:]{1,200}):([^:]{1,200})$"
                      r"|^(router):([^:]{1,200})$")


async def _check_subject(db: AsyncDatabase, workspace: str, subject: str) -> str:
    """The kind of `subject` (`agent`, `duel`, `workflow`, `router`) once it names something of the workspace.

    Raises:
        InvalidRequest: not a subject (`invalid_subject`). NotFound: it names nothing (`subject_not_found`).
    """
    match = _SUBJECT.match(subject)
    if match is None:
        raise InvalidRequest(f"subject: {subject!r} is not one of {SUBJECT_HELP}", code="invalid_subject")
    kind, *parts = [g for g in match.groups() if g is not None]
    found = True
    if kind == "agent":
        found = await agent_store.get_agent(db, workspace=workspace, agent_id=parts[0]) is not None
    elif kind == "workflow":
        workflow = await workflow_store.find_workflow(db, workspace=workspace, workflow_id=parts[0])
        node = next((n for n in ((workflow or {}).get("spec") or {}).get("nodes") or [] if n.get("id") == parts[1]),
                    None)
        found = node is not None
        if node is not None and (node.get("type") != "llm" or (node.get("config") or {}).get("output_schema")):
            raise InvalidRequest(f"subject: node {parts[1]!r} is not a streamed `llm` node (one without "
                                 "`output_schema`), the only kind that calls tools", code="invalid_subject")
    elif kind == "router":  # a stored router: the preset has no record to hold a grant
        found = await router_store.get_router(db, workspace=workspace, router_id=parts[0]) is not None
    if not found:
        raise NotFound(f"subject: {subject} names nothing in this workspace", code="subject_not_found")
    return kind


async def _check_tools(db: AsyncDatabase, workspace: str, kind: str, tools: list[str]) -> list[str]:
    """`tools` without repeats, once each names an allowed tool of a registered server, or a built-in `kind` may
    hold.

    Raises:
        InvalidRequest: naming the grant at fault (`unknown_tool`).
    """
    tools = list(dict.fromkeys(t.strip() for t in tools))
    names = sorted({t.partition("/")[0] for t in tools} - {BUILTIN_SERVER})
    servers = {s["name"]: s for s in await tool_store.list_servers(db, workspace=workspace, names=names)}
    for grant in tools:
        server, _, tool = grant.partition("/")
        if not tool:
            raise InvalidRequest(f"tools: {grant!r} is not `server/tool`", code="unknown_tool")
        if server == BUILTIN_SERVER:
            if grant not in BUILTINS:
                raise InvalidRequest(f"tools: Parley has no built-in tool {grant!r} (it has "
                                     f"{', '.join(BUILTINS)})", code="unknown_tool")
            if kind not in BUILTINS[grant]:
                raise InvalidRequest(f"tools: {grant} is for {' and '.join(BUILTINS[grant])} subjects only",
                                     code="unknown_tool")
        elif server not in servers:
            raise InvalidRequest(f"tools: {grant!r} names no registered tool server ({server!r})", code="unknown_tool")
        elif tool != "*" and tool not in servers[server]["allowedTools"]:
            raise InvalidRequest(f"tools: {server!r} does not allow {tool!r} (it allows "
                                 f"{', '.join(servers[server]['allowedTools'])})", code="unknown_tool")
    return tools


async def set_grant(db: AsyncDatabase, *, workspace: str, subject: str, body: GrantSet) -> dict[str, Any]:
    """Grant `subject` exactly `body.tools` (an empty list removes its grant).

    Raises:
        InvalidRequest, NotFound: a subject or tool that is not the workspace's (see `_check_subject`, `_check_tools`).
    """
    kind = await _check_subject(db, workspace, subject)
    tools = await _check_tools(db, workspace, kind, body.tools)
    doc = await tool_store.set_grant(db, workspace=workspace, subject=subject, tools=tools)
    return tool_store.public_grant(doc) if doc else {"subject": subject, "tools": [], "updatedAt": None}


async def list_grants(db: AsyncDatabase, *, workspace: str) -> dict[str, Any]:
    return {"grants": [tool_store.public_grant(g) for g in await tool_store.list_grants(db, workspace=workspace)]}


async def grants_of(db: AsyncDatabase, *, workspace: str, subjects: list[str]) -> dict[str, list[str]]:
    """The tools each of `subjects` holds (for a run's input: grants name tools, never secrets)."""
    return await tool_store.grants_of(db, workspace=workspace, subjects=subjects)
