"""Routers: named fallback lists of models with debate settings, plus the built-in `debate` preset.

A router is what `model: "router/<id>"` selects in a chat completion. The preset is computed from
settings (`PARLEY_DEBATE_MODELS`, `PARLEY_ARBITRATOR_MODEL`, `PARLEY_DEBATE_ALLOW_SAME_FAMILY`) on every
request, so it always exists and follows the deployment's configuration. A router's `rule` says how its
debates decide (`graphs.panel.rules`). `model: "self-moa/<provider:model>"` selects the Self-MoA preset of that
model (`self_moa_router`), built the same way.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import SkipJsonSchema
from pymongo.asynchronous.database import AsyncDatabase

from parley.core import clock
from parley.core.fields import ModelId
from parley.core.limits import (
    DEFAULT_PANEL_SIZE,
    MAX_PANEL_SIZE,
    MAX_REASONING_SEATS,
    MAX_ROUTER_MODELS,
    MAX_ROUTERS,
    MIN_PANEL_SIZE,
    REASONING_EFFORTS,
)
from parley.core.settings import Settings
from parley.graphs.panel.rules import DEFAULT_RULE, RULES, RuleError, check_rule
from parley.graphs.panel.steps import TooFewFamiliesError, pick_panelists
from parley.llm.factory import ModelFactory
from parley.services.errors import Conflict, InvalidRequest, NotFound
from parley.store import routers as router_store

PRESET_ID = "debate"
# The built-in council presets beside `router/debate` (`council_preset`): the strongest models, and the cheapest with
# adaptive depth. Every preset id is reserved: no stored router takes one.
COUNCIL_PRESETS = ("quality", "budget")
PRESET_IDS = (PRESET_ID, *COUNCIL_PRESETS)
SELF_MOA_PREFIX = "self-moa/"
ROUTER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


# A seat's model id (`core.fields.ModelId`, bounded); `_clean_models` refuses a blank one, declared in the JSON Schema
# as a pattern.
SeatId = Annotated[ModelId, Field(json_schema_extra={"pattern": r"\S"})]
# `check_rule_fields` refuses any other (400 `invalid_rule`, naming the field); declared in the JSON Schema.
RuleName = Annotated[str, Field(json_schema_extra={"enum": list(RULES)})]
RULE_HELP = ("How a debate decides: `synthesis` (the arbitrator writes the answer), `vote` (the majority of the "
             "answers read by `answerRule`), `rank` (panelists rank each other's answers, Borda count), "
             "`best-of-n` (a judge picks one, in both reading orders) or `analysis` (no one decides: the labelled "
             "answers and their map, `_meta.analysis`, for a caller whose own model writes the answer).")
Depth = Literal["full", "adaptive"]
DEPTH_HELP = ("`full` asks every panelist at once; `adaptive` asks two of distinct families first, and the rest of "
              "the panel and the rule only when their answers disagree (a request's `depth` replaces it).")
ANSWER_RULE_HELP = ("How `vote` reads an answer: `number`, `choice`, `exact` (the default) or `regex:<pattern>`; "
                    "the panelists are asked for that format.")


# A reasoning effort (`llm.providers.REASONING_EFFORTS`), checked against each model where it is asked for.
Effort = Literal[REASONING_EFFORTS]
# A reasoning effort per model id (a router's, a request's), bounded as any list a body holds.
Efforts = Annotated[dict[ModelId, Effort],
                    Field(max_length=MAX_REASONING_SEATS)]
REASONING_HELP = ("The reasoning effort of each seat, by model id (`{\"openai:o4-mini\": \"high\"}`): sent as the "
                  "model's provider takes it (OpenAI's `reasoning_effort`); a model that takes none is refused "
                  "(400 `reasoning_unsupported`).")


def check_reasoning(factory: ModelFactory, efforts: dict[str, str] | None, *, field: str,
                    default: str | None = None) -> None:
    """Refuse a reasoning effort asked of a model that takes none (`ModelFactory.reasoning_problem`), 400
    `reasoning_unsupported` naming the model and `field`; a `"*"` key (a request's one effort for every seat) is
    checked against `default` (its model), when there is one."""
    for model, effort in (efforts or {}).items():
        target = default if model == "*" else model
        if model == "*" and target is None:
            continue
        if problem := factory.reasoning_problem(target, effort):
            raise InvalidRequest(f"{field}: {problem}", code="reasoning_unsupported", param=field)


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
    models: list[SeatId] = Field(min_length=1, max_length=MAX_ROUTER_MODELS,
                                 description="Fallback list of `provider:model`, in order.")
    arbitrator: ModelId | None = Field(None, description="Arbitrator of debates; the deployment's when null.")
    debate: bool = Field(False, description="Debate every request unless it says `debate: false`.")
    panel_size: int = Field(DEFAULT_PANEL_SIZE, ge=MIN_PANEL_SIZE, le=MAX_PANEL_SIZE,
                            description=f"Panelists ({MIN_PANEL_SIZE}-{MAX_PANEL_SIZE}).")
    allow_same_family: bool = Field(
        False, description="Fill seats the models' families cannot by sampling the models again (self-consistency)."
    )
    system_prompt: str | None = Field(None, description="Sent before the caller's messages to every model.")
    arbitrator_prompt: str | None = Field(None, description="Replaces the arbitrator's built-in instructions.")
    rule: RuleName = Field(DEFAULT_RULE, description=RULE_HELP)
    answer_rule: str | None = Field(None, description=ANSWER_RULE_HELP)
    depth: Depth = Field("full", description=DEPTH_HELP)
    reasoning_effort: Efforts | None = Field(None, description=REASONING_HELP)


class RouterUpdate(_RouterFields):
    """A partial change; fields left out keep their value, `null` clears the optional ones (the others refuse it,
    so their null is not declared)."""

    models: Annotated[list[SeatId], Field(min_length=1, max_length=MAX_ROUTER_MODELS)] | SkipJsonSchema[None] = None
    arbitrator: ModelId | None = None
    debate: bool | SkipJsonSchema[None] = None
    panel_size: Annotated[int, Field(ge=MIN_PANEL_SIZE, le=MAX_PANEL_SIZE)] | SkipJsonSchema[None] = None
    allow_same_family: bool | SkipJsonSchema[None] = None
    system_prompt: str | None = None
    arbitrator_prompt: str | None = None
    rule: RuleName | SkipJsonSchema[None] = Field(None, description=RULE_HELP)
    answer_rule: str | None = Field(None, description=ANSWER_RULE_HELP)
    depth: Depth | SkipJsonSchema[None] = Field(None, description=DEPTH_HELP)
    reasoning_effort: Efforts | None = Field(None, description=REASONING_HELP)


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
        "rule": router.get("rule") or DEFAULT_RULE,
        "answerRule": router.get("answer_rule"),
        "depth": router.get("depth") or "full",
        "reasoningEffort": router.get("reasoning_effort"),
        "preset": router.get("preset", False),
        "createdAt": clock.iso(router.get("createdAt")),
        "updatedAt": clock.iso(router.get("updatedAt")),
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
        "rule": DEFAULT_RULE,
        "answer_rule": None,
        "preset": True,
    }


def council_preset(settings: Settings, preset: str) -> dict[str, Any]:
    """The built-in `router/quality` or `router/budget`: debate on, the preset's models (`Settings.preset_models`)
    and the deployment's arbitrator; `budget` asks two seats first and the third only when they disagree (adaptive
    depth). On a fresh install both resample the embedded model, as `router/debate` does."""
    models = settings.preset_models(preset)
    return {**preset_router(settings), "id": preset, "models": models,
            "allow_same_family": settings.uses_embedded_model and models == preset_router(settings)["models"],
            "depth": "adaptive" if preset == "budget" else "full"}


def self_moa_router(settings: Settings, model: str | None = None) -> dict[str, Any]:
    """The Self-MoA preset of `model` (`PARLEY_SELF_MOA_MODEL`, else the default model, when None), what
    `model: "self-moa/<model>"` selects: debate on, three samples of that one model at spread temperatures, then
    the deployment's arbitrator decides (Li et al. 2025: sampling the strongest model several times beats mixing
    weaker ones). A request's `rule` applies as on any router.

    Raises:
        InvalidRequest: `model` is blank.
    """
    model = (settings.self_moa_model if model is None else model).strip()
    if not model:
        raise InvalidRequest("self-moa/ needs a model after the slash, e.g. 'self-moa/openai:gpt-4o'",
                             code="invalid_model")
    return {**preset_router(settings), "id": SELF_MOA_PREFIX + model, "models": [model], "arbitrator": None,
            "allow_same_family": True}


def check_rule_fields(router: dict[str, Any]) -> None:
    """Refuse a rule, answer rule or rule/panel-size pair that cannot work (`InvalidRequest` naming the field)."""
    try:
        check_rule(router.get("rule") or DEFAULT_RULE, router.get("answer_rule"),
                   router.get("panel_size", DEFAULT_PANEL_SIZE))
    except RuleError as exc:
        raise rule_error(exc, field=to_camel(exc.param)) from None


def rule_error(exc: RuleError, *, field: str) -> InvalidRequest:
    """The refusal of a bad rule: 400, its code naming the field (`invalid_rule`, `invalid_answer_rule`)."""
    return InvalidRequest(str(exc), code=f"invalid_{exc.param}", param=field)


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
    if router_id in PRESET_IDS:
        raise Conflict(
            f"'{router_id}' is a built-in preset; it follows the deployment's settings (PARLEY_DEBATE_MODELS, "
            "PARLEY_QUALITY_MODELS, PARLEY_BUDGET_MODELS, PARLEY_ARBITRATOR_MODEL) and cannot be changed here. "
            "Create a router with another id instead.",
            code="preset_read_only",
        )


def _not_found(router_id: str) -> NotFound:
    return NotFound(f"No router '{router_id}' in this workspace (model 'router/{router_id}')", code="router_not_found")


async def load_router(db: AsyncDatabase, settings: Settings, *, workspace: str, router_id: str) -> dict[str, Any]:
    """The router `router_id` of `workspace` (or the preset); `NotFound` when there is none."""
    if router_id == PRESET_ID:
        return preset_router(settings)
    if router_id in COUNCIL_PRESETS:
        return council_preset(settings, router_id)
    router = await router_store.get_router(db, workspace=workspace, router_id=router_id)
    if router is None:
        raise _not_found(router_id)
    return router


async def routers_of(db: AsyncDatabase, settings: Settings, *, workspace: str, limit: int = 0) -> list[dict[str, Any]]:
    """Every router a key of `workspace` may use: the presets first (`debate`, `quality`, `budget`), then the
    workspace's own by id (the first `limit` of them; 0: all)."""
    presets = [preset_router(settings), *(council_preset(settings, p) for p in COUNCIL_PRESETS)]
    return presets + await router_store.list_routers(db, workspace=workspace, limit=limit)


async def list_routers(db: AsyncDatabase, settings: Settings, *, workspace: str) -> dict[str, Any]:
    routers = await routers_of(db, settings, workspace=workspace)
    return {"object": "list", "data": [public_router(r) for r in routers]}


def check_router_reasoning(factory: ModelFactory | None, router: dict[str, Any]) -> None:
    """Refuse a router's `reasoningEffort` for a model it does not seat (400 `invalid_reasoning_effort`) or one that
    takes no effort (400 `reasoning_unsupported`; checked where the factory is given)."""
    efforts = router.get("reasoning_effort") or {}
    seated = {*(router.get("models") or ()), *([router["arbitrator"]] if router.get("arbitrator") else [])}
    if strangers := sorted(set(efforts) - seated):
        raise InvalidRequest(f"reasoningEffort: {', '.join(strangers)} is not among the router's models or its "
                             "arbitrator", code="invalid_reasoning_effort", param="reasoningEffort")
    if factory is not None:
        check_reasoning(factory, efforts, field="reasoningEffort")


async def create_router(db: AsyncDatabase, *, workspace: str, body: RouterCreate,
                        factory: ModelFactory | None = None) -> dict[str, Any]:
    _refuse_preset(body.id)
    router = body.model_dump()
    check_rule_fields(router)
    check_debate_ready(router)
    check_router_reasoning(factory, router)
    if await router_store.count_routers(db, workspace=workspace) >= MAX_ROUTERS:
        raise InvalidRequest(f"A workspace stores at most {MAX_ROUTERS} routers: delete one first",
                             code="too_many_routers")
    stored = await router_store.insert_router(db, workspace=workspace, router=router)
    if stored is None:
        raise Conflict(f"A router '{body.id}' already exists in this workspace", code="router_exists")
    return public_router(stored)


async def update_router(db: AsyncDatabase, *, workspace: str, router_id: str, body: RouterUpdate,
                        factory: ModelFactory | None = None) -> dict[str, Any]:
    _refuse_preset(router_id)
    current = await router_store.get_router(db, workspace=workspace, router_id=router_id)
    if current is None:
        raise _not_found(router_id)
    changes = body.model_dump(exclude_unset=True)
    for required in ("models", "debate", "panel_size", "allow_same_family", "rule", "depth"):
        if required in changes and changes[required] is None:
            raise InvalidRequest(f"{to_camel(required)} cannot be null", code="invalid_request")
    check_rule_fields({**current, **changes})
    check_debate_ready({**current, **changes})
    check_router_reasoning(factory, {**current, **changes})
    updated = await router_store.update_router(db, workspace=workspace, router_id=router_id, changes=changes)
    if updated is None:  # deleted meanwhile
        raise _not_found(router_id)
    return public_router(updated)


async def delete_router(db: AsyncDatabase, *, workspace: str, router_id: str) -> dict[str, Any]:
    _refuse_preset(router_id)
    if not await router_store.delete_router(db, workspace=workspace, router_id=router_id):
        raise _not_found(router_id)
    return {"id": router_id, "object": "router.deleted", "deleted": True}
