"""`/v1/routers`: a workspace's routers (fallback lists with debate settings) and the built-in `debate` preset."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from parley.api.deps import AppSettings, Db, Factory, Principal, require_scope
from parley.api.openapi import errors
from parley.services import routers as router_service
from parley.services.routers import RouterCreate, RouterUpdate

router = APIRouter(tags=["routers"], responses=errors((403, "The key lacks the `admin` scope, or is read-only.")))

PRESET_READ_ONLY = (409, "The router is the built-in `debate` preset, which cannot be changed.")

Reader = Annotated[Principal, Depends(require_scope("admin"))]
Writer = Annotated[Principal, Depends(require_scope("admin", write=True))]


@router.post("/v1/routers", status_code=201, summary="Create a router", responses=errors(
    (400, "A field is invalid, or debate is on and the models cannot fill a panel of distinct families."),
    (409, "A router with this id exists already, or the id is the preset's (`debate`).")))
async def create_router(body: RouterCreate, db: Db, caller: Writer, factory: Factory):
    return await router_service.create_router(db, workspace=caller.workspace, body=body, factory=factory)


@router.get("/v1/routers", summary="List the workspace's routers, the debate preset first")
async def list_routers(db: Db, settings: AppSettings, caller: Reader):
    return await router_service.list_routers(db, settings, workspace=caller.workspace)


@router.get("/v1/routers/{router_id}", summary="Show a router", responses=errors(404))
async def get_router(router_id: str, db: Db, settings: AppSettings, caller: Reader):
    found = await router_service.load_router(db, settings, workspace=caller.workspace, router_id=router_id)
    return router_service.public_router(found)


@router.patch("/v1/routers/{router_id}", summary="Change a router (debate on/off, models, panel size, prompts)",
              responses=errors((400, "A field is invalid or null where it cannot be, or debate would be on with "
                                     "too few model families."), 404, PRESET_READ_ONLY))
async def update_router(router_id: str, body: RouterUpdate, db: Db, caller: Writer, factory: Factory):
    return await router_service.update_router(db, workspace=caller.workspace, router_id=router_id, body=body,
                                              factory=factory)


@router.delete("/v1/routers/{router_id}", summary="Delete a router", responses=errors(404, PRESET_READ_ONLY))
async def delete_router(router_id: str, db: Db, caller: Writer):
    return await router_service.delete_router(db, workspace=caller.workspace, router_id=router_id)
