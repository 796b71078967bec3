"""`/v1/tools`: the MCP servers of a workspace's agents' tools, and the tools granted to each subject
(`services.tools`). `admin` keys change them; a `readonly` key reads them, seeing each server's name and tools, not
how it is reached (`services.tools.shown_server`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from parley.api.deps import AppSettings, Db, Principal, require_scope
from parley.api.openapi import errors
from parley.services import tools as tool_service
from parley.services.tools import GrantSet, ServerCreate, ServerUpdate

router = APIRouter(tags=["tools"], responses=errors((403, "The key lacks the `admin` scope, or is read-only.")))

Reader = Annotated[Principal, Depends(require_scope("admin"))]
Writer = Annotated[Principal, Depends(require_scope("admin", write=True))]

REFUSED_SERVER = (400, "A field is invalid; the deployment does not allow the command or URL "
                       "(`tool_server_not_allowed`); or an allowed tool is not one the server lists (`unknown_tool`).")
UNREACHABLE = (502, "The server could not be started, reached or listed (`tool_server_unreachable`).")
GRANT_REFUSED = (400, "The subject is not one Parley knows (`invalid_subject`), or a tool is not a registered "
                      "server's allowed tool or a built-in the subject may hold (`unknown_tool`).")


@router.get("/v1/tools", summary="List the workspace's tool servers and Parley's built-in tools")
async def list_tools(db: Db, caller: Reader) -> dict:
    return await tool_service.list_servers(db, principal=caller)


@router.post("/v1/tools", status_code=201, summary="Register an MCP server of tools for the workspace's agents",
             responses=errors(REFUSED_SERVER, (409, "A server of this name exists already."), UNREACHABLE))
async def register_server(body: ServerCreate, db: Db, settings: AppSettings, caller: Writer) -> dict:
    return {"server": await tool_service.register_server(db, settings, workspace=caller.workspace, body=body)}


@router.get("/v1/tools/grants", summary="List the tools granted to each subject")
async def list_grants(db: Db, caller: Reader) -> dict:
    return await tool_service.list_grants(db, workspace=caller.workspace)


@router.put("/v1/tools/grants/{subject}", summary="Grant a subject exactly these tools (an empty list: none)",
            responses=errors(GRANT_REFUSED, (404, "The subject names nothing in the workspace.")))
async def set_grant(subject: str, body: GrantSet, db: Db, caller: Writer) -> dict:
    return {"grant": await tool_service.set_grant(db, workspace=caller.workspace, subject=subject, body=body)}


@router.get("/v1/tools/{name}", summary="Show a tool server (the names of its secrets, never their values)",
            responses=errors(404))
async def get_server(name: str, db: Db, caller: Reader) -> dict:
    return {"server": await tool_service.get_server(db, principal=caller, name=name)}


@router.patch("/v1/tools/{name}", summary="Change a tool server; its tools are listed again",
              responses=errors(REFUSED_SERVER, 404, UNREACHABLE))
async def update_server(name: str, body: ServerUpdate, db: Db, settings: AppSettings, caller: Writer) -> dict:
    return {"server": await tool_service.update_server(db, settings, workspace=caller.workspace, name=name,
                                                       body=body)}


@router.post("/v1/tools/{name}/refresh", summary="List a tool server's tools again (new descriptions, schemas)",
             responses=errors(REFUSED_SERVER, 404, UNREACHABLE))
async def refresh_server(name: str, db: Db, settings: AppSettings, caller: Writer) -> dict:
    return {"server": await tool_service.update_server(db, settings, workspace=caller.workspace, name=name,
                                                       body=None)}


@router.delete("/v1/tools/{name}", status_code=204, summary="Remove a tool server, and its tools from every grant",
               responses=errors(404))
async def delete_server(name: str, db: Db, caller: Writer) -> Response:
    await tool_service.delete_server(db, workspace=caller.workspace, name=name)
    return Response(status_code=204)
