"""`/v1/models`: the routers and models a key may ask for, in OpenAI's shape (`client.models.list()`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from parley.api.deps import AppSettings, Db, Principal, require_scope
from parley.api.openapi import errors
from parley.services import models as model_service
from parley.services.models import Model, ModelList

router = APIRouter(tags=["chat"], responses=errors((403, "The key lacks the `chat` scope.")))

Reader = Annotated[Principal, Depends(require_scope("chat"))]


@router.get("/v1/models", summary="List the routers (as `router/<id>`) and models this key may use")
async def list_models(db: Db, settings: AppSettings, caller: Reader) -> ModelList:
    return await model_service.list_models(db, settings, workspace=caller.workspace)


@router.get("/v1/models/{model_id:path}", summary="Show one router or model", responses=errors(
    (404, "No such router or model for this key (`code`: `model_not_found`).")))
async def get_model(model_id: str, db: Db, settings: AppSettings, caller: Reader) -> Model:
    return await model_service.get_model(db, settings, workspace=caller.workspace, model_id=model_id)
