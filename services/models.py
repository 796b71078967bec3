"""`/v1/models`: what a key may put in a chat completion's `model`, in OpenAI's list shape.

Each router the key's workspace may use (the preset and the workspace's own: `services.routers.routers_of`, the
same rule as `/v1/routers`) is a model `router/<id>`, described in `metadata` (its panel, arbitrator and rule);
then the Self-MoA preset of the deployment's `PARLEY_SELF_MOA_MODEL` (`self-moa/<model>`; any model's
`self-moa/<provider:model>` can be asked for and retrieved); then the deployment's plain models (its default model,
the preset's models and arbitrator, and every model the workspace's routers list), each a `provider:model` id that
chat completions answer with directly.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pymongo.asynchronous.database import AsyncDatabase

from parley.core.limits import (
    DEFAULT_PANEL_SIZE,
    MAX_MODEL_ID_CHARS,
    MAX_PANEL_SIZE,
    MAX_ROUTER_MODELS,
    MAX_ROUTERS,
    MIN_PANEL_SIZE,
)
from parley.core.settings import Settings
from parley.llm.families import independent_first, model_family
from parley.llm.providers import DEFAULT_PROVIDER, split_model_id
from parley.services.errors import InvalidRequest, NotFound
from parley.services.panel import plan_for_router
from parley.services.routers import SELF_MOA_PREFIX, load_router, routers_of, self_moa_router

ROUTER_PREFIX = "router/"
OWNER = "parley"  # `owned_by` of the routers: Parley serves them, whoever's models they seat


# --- the wire shape -------------------------------------------------------------------------


class RouterMetadata(BaseModel):
    """What a request to a router (`router/<id>`, `self-moa/<model>`) does."""

    kind: Literal["router"]
    preset: bool = Field(description="Built in (`router/debate`, a Self-MoA preset) rather than stored.")
    debate: bool = Field(description="Debates every request unless it says `debate: false`.")
    models: list[str] = Field(description="The fallback list, in order.")
    panel: list[str] | None = Field(description="The panelists a debate seats; null when the models cannot fill "
                                                "a panel of distinct families.")
    panelSize: int = Field(ge=MIN_PANEL_SIZE, le=MAX_PANEL_SIZE, description="Panelists of a debate.")
    allowSameFamily: bool = Field(description="Seats its families cannot fill are filled by resampling.")
    arbitrator: str | None = Field(description="The arbitrator (and judge) asked first.")
    independentArbitrator: bool = Field(description="Whether that arbitrator's family is outside the panel's.")
    rule: str = Field(description="How a debate decides: synthesis, vote, rank, best-of-n or analysis.")
    answerRule: str | None = Field(description="How `vote` reads answers (null: exact).")
    depth: Literal["full", "adaptive"] = Field(description="`adaptive`: two seats first, the rest on disagreement.")


class PlainMetadata(BaseModel):
    """A model chat completions answer with directly."""

    kind: Literal["model"]
    family: str = Field(description="Its family (`model_family`): panels seat distinct ones.")


class Model(BaseModel):
    """One entry of `/v1/models`, in OpenAI's shape plus Parley's `metadata`."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(description="What `model` of a chat completion takes: `router/<id>`, `self-moa/<model>` or "
                                "`provider:model`.")
    object: Literal["model"] = "model"
    created: int = Field(description="Unix seconds; 0 for what is built in or configured.")
    owned_by: str = Field(description="`parley` for a router, else the model's provider.")
    metadata: Annotated[RouterMetadata | PlainMetadata, Field(discriminator="kind")]


class ModelList(BaseModel):
    """`GET /v1/models`: OpenAI's list shape."""

    object: Literal["list"] = "list"
    data: list[Model]


# --- building it ----------------------------------------------------------------------------


def _created(router: dict[str, Any]) -> int:
    """When the router was made, in Unix seconds (OpenAI's `created`); 0 for the presets, which are built in."""
    made = router.get("createdAt")
    return int(made.timestamp()) if isinstance(made, datetime) else 0


def router_model(router: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """A router as an OpenAI model: `router/<id>` (a Self-MoA preset's id as it is), with what a request to it does
    in `metadata` (the panel a debate seats, or null when its models cannot fill one; the arbitrator that decides
    first; its rule)."""
    try:
        plan = plan_for_router(router, settings, debate=True)
        panel = plan.panelists
        arbitrators, independent = independent_first(plan.arbitrators, panel)
    except InvalidRequest:  # too few families for a debate: the router answers with one model at a time
        panel, arbitrators, independent = None, [m for m in (router.get("arbitrator"), settings.arbitrator_model)
                                                 if m], False
    return {
        "id": router["id"] if router["id"].startswith(SELF_MOA_PREFIX) else ROUTER_PREFIX + router["id"],
        "object": "model",
        "created": _created(router),
        "owned_by": OWNER,
        "metadata": {
            "kind": "router",
            "preset": router.get("preset", False),
            "debate": router.get("debate", False),
            "models": list(router["models"]),
            "panel": panel,
            "panelSize": router.get("panel_size") or DEFAULT_PANEL_SIZE,
            "allowSameFamily": router.get("allow_same_family", False),
            "arbitrator": arbitrators[0] if arbitrators else None,
            "independentArbitrator": independent,
            "rule": router.get("rule") or "synthesis",
            "answerRule": router.get("answer_rule"),
            "depth": router.get("depth") or "full",
        },
    }


def plain_model(model_id: str) -> dict[str, Any]:
    """A `provider:model` id as an OpenAI model, owned by its provider."""
    return {"id": model_id, "object": "model", "created": 0,
            "owned_by": split_model_id(model_id)[0] or DEFAULT_PROVIDER,
            "metadata": {"kind": "model", "family": model_family(model_id)}}


def deployment_models(settings: Settings, routers: list[dict[str, Any]]) -> list[str]:
    """The plain models a key may name: the default model, the presets' models and arbitrator, the self-MoA model,
    and every model (and arbitrator) the routers list, each once, in that order."""
    ids = [settings.default_model, *settings.debate_models, settings.arbitrator_model, settings.self_moa_model]
    for router in routers:
        ids += [*router["models"], *([router["arbitrator"]] if router.get("arbitrator") else [])]
    return list(dict.fromkeys(ids))


def _bounded(router: dict[str, Any]) -> bool:
    """Whether every model id a router names is within `MAX_MODEL_ID_CHARS`, as every router stored since they are
    bounded is (one stored before is left out of `/v1/models`)."""
    ids = [*router["models"], *([router["arbitrator"]] if router.get("arbitrator") else [])]
    return len(ids) <= MAX_ROUTER_MODELS + 1 and all(len(m) <= MAX_MODEL_ID_CHARS for m in ids)


async def listed_routers(db: AsyncDatabase, settings: Settings, *, workspace: str) -> list[dict[str, Any]]:
    """The routers `/v1/models` lists: the presets, then at most `MAX_ROUTERS` of the workspace's own (by id), each
    within the bounds a router is held to, so that the list any key reads is bounded."""
    return [r for r in await routers_of(db, settings, workspace=workspace, limit=MAX_ROUTERS) if _bounded(r)]


async def list_models(db: AsyncDatabase, settings: Settings, *, workspace: str) -> dict[str, Any]:
    """`GET /v1/models`: the routers (the preset first), the Self-MoA preset, then the plain models."""
    routers = await listed_routers(db, settings, workspace=workspace)
    data = [router_model(r, settings) for r in [*routers, self_moa_router(settings)]]
    data += [plain_model(m) for m in deployment_models(settings, routers)]
    return {"object": "list", "data": data}


async def get_model(db: AsyncDatabase, settings: Settings, *, workspace: str, model_id: str) -> dict[str, Any]:
    """`GET /v1/models/{id}`: one entry of the list, or any model's Self-MoA preset; `NotFound` (code
    `model_not_found`) for any other id."""
    if model_id.startswith(SELF_MOA_PREFIX):
        try:
            return router_model(self_moa_router(settings, model_id.removeprefix(SELF_MOA_PREFIX)), settings)
        except InvalidRequest:
            raise _not_found(model_id) from None
    if model_id.startswith(ROUTER_PREFIX):
        try:
            router = await load_router(db, settings, workspace=workspace, router_id=model_id[len(ROUTER_PREFIX):])
        except NotFound:
            raise _not_found(model_id) from None
        return router_model(router, settings)
    if model_id in deployment_models(settings, await listed_routers(db, settings, workspace=workspace)):
        return plain_model(model_id)
    raise _not_found(model_id)


def _not_found(model_id: str) -> NotFound:
    if len(model_id) > MAX_MODEL_ID_CHARS:  # no model has such an id: it is not echoed whole
        model_id = model_id[:MAX_MODEL_ID_CHARS] + "…"
    return NotFound(f"The model '{model_id}' does not exist or you do not have access to it (GET /v1/models lists "
                    "the routers and models of this workspace)", code="model_not_found")
