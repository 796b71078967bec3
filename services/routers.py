"""Routers: named fallback lists of models with debate settings, plus the built-in `debate` preset.

A router is what `model: "router/<id>"` selects in a chat completion. The preset is computed from
settings (`PARLEY_DEBATE_MODELS`, `PARLEY_ARBITRATOR_MODEL`, `PARLEY_DEBATE_ALLOW_SAME_FAMILY`) on every
request, so it always exists and follows the deployment's configuration.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema
from pymongo.asynchronous.database import AsyncDatabase

from core.limits import DEFAULT_PANEL_SIZE, MAX_PANEL_SIZE, MIN_PANEL_SIZE
from core.settings import Settings
from graphs.panel.steps import TooFewFamiliesError, pick_panelists
from services.errors import Conflict, InvalidRequest, NotFound
from store import routers as router_store

PRESET_ID = "debate"
ROUTER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


# `_clean_models` refuses a blank model id; declared in the JSON Schema as a pattern.
ModelId = Annotated[str, Field(json_schema_extra={"pattern": r"\S"})]


class _RouterFields(BaseModel):
    """Fields shared by creation and update; camelCase on the wire, snake_case accepted too."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    @field_validator("models", check_fields=False)
    @classmethod
    def _clean_models(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        cleaned = list(dict.fromkeys(m.strip() for m in value))
        if any(not m for m in cleaned):
            raise ValueError("model ids must be non-empty strings such as 'openai:gpt-5'")
        return cleaned


class RouterCreate(_RouterFields):
    """A new router."""

    id: str = Field(pattern=ROUTER_ID_PATTERN, description="Unique in the workspace; used as `router/<id>`.")
    models: list[ModelId] = Field(min_length=1, max_length=32, description="Fallback list of `provider:model`, in order.")
    arbitrator: str | None = Field(None, min_length=1, description="Arbitrator of debates; the deployment's when null.")
    debate: bool = Field(False, description="Debate every request unless it says `debate: false`.")
    panel_size: int = Field(DEFAULT_PANEL_SIZE, ge=MIN_PANEL_SIZE, le=MAX_PANEL_SIZE,
                            description=f"Panelists ({MIN_PANEL_SIZE}-{MAX_PANEL_SIZE}).")
    allow_same_family: bool = Field(
        False, description="Fill seats the models' families cannot by sampling the models again (self-consistency)."
    )
    system_prompt: str | None = Field(None, description="Sent before the caller's messages to every model.")
    arbitrator_prompt: str | None = Field(None, description="Replaces the arbitrator's built-in instructions.")


class RouterUpdate(_RouterFields):
    """A partial change; fields left out keep their value, `null` clears the optional ones (the others refuse it,
    so their null is not declared)."""

    models: Annotated[list[ModelId], Field(min_length=1, max_length=32)] | SkipJsonSchema[None] = None
    arbitrator: str | None = Field(None, min_length=1)
    debate: bool | SkipJsonSchema[None] = None
    panel_size: Annotated[int, Field(ge=MIN_PANEL_SIZE, le=MAX_PANEL_SIZE)] | SkipJsonSchema[None] = None
    allow_same_family: bool | SkipJsonSchema[None] = None
    system_prompt: str | None = None
    arbitrator_prompt: str | None = None


def _iso(value: Any) -> Any:
    return value.isoformat().replace("+00:00", "Z") if isinstance(value, datetime) else value


def public_router(router: dict[str, Any]) -> dict[str, Any]:
    """A router in its wire shape."""
    return {
        "id": router["id"],
        "object": "router",
        "models": router["models"],
        "arbitrator": router.get("arbitrator"),
        "debate": router.get("debate", False),
        "panelSize": router.get("panel_size", DEFAULT_PANEL_SIZE),
        "allowSameFamily": router.get("allow_same_family", False),
        "systemPrompt": router.get("system_prompt"),
        "arbitratorPrompt": router.get("arbitrator_prompt"),
        "preset": router.get("preset", False),
        "createdAt": _iso(router.get("createdAt")),
        "updatedAt": _iso(router.get("updatedAt")),
    }


def preset_router(settings: Settings) -> dict[str, Any]:
    """The built-in `router/debate`: debate on, the deployment's debate models and arbitrator.

    It resamples (allowSameFamily) exactly when `Settings.debate_allow_same_family` says so: by default
    only for the embedded model a fresh install has, never for a configured PARLEY_DEBATE_MODELS.
    """
    return {
        "id": PRESET_ID,
        "models": settings.debate_models,
        "arbitrator": settings.arbitrator_model,
        "debate": True,
        "panel_size": DEFAULT_PANEL_SIZE,
        "allow_same_family": settings.debate_allow_same_family,
        "system_prompt": None,
        "arbitrator_prompt": None,
        "preset": True,
    }


def check_debate_ready(router: dict[str, Any]) -> None:
    """Refuse debate on a router whose models cannot fill a panel of distinct families (`InvalidRequest`).

    A router that allows same-family panels can always fill one, so it is not checked.
    """
    if not router.get("debate") or router.get("allow_same_family"):
        return
    try:
        pick_panelists(router["models"], router.get("panel_size", DEFAULT_PANEL_SIZE))
    except TooFewFamiliesError as exc:
        raise InvalidRequest(f"Cannot enable debate on router '{router['id']}': {exc}",
                             code="too_few_families") from exc


def _refuse_preset(router_id: str) -> None:
    if router_id == PRESET_ID:
        raise Conflict(
            f"'{PRESET_ID}' is the built-in debate preset; it follows PARLEY_DEBATE_MODELS and "
            "PARLEY_ARBITRATOR_MODEL and cannot be changed here. Create a router with another id instead.",
            code="preset_read_only",
        )


def _not_found(router_id: str) -> NotFound:
    return NotFound(f"No router '{router_id}' in this workspace (model 'router/{router_id}')", code="router_not_found")


async def load_router(db: AsyncDatabase, settings: Settings, *, workspace: str, router_id: str) -> dict[str, Any]:
    """The router `router_id` of `workspace` (or the preset); `NotFound` when there is none."""
    if router_id == PRESET_ID:
        return preset_router(settings)
    router = await router_store.get_router(db, workspace=workspace, router_id=router_id)
    if router is None:
        raise _not_found(router_id)
    return router


async def list_routers(db: AsyncDatabase, settings: Settings, *, workspace: str) -> dict[str, Any]:
    routers = [preset_router(settings)] + await router_store.list_routers(db, workspace=workspace)
    return {"object": "list", "data": [public_router(r) for r in routers]}


async def create_router(db: AsyncDatabase, *, workspace: str, body: RouterCreate) -> dict[str, Any]:
    _refuse_preset(body.id)
    router = body.model_dump()
    check_debate_ready(router)
    stored = await router_store.insert_router(db, workspace=workspace, router=router)
    if stored is None:
        raise Conflict(f"A router '{body.id}' already exists in this workspace", code="router_exists")
    return public_router(stored)


async def update_router(db: AsyncDatabase, *, workspace: str, router_id: str, body: RouterUpdate) -> dict[str, Any]:
    _refuse_preset(router_id)
    current = await router_store.get_router(db, workspace=workspace, router_id=router_id)
    if current is None:
        raise _not_found(router_id)
    changes = body.model_dump(exclude_unset=True)
    for required in ("models", "debate", "panel_size", "allow_same_family"):
        if required in changes and changes[required] is None:
            raise InvalidRequest(f"{to_camel(required)} cannot be null", code="invalid_request")
    check_debate_ready({**current, **changes})
    updated = await router_store.update_router(db, workspace=workspace, router_id=router_id, changes=changes)
    if updated is None:  # deleted meanwhile
        raise _not_found(router_id)
    return public_router(updated)


async def delete_router(db: AsyncDatabase, *, workspace: str, router_id: str) -> dict[str, Any]:
    _refuse_preset(router_id)
    if not await router_store.delete_router(db, workspace=workspace, router_id=router_id):
        raise _not_found(router_id)
    return {"id": router_id, "object": "router.deleted", "deleted": True}
