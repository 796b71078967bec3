"""Steering a debate and capping what it spends, for every mode in one place: what a request may ask for (`await`,
`maxTokens`, `maxCost`, `maxSeconds`, the workspace's default budget), the least a budget must hold for one round,
and a person's input to a running run (`POST /v1/runs/{id}/input`).

The options a run was started with travel in its input (`input.steer`: `{"await", "budget"}`), where the run engine
reads them on whichever worker executes the run (`runs.inputs`); the graphs apply them at their boundaries
(`nodes.steer`) and before every model call (`llm.budget`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt
from pymongo.asynchronous.database import AsyncDatabase

from parley.core.limits import MIN_BUDGET_SECONDS, STEER_MESSAGE_MAX_CHARS
from parley.llm.budget import FIELDS, BudgetLimits, CallEstimate, InvalidBudget, Spend
from parley.nodes.inbox import ACTIONS
from parley.runs import RunEngine
from parley.services.errors import Conflict, InvalidRequest, PaymentRequired, ServiceError
from parley.store import runs as run_store
from parley.store.response_cache import SHARED as SHARED_CACHE
from parley.store import workspaces as ws_store

BUDGET_FIELDS = tuple(FIELDS)  # maxTokens, maxCost, maxSeconds


class BudgetFields(BaseModel):
    """A run's budget as the request bodies that start one take it (docs/steering.md): the run goes to its synthesis
    or verdict before a step would pass a limit (`stoppedBy: "budget"`); one too small for one round is 402. And
    whether its model calls use the response cache (`responseCache`)."""

    maxTokens: StrictInt | None = Field(None, gt=0, description="Budget: tokens the run may use.")
    maxCost: StrictFloat | None = Field(None, gt=0, description="Budget: USD the run may cost.")
    maxSeconds: StrictFloat | None = Field(None, ge=MIN_BUDGET_SECONDS, description="Budget: seconds the run may "
                                           "take, time waiting for a person not counted.")
    responseCache: StrictBool | Literal["workspace"] | None = Field(
        None, description="Answer the run's model calls at temperature 0 from the response cache when an identical "
        "call was made by the same user within a day (`\"workspace\"`: by anyone in this workspace, who then share "
        "their answers), and keep new answers there: a cached call is free (docs/performance.md).")


@dataclass(frozen=True)
class SteerOptions:
    """How a run may be steered: where it waits by itself (`await`), and its budget."""

    await_at: str | None = None
    budget: BudgetLimits = BudgetLimits()
    # the run's model calls use the response cache (`runs.modes.base.ModeRun.knobs`): its user's own (True), or the
    # one its workspace shares (`"workspace"`)
    response_cache: bool | Literal["workspace"] = False

    def dump(self) -> dict[str, Any]:
        """The options as the run's input keeps them (`input.steer`)."""
        return {**({"await": self.await_at} if self.await_at else {}),
                **({"budget": self.budget.dump()} if self.budget else {}),
                **({"responseCache": self.response_cache} if self.response_cache else {})}


def parse_options(body: Mapping[str, Any], *, boundary: str | None, where: str = "") -> SteerOptions:
    """The steering options of a request body: `await` (which must be `boundary`, the mode's: `after_turn` for a
    duel, `after_round` for a round table; None: the mode takes none) and the budget's limits.

    Raises:
        InvalidRequest: naming the field (`invalid_await`, `invalid_budget`).
    """
    await_at = body.get("await")
    if await_at is not None and (boundary is None or await_at != boundary):
        allowed = f'"{boundary}"' if boundary else "not taken here"
        raise InvalidRequest(f"{where}await: must be {allowed}", code="invalid_await")
    try:
        limits = BudgetLimits.parse({name: body[name] for name in BUDGET_FIELDS if body.get(name) is not None},
                                    where=where)
    except InvalidBudget as exc:
        raise InvalidRequest(str(exc), code="invalid_budget", field=exc.field) from exc
    return SteerOptions(await_at=await_at, budget=limits,
                        response_cache=parse_cache(body.get("responseCache"), where=f"{where}responseCache"))


def parse_cache(value: Any, *, where: str) -> bool | Literal["workspace"]:
    """Whether a request's model calls use the response cache (`responseCache`, `parley_cache`): `true` (the
    user's own answers), `"workspace"` (answers every user of the workspace shares), false or absent (none).

    Raises:
        InvalidRequest: any other value.
    """
    if value is None or isinstance(value, bool) or value == SHARED_CACHE:
        return SHARED_CACHE if value == SHARED_CACHE else bool(value)
    raise InvalidRequest(f'{where}: must be true, false or "{SHARED_CACHE}"', code="invalid_request")


def parse_budget(value: Any, *, where: str) -> BudgetLimits:
    """A budget given as one object (`parley_budget` in chat completions' extra body).

    Raises:
        InvalidRequest: naming the field.
    """
    try:
        return BudgetLimits.parse(value, where=where)
    except InvalidBudget as exc:
        raise InvalidRequest(str(exc), code="invalid_budget", field=exc.field) from exc


async def budget_for(db: AsyncDatabase, workspace: str, asked: BudgetLimits) -> BudgetLimits:
    """The limits a run gets: those asked for, each one not given taken from the workspace's default budget
    (`parley workspaces budget`)."""
    default = (await ws_store.get_workspace(db, workspace)).get("budget")
    return asked.over(BudgetLimits.parse(default)) if default else asked


def spend_of(calls: Sequence[CallEstimate]) -> Spend:
    """What the calls reserve, together."""
    return Spend(sum(c.spend.tokens for c in calls), sum(c.spend.cost for c in calls))


def require_minimum(limits: BudgetLimits, minimum: Spend, *, what: str) -> None:
    """Refuse a budget too small for `what` (one round and the synthesis) before anything starts.

    Raises:
        PaymentRequired: `maxTokens` or `maxCost` below `minimum` (`budget_too_small`, with `minimum`).
        InvalidRequest: `maxSeconds` below `MIN_BUDGET_SECONDS` (`budget_too_small`, with `minimum`).
    """
    floor = {"maxTokens": minimum.tokens, "maxCost": round(minimum.cost, 6)}
    short = [name for name in limits.short_of(Spend(minimum.tokens, minimum.cost)) if name != "maxSeconds"]
    if short:
        raise PaymentRequired(
            f"The budget is too small for {what}: {short[0]} is {limits.dump()[short[0]]}, and it needs at least "
            f"{floor[short[0]]}", code="budget_too_small", minimum=floor, short=short)
    if limits.max_seconds is not None and limits.max_seconds < MIN_BUDGET_SECONDS:
        raise InvalidRequest(f"The budget is too small for {what}: maxSeconds must be at least {MIN_BUDGET_SECONDS:g}",
                             code="budget_too_small", minimum={"maxSeconds": MIN_BUDGET_SECONDS}, short=["maxSeconds"])


class RunWaiting(ServiceError):  # noqa: N818 - not a failure: how a request learns that its run waits for a person
    """A run a request waited for stopped to wait for a person (`record`: its run record, status `waiting`): an HTTP
    route answers 202 with the run, which the person steers through `POST /v1/runs/{id}/input`; an MCP tool says so."""

    code = "run_waiting"

    def __init__(self, record: dict) -> None:
        super().__init__(f"Run '{record['_id']}' waits for a person: steer it with POST /v1/runs/{record['_id']}/input",
                         runId=record["_id"])
        self.record = record


# --- a person's input to a running run ------------------------------------------------------------------------


class RunInput(BaseModel):
    """What a person sends a running run: a message (`content`), an action, or `guide` with its message."""

    model_config = ConfigDict(extra="forbid")

    content: str | None = Field(None, min_length=1, max_length=STEER_MESSAGE_MAX_CHARS, json_schema_extra={
        "pattern": r"\S"}, description="A message every agent sees from the next turn on (and stored in the "
                                         "transcript as the user's); with `guide`, the guidance.")
    action: Literal["continue", "guide", "end", "pause"] | None = Field(
        None, description="`pause`: wait at the next boundary; `continue`: go on from a wait; `guide`: the message, "
        "then continue; `end`: go straight to the synthesis or verdict of what was said.")


def parse_input(body: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The content and action of an input: a message (`content`), an action, or `guide` with its content.

    Raises:
        InvalidRequest: an unknown action, a message without content, content with an action other than `guide`.
    """
    action, content = body.get("action"), body.get("content")
    if action is not None and action not in ACTIONS:
        raise InvalidRequest(f"action: must be one of {', '.join(ACTIONS)}", code="invalid_request")
    if content is not None and (not isinstance(content, str) or not content.strip()):
        raise InvalidRequest("content: must be a non-empty string", code="invalid_request")
    if content is not None and len(content) > STEER_MESSAGE_MAX_CHARS:
        raise InvalidRequest(f"content: at most {STEER_MESSAGE_MAX_CHARS} characters", code="invalid_request")
    if action in (None, "guide") and content is None:
        raise InvalidRequest("content: a message (or a `guide` action) needs its text", code="invalid_request")
    if action not in (None, "guide") and content is not None:
        raise InvalidRequest(f"content: the action {action!r} takes none (send `guide` to add a message)",
                             code="invalid_request")
    return (content.strip() if content else None), action


async def send_input(engine: RunEngine, record: dict, *, user: str, content: str | None,
                     action: str | None) -> tuple[dict, dict]:
    """Send a person's input to the run `record` (one the key may steer): stored, then delivered (`RunEngine.steer`).
    Return the input and the run's record as it now is.

    Raises:
        Conflict: the run has ended (`run_finished`), takes no input (`run_not_steerable`: a chat completion, a
            workflow without an `await` node), already waits and was asked to pause (`run_waiting`), or was sent
            `MAX_RUN_INPUTS` inputs already and this one counts against them (`too_many_inputs`: a message, or a
            control repeated within a lap; the first `continue`, `guide`, `end` or `pause` of each lap always gets
            through, `store.runs.counts_against_cap`).
    """
    if record["status"] in run_store.FINISHED:
        raise Conflict(f"Run '{record['_id']}' has already ended ({record['status']})", code="run_finished")
    mode = engine.modes.get(record["kind"])
    if mode is None or not mode.steers(record):
        raise Conflict(f"A {record['kind']} run takes no input: it has no boundary at which to take it"
                       + (" (add an `await` node to the workflow)" if record["kind"] == "workflow" else ""),
                       code="run_not_steerable")
    if action == "pause" and record["status"] == run_store.WAITING:
        raise Conflict(f"Run '{record['_id']}' already waits; send continue, guide or end", code="run_waiting")
    try:
        if run_store.inputs_full(record, action):
            raise run_store.TooManyInputs(f"The run has been sent {record['capped']} inputs, as many as a run takes "
                                          "(a control goes through once per wait, and once between two waits)")
        sent = await engine.steer(record["_id"], user=user, content=content, action=action)
    except run_store.TooManyInputs as exc:
        raise Conflict(str(exc), code="too_many_inputs") from None
    if sent is None:
        current = await engine.get(record["_id"])
        raise Conflict(f"Run '{record['_id']}' has already ended ({current.get('concluding') or current['status']})",
                       code="run_finished")
    return sent
