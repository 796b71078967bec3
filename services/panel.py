"""OpenAI-compatible chat completions over panels: resolve the router, plan the request, reserve its credit and
start the panel run (the run settles the credit and records usage when it ends, `services.billing`).

Billing: every request whose models have a price reserves what its calls can spend before any model is called
(`PaymentRequired` when the workspace's balance cannot cover it) and settles to the actual cost afterwards, failures
included, so nothing beyond what was used is ever charged. The reservation (`spendable_calls`, `estimate_cost`) counts
every call the request may make, each at its own model's price: its prompt (a reviewer's and the arbitrator's read the
answers) and its output cap; a `rank` reviewer's second attempt and a `response_format`'s repair count too; a request
with a budget reserves at most its `maxCost`. Unpriced models cost 0, so requests using only them need no credit at
all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, WithJsonSchema, field_validator, model_validator

from parley.core.fields import ModelId
from parley.core.limits import (
    DEFAULT_MIN_SUCCESSES,
    DEFAULT_PANEL_SIZE,
    MAX_CHAT_MESSAGES,
    MAX_CRITERIA_CHARS,
    MAX_MODEL_ID_CHARS,
    MAX_PANEL_SIZE,
    MAX_QUORUM_GRACE_SECONDS,
    MAX_TOOLS,
    MIN_PANEL_SIZE,
)
from parley.core.settings import Settings
from parley.graphs.panel import panel_input, unanswerable
from parley.graphs.panel.rules import DEFAULT_RULE, RuleError, check_rule
from parley.graphs.panel.steps import TooFewFamiliesError, pick_panelists, to_messages
from parley.llm.client import off_loop
from parley.llm.budget import BudgetLimits, CallEstimate
from parley.llm.factory import ModelFactory
from parley.llm.formats import NAME, AnswerFormat
from parley.llm.tokens import approx_text_tokens, approx_tokens
from parley.llm.tools import ToolSet, check_tool_messages
from parley.nodes.arbitrate import ANSWER_LETTERS
from parley.nodes.rank import REVIEW_ATTEMPTS, ranking_schema
from parley.runs import Caller
from parley.services import billing, steering
from parley.services import tools as tool_service
from parley.services.backend import Backend
from parley.services.chat_apps import Housekeeping, housekeeping
from parley.services.errors import InvalidRequest, RunFailed, invalid_field
from parley.services.routers import (
    RULE_HELP,
    SELF_MOA_PREFIX,
    Effort,
    Efforts,
    RuleName,
    check_reasoning,
    load_router,
    rule_error,
    self_moa_router,
)
from parley.services.tools import router_subject

log = logging.getLogger("parley.panel")

# Output tokens assumed for the estimate when the request sets no cap.
ESTIMATE_OUTPUT_TOKENS = 1024

RouterMode = Literal["debate", "panel", "fallback", "direct", "housekeeping"]


# --- request --------------------------------------------------------------------------------


LEGACY = ("functions", "function_call")


def _declare_no_legacy_functions(schema: dict[str, Any]) -> None:
    """`_no_legacy_functions` refuses these fields unless they are empty (falsy): say so in the JSON Schema."""
    for name in LEGACY:
        schema["properties"][name] = {"enum": [None, False, 0, "", [], {}],
                                      "description": "OpenAI's deprecated form of tools, refused: send `tools` and "
                                                     "`tool_choice`. Only an empty value is accepted."}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


# The shapes `llm.tools.ToolSet` and `llm.formats.AnswerFormat` accept, for the OpenAPI document (they check them).
FUNCTION_SCHEMA = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "pattern": NAME.pattern},
    "description": {"type": "string"},
    "parameters": {"type": "object", "description": "The arguments, as a JSON Schema."},
    "strict": {"type": "boolean"}}}
TOOLS_SCHEMA = _nullable({"type": "array", "maxItems": MAX_TOOLS, "items": {
    "type": "object", "required": ["type", "function"],
    "properties": {"type": {"const": "function"}, "function": FUNCTION_SCHEMA}}})
TOOL_CHOICE_SCHEMA = _nullable({"anyOf": [
    {"enum": ["auto", "none", "required"]},
    {"type": "object", "required": ["type", "function"], "properties": {
        "type": {"const": "function"},
        "function": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}]})
RESPONSE_FORMAT_SCHEMA = _nullable({"anyOf": [
    {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["text", "json_object"]}}},
    {"type": "object", "required": ["type", "json_schema"], "properties": {
        "type": {"const": "json_schema"},
        "json_schema": {"type": "object", "properties": {
            "name": {"type": "string", "pattern": NAME.pattern},
            "description": {"type": "string"},
            "schema": {"type": "object", "description": "The answer's JSON Schema."},
            "strict": {"type": "boolean"}}}}}]})


class ToolCallFunction(BaseModel):
    """The function a tool call calls, and its arguments as the model wrote them (a JSON text)."""

    name: str = Field(min_length=1)
    arguments: str


class ToolCall(BaseModel):
    """One tool call of an assistant message, as OpenAI's API returns it."""

    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(BaseModel):
    """One message of the conversation, as OpenAI's API takes it: an assistant's may carry `tool_calls` (its content
    may then be null), and a `tool` message is the result of one call (`tool_call_id`)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    # `_has_content` refuses a missing, null or blank content, except beside tool calls and in a tool's result.
    content: Annotated[str | list[dict[str, Any]] | None, WithJsonSchema({
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}, {"type": "null"}],
        "description": "Non-blank text or parts; null or empty only beside `tool_calls`, and a tool's result may be "
                       "empty."})] = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = Field(None, description="The tools an assistant message called.")
    tool_call_id: str | None = Field(None, description="The call a `tool` message gives the result of.")

    @model_validator(mode="after")
    def _has_content(self) -> ChatMessage:
        if self.tool_calls and self.role != "assistant":
            raise invalid_field("invalid_tool_messages", f"a {self.role} message cannot have tool_calls (only an "
                                                         "assistant's)")
        if self.role == "tool":
            if not self.tool_call_id:
                raise invalid_field("invalid_tool_messages", "a tool message needs the tool_call_id of the call it "
                                                             "answers")
            if self.content is None:
                raise invalid_field("invalid_tool_messages", "a tool message needs content (the tool's result)")
            return self
        if self.tool_call_id is not None:
            raise invalid_field("invalid_tool_messages", f"only a tool message has a tool_call_id, not a {self.role}")
        if self.tool_calls:
            return self  # an assistant's call needs no text
        if self.content is None or (isinstance(self.content, str) and not self.content.strip()):
            raise ValueError(f"a {self.role} message needs non-empty content")
        return self

    def openai(self) -> dict[str, Any]:
        """The message as a model reads it: other keys a client sends are accepted (as OpenAI's API does) and
        dropped."""
        message = self.model_dump(include={"role", "content", "name", "tool_call_id"}, exclude_none=True)
        if self.tool_calls:
            message["content"] = self.content  # null beside tool calls, as OpenAI's API has it
            message["tool_calls"] = [call.model_dump() for call in self.tool_calls]
        return message


class Quorum(BaseModel):
    """Quorum grace: once `k` panelists have answered, the others have `grace` seconds more, then the panel decides
    (a seat still answering is recorded `late`)."""

    model_config = ConfigDict(extra="forbid")

    k: int = Field(ge=DEFAULT_MIN_SUCCESSES, le=MAX_PANEL_SIZE, description="The answers that start the grace.")
    grace: float = Field(ge=0, le=MAX_QUORUM_GRACE_SECONDS, description="Seconds the other panelists have after.")


class PanelOptions(BaseModel):
    """Parley's own fields of a request that chat completions and responses both take: a debate or a raw panel, its
    rule, and a council chosen per request (docs/panel.md). Set in the body (the OpenAI SDK's `extra_body`)."""

    debate: bool | None = Field(None, description="Debate this request (true) or not (false), whatever the router says")
    parley_budget: dict[str, Any] | None = Field(
        None, description="What the request may spend, `{maxTokens?, maxCost?, maxSeconds?}` (the OpenAI SDK's "
        "`extra_body`): refused with 402 `budget_too_small` below what its calls reserve, and every model call is "
        "checked against it (docs/steering.md). The workspace's default budget applies when absent.")
    panel: bool | None = Field(None, description="Return every panelist's answer, labelled, without arbitration.")
    rule: RuleName | None = Field(None, description=RULE_HELP + " Replaces the router's rule for this request; "
                                  "a rule asks for a debate, so it needs a router and turns debate on.")
    answer_rule: str | None = Field(None, description="How `rule: vote` reads an answer: `number`, `choice`, "
                                    "`exact` (the default) or `regex:<pattern>`; the router's when omitted.")
    # A council chosen per request (docs/panel.md): any key that may chat sends them, no router needed beyond the
    # `model` it names (`router/debate`, say), whose other settings apply.
    models: list[ModelId] | None = Field(
        None, min_length=MIN_PANEL_SIZE, max_length=MAX_PANEL_SIZE,
        description=f"The panel for this request: {MIN_PANEL_SIZE}-{MAX_PANEL_SIZE} `provider:model` ids of distinct "
                    "families (unless `allow_same_family`), each seated; replaces the router's models. Each must be "
                    "callable here (400 `model_unavailable` naming its provider).")
    arbitrator: str | None = Field(None, min_length=1, max_length=MAX_MODEL_ID_CHARS, description="The arbitrator "
                                   "(and judge) of this request, asked before the router's and the deployment's.")
    judge: str | None = Field(None, min_length=1, max_length=MAX_MODEL_ID_CHARS,
                              description="Another name for `arbitrator`.")
    criteria: str | None = Field(None, min_length=1, max_length=MAX_CRITERIA_CHARS,
                                 description="What the arbitrator and judges weigh the answers by (never shown to the "
                                             "panelists).")
    allow_same_family: bool | None = Field(None, description="Let `models` seat two models of one family.")
    depth: Literal["full", "adaptive"] | None = Field(
        None, description="`full` asks every seat at once; `adaptive` asks two seats of distinct families first and "
                          "the rest of the panel and the rule only when they disagree (`_meta.adaptive` says which). "
                          "The router's when omitted.")
    quorum: Quorum | None = Field(None, description="Quorum grace, `{k, grace}`: once k panelists have answered, the "
                                  "others have `grace` seconds more, then the panel decides; a late seat is listed "
                                  "with `error: late`, never dropped. None: every panelist is awaited.")
    shadow: bool | None = Field(None, description="With `depth: adaptive`, ask the whole panel anyway and report in "
                                                  "`_meta.adaptive.shadow` whether stopping early would have answered "
                                                  "the same.")
    reasoning_effort: Effort | Efforts | None = Field(
        None, description="The reasoning effort (OpenAI's `reasoning_effort`): one for the model, or for every seat "
                          "of a router's panel, or one per model id; replaces the router's. Sent as each model's "
                          "provider takes it; a model that takes none is refused (400 `reasoning_unsupported`).")
    parley_cache: bool | Literal["workspace"] | None = Field(
        None, description="Answer each model call at temperature 0 (or with a seed) from the response cache when an "
                          "identical call (model, messages, parameters) was made by the same user within "
                          "`RESPONSE_CACHE_TTL_SECONDS` (`\"workspace\"`: by anyone in this workspace, who then "
                          "share their answers), and keep its answer there otherwise: a cached call is free "
                          "(cost 0, tokens still shown; `responseCache` in its usage). An answer that failed its "
                          "`response_format`, or an empty one, is never kept.")

    @field_validator("models")
    @classmethod
    def _distinct_models(cls, models: list[str] | None) -> list[str] | None:
        if models is None:
            return None
        cleaned = [m.strip() for m in models]
        if any(not m for m in cleaned):
            raise ValueError("every model is a `provider:model` id, not blank")
        if twice := sorted({m for m in cleaned if cleaned.count(m) > 1}):
            raise ValueError(f"each model is seated once, and {', '.join(twice)} is listed twice: to sample one model "
                             "several times use model 'self-moa/<provider:model>'")
        return cleaned

    @model_validator(mode="after")
    def _one_arbitrator(self) -> PanelOptions:
        if self.judge and self.arbitrator and self.judge != self.arbitrator:
            raise invalid_field("invalid_arbitrator", f"'judge' ({self.judge}) and 'arbitrator' ({self.arbitrator}) "
                                                      "name the same seat: send one of them")
        return self

    @property
    def council(self) -> dict[str, Any]:
        """The request's own choices of panel and judge, as `plan_for_router` takes them (unset ones left out)."""
        chosen = {"models": self.models, "arbitrator": self.arbitrator or self.judge,
                  "allow_same_family": self.allow_same_family, "criteria": self.criteria, "depth": self.depth,
                  "shadow": self.shadow, "quorum": self.quorum.model_dump() if self.quorum else None}
        return {key: value for key, value in chosen.items() if value is not None}


class ChatCompletionRequest(PanelOptions):
    """`POST /v1/chat/completions`: OpenAI's body plus Parley's `debate` and `panel` flags."""

    # Fields other OpenAI clients send (top_p, user, seed, ...) are accepted and not acted on.
    model_config = ConfigDict(extra="allow", json_schema_extra=_declare_no_legacy_functions)

    model: str = Field(min_length=1, max_length=MAX_MODEL_ID_CHARS, description="`router/<id>`, `router/debate`, "
                       "`self-moa/<provider:model>` (that model sampled three times, then a decision), or a "
                       "`provider:model` id.")
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_CHAT_MESSAGES)
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int | None = Field(None, ge=1, le=1, description="Parley answers with one choice.")
    tools: Annotated[list[dict[str, Any]] | None, WithJsonSchema(TOOLS_SCHEMA)] = Field(
        None, description="Function tools the answer may call (the model in single and router mode, the arbitrator "
                          "in a debate; panelists read them described and answer in prose).")
    tool_choice: Annotated[str | dict[str, Any] | None, WithJsonSchema(TOOL_CHOICE_SCHEMA)] = Field(
        None, description="`auto` (default), `none`, `required`, or one function to call.")
    parallel_tool_calls: bool | None = Field(None, description="Whether the answer may call several tools at once.")
    response_format: Annotated[dict[str, Any] | None, WithJsonSchema(RESPONSE_FORMAT_SCHEMA)] = Field(
        None, description="`json_object`, or `json_schema` (with `strict`): the answer is that JSON, after one repair "
                          "at most, or the request fails (502 `invalid_structured_answer`). Not with `panel: true`.")
    seed: int | None = Field(None, description="Seeds the order each reviewer reads the answers in (`rule: rank`); "
                             "drawn from the conversation when omitted.")

    # The checked tools and format (`check_schemas`): their JSON Schemas are CPU work on a large body, so they are
    # checked off the event loop (`start_completion`), not while the body is parsed.
    _toolset: ToolSet | None = PrivateAttr(None)
    _answer_format: AnswerFormat | None = PrivateAttr(None)
    _checked: bool = PrivateAttr(False)

    @model_validator(mode="after")
    def _no_legacy_functions(self) -> ChatCompletionRequest:
        extra = self.model_extra or {}
        for legacy in LEGACY:
            if extra.get(legacy):
                raise invalid_field("legacy_functions", f"'{legacy}' is OpenAI's deprecated form of tools, which "
                                                        "Parley does not take: send 'tools' (and 'tool_choice' for "
                                                        "'function_call')")
        try:
            check_tool_messages(self.openai_messages())
        except ValueError as exc:
            raise invalid_field("invalid_tool_messages", str(exc)) from None
        return self

    def check_schemas(self) -> ChatCompletionRequest:
        """Check the tools and the response format, their JSON Schemas within `core.limits`' bounds (once; call it
        off the event loop, as `start_completion` does).

        Raises:
            InvalidRequest: `invalid_tools` or `invalid_response_format`, the message naming the fault.
        """
        if not self._checked:
            try:
                self._toolset = ToolSet.from_request(self.tools, self.tool_choice, self.parallel_tool_calls)
            except ValueError as exc:
                raise InvalidRequest(str(exc), code="invalid_tools") from None
            try:
                self._answer_format = AnswerFormat.from_request(self.response_format)
            except ValueError as exc:
                raise InvalidRequest(str(exc), code="invalid_response_format") from None
            self._checked = True
        return self

    @property
    def output_cap(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def toolset(self) -> ToolSet | None:
        """The tools offered (`check_schemas`)."""
        return self.check_schemas()._toolset

    @property
    def answer_format(self) -> AnswerFormat | None:
        """The JSON the answer must be (`check_schemas`)."""
        return self.check_schemas()._answer_format

    def openai_messages(self) -> list[dict[str, Any]]:
        return [m.openai() for m in self.messages]


# --- planning -------------------------------------------------------------------------------


@dataclass
class Plan:
    """What one request will do, decided before any model is called."""

    mode: Literal["debate", "panel", "single"]
    router_mode: RouterMode
    models: list[str]
    panelists: list[str] = field(default_factory=list)
    arbitrators: list[str] = field(default_factory=list)
    panel_size: int = DEFAULT_PANEL_SIZE
    allow_same_family: bool = False
    system_prompt: str | None = None
    arbitrator_prompt: str | None = None
    rule: str = DEFAULT_RULE
    answer_rule: str | None = None
    panelist_tools: list[str] = field(default_factory=list)  # grants of a stored router's panelists (`router:<id>`)
    criteria: str | None = None
    depth: Literal["full", "adaptive"] = "full"
    shadow: bool = False
    housekeeping: dict[str, Any] | None = None  # a chat app's own task, answered by one model (`housekeeping_plan`)
    quorum: dict[str, Any] | None = None  # {k, grace}: quorum grace (`graphs.panel.PanelInput.quorum`)
    reasoning: dict[str, str] = field(default_factory=dict)  # model id (or "*": every seat) -> reasoning effort


async def plan_request(backend: Backend, body: ChatCompletionRequest, *, workspace: str,
                       **overrides: Any) -> Plan:
    """Resolve the target (router, preset, a model's Self-MoA preset or plain model) and the mode; `overrides`
    (`parley ask`'s flags: `models`, `arbitrator`, `panel_size`, `allow_same_family`, `system_prompt`) replace the
    router's settings, as `plan_for_router` takes them.

    Raises:
        InvalidRequest: `debate`/`panel` without a router, a router that cannot fill its panel, or a raw panel asked
            for JSON or a tool call (`graphs.panel.unanswerable`).
        NotFound: no such router.
    """
    settings = backend.settings
    if body.model.startswith(SELF_MOA_PREFIX):
        router = self_moa_router(settings, body.model.removeprefix(SELF_MOA_PREFIX))
    elif body.model.startswith("router/"):
        router = await load_router(backend.db, settings, workspace=workspace,
                                   router_id=body.model.removeprefix("router/"))
    else:
        if body.debate or body.panel or body.rule or body.council:
            asked = [name for name in ("debate", "panel", "rule", *body.council) if getattr(body, name, None)]
            raise InvalidRequest(f"{', '.join(repr(a) for a in asked)} need a router: use model 'router/debate' or "
                                 f"'router/<id>', not '{body.model}'", code="router_required")
        plan = Plan(mode="single", router_mode="direct", models=[body.model])
        plan.reasoning = request_reasoning(backend.factory, plan, body.reasoning_effort)
        return plan
    if body.debate is not True and not (body.panel or body.rule or body.council) and (chore := await off_loop(
            len(body.messages), housekeeping_of, body)):
        return housekeeping_plan(backend.factory, router, chore)
    council = body.council
    if body.models:
        check_callable(backend.factory, body.models, field="models")
        council["panel_size"] = len(body.models)  # the request's models: every one seated
    if council.get("arbitrator"):
        check_callable(backend.factory, [council["arbitrator"]], field="arbitrator" if body.arbitrator else "judge")
    try:
        plan = plan_for_router(router, settings, debate=body.debate, panel=bool(body.panel), rule=body.rule,
                               answer_rule=body.answer_rule, **{**council, **overrides})
    except InvalidRequest as exc:
        if exc.code == "too_few_families" and body.models:  # the request's own panel, not the router's
            raise InvalidRequest(f"models: {exc.__cause__} (or send allow_same_family: true)",
                                 code="too_few_families", param="models") from exc
        raise
    plan.reasoning = request_reasoning(backend.factory, plan, body.reasoning_effort, router.get("reasoning_effort"))
    tools, answer_format = body.toolset, body.answer_format
    if reason := unanswerable(plan.mode, tools and tools.dump(), answer_format and answer_format.dump(), plan.rule):
        raise InvalidRequest(reason, code="unsupported_in_panel_mode")
    if plan.mode != "single" and not router.get("preset"):  # only a stored router holds a grant
        subject = router_subject(router["id"])
        plan.panelist_tools = (await tool_service.grants_of(backend.db, workspace=workspace, subjects=[subject])).get(
            subject, [])
    return plan


def request_reasoning(factory: ModelFactory, plan: Plan, asked: str | dict[str, str] | None,
                      router: dict[str, str] | None = None) -> dict[str, str]:
    """The reasoning effort of each seat of `plan` (`RunContext.reasoning`): the request's (one for every seat, or
    one per model), else the router's.

    Raises:
        InvalidRequest: `reasoning_unsupported`, a seat's model takes no effort (an effort for every seat is checked
            against each panelist, or the one model).
    """
    if asked is None:
        efforts = dict(router or {})
    elif isinstance(asked, str):
        efforts = {model: asked for model in (plan.panelists or plan.models[:1])}
        efforts = {"*": asked, **efforts}
    else:
        efforts = dict(asked)
    check_reasoning(factory, {k: v for k, v in efforts.items() if k != "*"},
                    field="reasoning_effort" if asked is not None else "reasoningEffort")
    return efforts


def housekeeping_of(body: ChatCompletionRequest) -> Housekeeping | None:
    """The chat app's own task the request is, if it is one (`services.chat_apps.housekeeping`)."""
    return housekeeping(body.openai_messages(), (body.model_extra or {}).get("metadata"))


def housekeeping_plan(factory: ModelFactory, router: dict[str, Any], chore: Housekeeping) -> Plan:
    """A chat app's own small task (a title, tags, follow-ups: `services.chat_apps`) sent to a router: one call to its
    cheapest model (by the price table; unpriced ones last), falling down the rest by price, never a debate."""
    models = list(dict.fromkeys(router["models"]))
    def price(model: str) -> tuple[bool, float]:
        rates = factory.price(model)
        return not rates.known, rates.input + rates.output

    by_price = sorted(models, key=price)
    return Plan(mode="single", router_mode="housekeeping", models=by_price,
                housekeeping=chore.meta())


def check_callable(factory: ModelFactory, models: list[str], *, field: str) -> None:
    """Refuse a model a request names that cannot be called here (`ModelFactory.unusable`: an unknown provider, or
    one with no endpoint or key), 400 `model_unavailable` naming it and its provider."""
    for model in models:
        if problem := factory.unusable(model.strip()):
            raise InvalidRequest(f"{field}: {problem}", code="model_unavailable", param=field)


def plan_for_router(
    router: dict[str, Any],
    settings: Settings,
    *,
    debate: bool | None = None,
    panel: bool = False,
    models: list[str] | None = None,
    arbitrator: str | None = None,
    panel_size: int | None = None,
    allow_same_family: bool | None = None,
    system_prompt: str | None = None,
    rule: str | None = None,
    answer_rule: str | None = None,
    criteria: str | None = None,
    depth: str | None = None,
    shadow: bool | None = None,
    quorum: dict[str, Any] | None = None,
) -> Plan:
    """What a request to `router` does (`POST /v1/chat/completions` and `parley ask`): `debate` on or off (default:
    the router's), `panel` for the raw answers; the other arguments (`parley ask`'s flags) override the router's.

    The arbitrators are `arbitrator`, then the router's, then the deployment's. Left unset, `allow_same_family` is
    the router's, except that the preset resamples only its own (embedded) list, never models given here. A
    debate decides by `rule` (else the router's); a rule given here turns debate on when `debate` is unset. `criteria`
    go to its arbitrator and judges; `depth` (else the router's, else full) and `shadow` say how much of the panel
    is asked (`graphs.panel.PanelInput`).

    Raises:
        InvalidRequest: a debate or panel whose models cannot fill the panel with distinct families; a rule
            that cannot be used, or one given for a request that is not a debate (code `invalid_rule` or
            `invalid_answer_rule`).
    """
    if rule is not None and debate is None and not panel:
        debate = True  # a rule is how a debate decides: asking for one asks for a debate
    debate_on = router.get("debate", False) if debate is None else debate
    mode = "panel" if panel else "debate" if debate_on else "single"
    if (rule is not None or answer_rule is not None) and mode != "debate":
        what = "a raw panel (panel: true)" if panel else "not a debate (debate: false)"
        raise rule_error(RuleError("rule" if rule is not None else "answer_rule",
                                   f"a rule decides a debate, and this request is {what}"),
                         field="rule" if rule is not None else "answer_rule")
    chosen_rule = rule or router.get("rule") or DEFAULT_RULE
    if answer_rule is None and chosen_rule == "vote":
        answer_rule = router.get("answer_rule")
    if allow_same_family is None:
        allow_same_family = router.get("allow_same_family", False) and not (models and router.get("preset"))
    plan = Plan(
        mode=mode,
        router_mode="fallback" if mode == "single" else mode,
        models=list(models or router["models"]),
        arbitrators=list(dict.fromkeys(m for m in (arbitrator, router.get("arbitrator"), settings.arbitrator_model)
                                       if m)),
        panel_size=panel_size or router.get("panel_size", DEFAULT_PANEL_SIZE),
        allow_same_family=allow_same_family,
        system_prompt=system_prompt or router.get("system_prompt"),
        arbitrator_prompt=router.get("arbitrator_prompt"),
        rule=chosen_rule,
        answer_rule=answer_rule,
        criteria=criteria,
        depth=depth or router.get("depth") or "full",
        shadow=bool(shadow),
        quorum=quorum,
    )
    if plan.shadow and plan.depth != "adaptive":
        raise InvalidRequest("'shadow' runs adaptive depth's cheap path beside the full panel: it needs depth "
                             f"'adaptive', from the request or from router '{router['id']}'", code="invalid_depth",
                             param="shadow")
    if mode == "debate":
        try:
            check_rule(plan.rule, plan.answer_rule, plan.panel_size)
        except RuleError as exc:
            raise rule_error(exc, field=exc.param) from None
    if mode != "single":
        try:
            plan.panelists = pick_panelists(plan.models, plan.panel_size, allow_same_family=plan.allow_same_family)
        except TooFewFamiliesError as exc:
            raise InvalidRequest(f"Router '{router['id']}' cannot run a {mode}: {exc}",
                                 code="too_few_families") from exc
    if quorum and quorum["k"] > len(plan.panelists):
        raise InvalidRequest(f"quorum.k ({quorum['k']}) cannot exceed the panel's {len(plan.panelists)} seats"
                             if plan.panelists else "a quorum is a panel's: this request asks one model",
                             code="invalid_quorum", param="quorum")
    return plan


def spendable_calls(factory: ModelFactory, plan: Plan, body: ChatCompletionRequest) -> list[CallEstimate]:
    """Every call the request may make, estimated as the budget check of each call makes it: the panelists' (or the
    one model's) with the question and the tools offered; under `rank` each reviewer's, on each of its attempts,
    reading the question and the others' answers; under `best-of-n` the two judgings and the arbitrator's, reading
    the question and every answer; and with a `response_format` the answering model's one repair, which reads its
    answer too. Each is priced at its own model, output at the request's cap (`ESTIMATE_OUTPUT_TOKENS` without one)."""
    prompt = approx_tokens(to_messages(body.openai_messages(), plan.system_prompt))
    if body.tools:
        prompt += approx_text_tokens(json.dumps(body.tools))
    cap = body.output_cap or ESTIMATE_OUTPUT_TOKENS
    tries = 2 if body.answer_format is not None else 1  # the answer and its one repair
    if plan.mode == "single":
        answer = factory.estimate(plan.models[0], prompt, cap)
        return [answer, *([factory.estimate(plan.models[0], prompt + answer.output_tokens, cap)] * (tries - 1))]
    calls = [factory.estimate(model, prompt, cap) for model in plan.panelists]
    if plan.mode != "debate" or plan.rule == "analysis":
        return calls
    answers = sum(call.output_tokens for call in calls)
    if plan.rule == "rank":
        schema = ranking_schema(ANSWER_LETTERS[: len(calls) - 1])
        calls += [factory.estimate(model, prompt + answers - own.output_tokens, None, schema)
                  for model, own in zip(plan.panelists, list(calls)) for _ in range(REVIEW_ATTEMPTS)]
    arbitrator = plan.arbitrators[0] if plan.arbitrators else plan.panelists[0]
    if plan.rule == "best-of-n":
        calls += [factory.estimate(arbitrator, prompt + answers, cap)] * 2
    calls += [factory.estimate(arbitrator, prompt + answers + cap * (n > 0), cap) for n in range(tries)]
    return calls


def estimate_cost(factory: ModelFactory, plan: Plan, body: ChatCompletionRequest,
                  limits: BudgetLimits | None = None) -> tuple[float, int]:
    """Return (reservation in USD, the calls it covers): what `spendable_calls` may cost, at most the budget's
    `maxCost` (`billing.credit_reservation`)."""
    calls = spendable_calls(factory, plan, body)
    return billing.credit_reservation(calls, limits), len(calls)


def minimum_calls(factory: ModelFactory, plan: Plan, body: ChatCompletionRequest) -> list[CallEstimate]:
    """The request's calls when nothing fails, estimated as the budget check of each call makes it: the panelists'
    (or the one model's) and the arbitrator's, which also reads the answers."""
    prompt = approx_tokens(to_messages(body.openai_messages(), plan.system_prompt))
    if plan.mode == "single":
        return [factory.estimate(plan.models[0], prompt, body.output_cap)]
    calls = [factory.estimate(model, prompt, body.output_cap) for model in plan.panelists]
    if plan.mode == "debate" and plan.arbitrators:
        answers = sum(call.output_tokens for call in calls)
        calls.append(factory.estimate(plan.arbitrators[0], prompt + answers, body.output_cap))
    return calls


async def budget_of(backend: Backend, plan: Plan, body: ChatCompletionRequest, *, workspace: str) -> BudgetLimits:
    """The request's budget (`parley_budget`, else the workspace's default), refused when its calls do not fit.

    Raises:
        InvalidRequest: a budget field is not a positive number.
        PaymentRequired: the budget is below what the request's calls reserve (`budget_too_small`).
    """
    limits = await steering.budget_for(backend.db, workspace,
                                       steering.parse_budget(body.parley_budget, where="parley_budget."))
    if limits:
        calls = await off_loop(len(body.messages), minimum_calls, backend.factory, plan, body)
        steering.require_minimum(limits, steering.spend_of(calls), what="this request's calls")
    return limits


async def reserve(backend: Backend, plan: Plan, body: ChatCompletionRequest, *, workspace: str,
                  limits: BudgetLimits | None = None) -> float:
    """Reserve what the request's calls may cost (`estimate_cost`, at most its budget's `maxCost`) from the workspace's
    credit; `PaymentRequired` when the balance cannot cover it."""
    # Converting and counting a long conversation takes a while: not on the loop that serves every other request.
    amount, calls = await off_loop(len(body.messages), estimate_cost, backend.factory, plan, body, limits)
    what = {"debate": "a debate", "panel": "a panel", "single": "this request"}[plan.mode]
    return await billing.reserve_credit(backend.db, workspace, amount, what=what, calls=calls)


# --- running ----------------------------------------------------------------------------------


def graph_input(plan: Plan, messages: list[dict[str, Any]], *, temperature: float | None = None,
                max_tokens: int | None = None, seed: int | None = None, tools: ToolSet | None = None,
                answer_format: AnswerFormat | None = None) -> dict[str, Any]:
    """The panel graph's input for `messages` planned as `plan`, with the tools the answer may call and the JSON it
    must be."""
    return dict(panel_input(
        messages, models=plan.models, arbitrators=plan.arbitrators, panel_size=plan.panel_size, mode=plan.mode,
        allow_same_family=plan.allow_same_family, system_prompt=plan.system_prompt,
        arbitrator_prompt=plan.arbitrator_prompt, temperature=temperature, max_tokens=max_tokens,
        rule=plan.rule, answer_rule=plan.answer_rule, seed=seed, tools=tools, answer_format=answer_format,
        panelist_tools=plan.panelist_tools, criteria=plan.criteria, depth=plan.depth, shadow=plan.shadow,
        quorum=plan.quorum,
    ))


@dataclass(frozen=True)
class History:
    """Messages of a request that a stored response holds (`store.responses.conversation`): the `count` messages from
    index `at` (after the system message) are the conversation of `response_id` and its answer."""

    response_id: str
    at: int
    count: int


def new_completion_id(mode: str) -> str:
    """The id of the completion body: the panel contract's `panel-<ms>` for a raw panel, `chatcmpl-…` otherwise."""
    if mode == "panel":
        return f"panel-{int(time.time() * 1000)}"
    return "chatcmpl-" + uuid.uuid4().hex[:24]


async def start_completion(backend: Backend, caller: Caller, body: ChatCompletionRequest, *,
                           completion_id: str | None = None, history: History | None = None,
                           **overrides: Any) -> dict:
    """Plan one chat completion (`overrides`: as `plan_request`'s), reserve its credit and start its run; return the
    run record. `completion_id` names it (a response's id, `services.responses`), else it gets its own. With
    `history`, the messages it names are a stored response's conversation: the run's input refers to that response
    instead of holding them (`runs.modes.panel.PanelRun.prepare` reads them back).

    With `body.stream` the client reads the answer as it comes, so a candidate that fails midway cannot hand over
    to the next one (the client already has part of an answer); without it, the next candidate answers.

    Raises:
        InvalidRequest, NotFound: as `plan_request`; a budget field that is not a positive number.
        PaymentRequired: the workspace's credit cannot cover the estimate, or the budget its calls.
    """
    await asyncio.to_thread(body.check_schemas)
    plan = await plan_request(backend, body, workspace=caller.workspace, **overrides)
    limits = await budget_of(backend, plan, body, workspace=caller.workspace)
    completion = {"id": completion_id or new_completion_id(plan.mode), "created": int(time.time())}
    bill = billing.Bill(usage="chat" if plan.mode == "single" else plan.mode, request_id=completion["id"],
                        credit=await reserve(backend, plan, body, workspace=caller.workspace, limits=limits))
    question = next((m.content for m in reversed(body.messages) if m.role == "user" and isinstance(m.content, str)),
                    body.model)
    messages = body.openai_messages()
    if history:  # the earlier conversation stays where it is stored
        messages = messages[:history.at] + messages[history.at + history.count:]
    async with billing.released_on_failure(backend.db, caller.workspace, bill):
        return await backend.runs.submit(
            "panel", caller=caller, title=question[:200], ref={"completionId": completion["id"]},
            input={"graph": graph_input(plan, messages, temperature=body.temperature,
                                        max_tokens=body.output_cap, seed=body.seed, tools=body.toolset,
                                        answer_format=body.answer_format),
                   "plan": dataclasses.asdict(plan), "bill": bill.dump(),
                   **({"steer": steer} if (steer := steering.SteerOptions(
                       budget=limits, response_cache=body.parley_cache or False).dump()) else {}),
                   **({"history": {"response": history.response_id, "at": history.at}} if history else {}),
                   "completion": completion, "streamed": body.stream,
                   **({"reasoning": plan.reasoning} if plan.reasoning else {})},
        )


async def completion_of(backend: Backend, record: dict) -> dict[str, Any]:
    """The `chat.completion` body of the run `record` once it has ended.

    Raises:
        RunFailed: the run failed (its error) or was cancelled.
    """
    finished = await backend.runs.wait(record["_id"])
    if finished["status"] != "completed":
        log.warning("chat completion %s failed: %s", record["_id"], (finished.get("error") or {}).get("message"))
        raise RunFailed(finished.get("error") or {"message": "The request was cancelled", "status": 499},
                        run_id=record["_id"])
    return finished["result"]
