"""Duels (the duel contract, docs/api.md): check a debate request and count it against the rate limit, start a
debate, its result, the client's view of a debate, its list, and who may read its events.

Running a debate is the run engine's (`runs.modes.duel`); a debate's events are its run's. A duel is charged
no credit or allowance; its run records its usage (`services.billing`).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from parley import store as storage
from parley.core import clock
from parley.core.fields import model_id_problem
from parley.core.limits import (
    DUEL_TOPIC_MAX_CHARS,
    MAX_DUEL_ROUNDS,
    MIN_DUEL_ROUNDS,
    PROFILE_BIO_MAX_CHARS,
    PROFILE_LIST_MAX_ITEMS,
    PROFILE_NAME_MAX_CHARS,
    REASONING_EFFORTS,
)
from parley.graphs.duel import DuelContext, minimum_calls
from parley.llm.failures import ModelError
from parley.runs import Caller, RunEngine
from parley.runs.modes.duel import CANCELLED
from parley.services import access, steering
from parley.services import tools as tool_service
from parley.services.access import Principal
from parley.services.backend import Backend
from parley.services.errors import CannotStart, InvalidRequest, NotFound, RunFailed
from parley.services.steering import BudgetFields, RunWaiting, SteerOptions
from parley.services.tools import DUEL_SIDES, duel_subject
from parley.store import debates as store

log = logging.getLogger("parley.duel")

LEGACY_INTERRUPTED = "Debate interrupted: the server running it stopped"
START_FAILED = "Failed to start debate"  # the contract's message, whatever the cause (the log has it)
RATE_LIMIT = "8/minute"  # new debates per user and client address
RATE_LIMITED = "Rate limit exceeded"  # the contract's message


async def fail_legacy_debates(db: AsyncDatabase) -> None:
    """Fail the debates an earlier Parley (0.1, before debates were runs) left `in_progress`: nothing can
    resume them."""
    await store.fail_runless(db, error=LEGACY_INTERRUPTED)


class DebateNotFound(NotFound):
    """No such debate for this caller."""

    def __init__(self, debate_id: str) -> None:
        super().__init__("Debate not found")
        self.debate_id = debate_id


@dataclass
class DebateRequest:
    """A validated `POST /api/debate` body."""

    topic: str
    user_profile: dict
    rounds: int | None = None
    steer: SteerOptions = SteerOptions()  # `await: "after_turn"` and the budget (`services.steering`)
    model: str | None = None  # every speaker's and judge's model (`parley debate --model`); None: the default
    reasoning_effort: str | None = None  # every call's reasoning effort (`reasoningEffort`); None: the model's own


class SoftMemory(BaseModel):
    model_config = ConfigDict(extra="allow")

    traits: list[StrictStr] = Field(default_factory=list, max_length=PROFILE_LIST_MAX_ITEMS)
    interests: list[StrictStr] = Field(default_factory=list, max_length=PROFILE_LIST_MAX_ITEMS)


class UserProfile(BaseModel):
    """The seed's userProfile; unknown fields are kept and echoed back in `init`."""

    model_config = ConfigDict(extra="allow")

    # The pattern is documentation: `check_debate_request` refuses a blank name with its own message.
    name: StrictStr = Field(min_length=1, max_length=PROFILE_NAME_MAX_CHARS, json_schema_extra={"pattern": r"\S"})
    avatar: StrictStr | None = None
    bio: StrictStr | None = Field(None, max_length=PROFILE_BIO_MAX_CHARS)
    softMemory: SoftMemory | None = None


# Also the MCP `duel` tool's input schema, whose arguments `check_debate_request` checks as it checks the route's body.
class DebateBody(BudgetFields):
    """The body of `POST /api/debate`, as `parse_debate_request` accepts it (it documents the route, which reads and
    checks its raw body itself so that each refusal has the seed's message)."""

    model_config = ConfigDict(extra="allow")

    topic: StrictStr = Field(min_length=1, max_length=DUEL_TOPIC_MAX_CHARS, json_schema_extra={"pattern": r"\S"},
                             description="The question to debate; not blank.")
    userProfile: UserProfile = Field(description="Your persona: the agent that argues your side is built from it.")
    rounds: int | None = Field(None, ge=MIN_DUEL_ROUNDS, le=MAX_DUEL_ROUNDS,
                               description="Exchanges before the verdict; the default when omitted.")
    reasoningEffort: Literal[REASONING_EFFORTS] | None = Field(
        None, description="The reasoning effort of every call of the duel, for a model that takes one (400 "
        "`reasoning_unsupported` otherwise; docs/panel.md).")
    await_: Literal["after_turn"] | None = Field(
        None, alias="await", description="Wait for you after every turn (status `waiting`) until "
        "`POST /v1/runs/{id}/input` says `continue`, `guide` or `end` (docs/steering.md).")


def check_debate_request(body: Any) -> DebateRequest:
    """Validate a debate request (the parsed JSON body of `POST /api/debate`, the `duel` tool's arguments).

    Raises:
        InvalidRequest: the contract's message, naming the field at fault (`invalid_await`, `invalid_budget` for the
            steering options).
    """
    if not isinstance(body, dict):
        raise InvalidRequest("Request body must be a JSON object")
    topic, profile, rounds = body.get("topic"), body.get("userProfile"), body.get("rounds")
    if topic is None or profile is None or topic == "":
        raise InvalidRequest("Missing topic or userProfile")
    if not isinstance(topic, str):
        raise InvalidRequest("topic must be a string")
    if not topic.strip():
        raise InvalidRequest("Missing topic or userProfile")
    if len(topic) > DUEL_TOPIC_MAX_CHARS:
        raise InvalidRequest(f"topic must be at most {DUEL_TOPIC_MAX_CHARS} characters")
    if not isinstance(profile, dict):
        raise InvalidRequest("userProfile must be an object")
    try:
        UserProfile.model_validate(profile)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(["userProfile", *(str(part) for part in first["loc"])])
        raise InvalidRequest(f"{where}: {first['msg']}") from exc
    if not str(profile["name"]).strip():
        raise InvalidRequest("userProfile.name must not be blank")
    if not storage.storable(profile):  # it is kept with the debate and echoed back
        raise InvalidRequest("userProfile may not hold a NUL character in a key or an integer beyond 64 bits")
    if isinstance(rounds, float) and rounds.is_integer():
        rounds = int(rounds)  # JSON has one number type: 8.0 is the integer 8 (as JSON Schema says)
    if rounds is not None and (not isinstance(rounds, int) or isinstance(rounds, bool)
                               or not MIN_DUEL_ROUNDS <= rounds <= MAX_DUEL_ROUNDS):
        raise InvalidRequest(f"rounds must be an integer from {MIN_DUEL_ROUNDS} to {MAX_DUEL_ROUNDS}")
    effort = body.get("reasoningEffort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise InvalidRequest(f"reasoningEffort must be one of {', '.join(REASONING_EFFORTS)}",
                             code="invalid_reasoning_effort")
    return DebateRequest(topic=topic.strip(), user_profile=profile, rounds=rounds,
                         steer=steering.parse_options(body, boundary="after_turn"), reasoning_effort=effort)


async def admit_debate(backend: Backend, caller: Caller, client_address: str) -> None:
    """Count a new debate against `RATE_LIMIT` for the caller's user at `client_address`.

    Raises:
        RateLimited: over the rate; the body carries the contract's `retryAfter` too.
    """
    await backend.admit(RATE_LIMIT, "debate", caller.workspace, caller.user, client_address,
                        message=RATE_LIMITED, retry_field="retryAfter")


def new_debate_id() -> str:
    """`debate_<ms>_<random>`, the duel contract's format."""
    return f"debate_{int(time.time() * 1000)}_{secrets.token_hex(4)}"


async def start_duel(engine: RunEngine, caller: Caller, request: DebateRequest) -> dict:
    """Store a new debate and start its run; return the debate record.

    Raises:
        CannotStart: the debate could not be set up (no usable model, or the database refused it).
        PaymentRequired, InvalidRequest: its budget (or the workspace's default) is too small for one round and the
            verdict (`budget_too_small`).
    """
    if problem := model_id_problem(request.model):
        raise InvalidRequest(f"model: {problem}", code="invalid_model")
    context = DuelContext(models=engine.services.factory, model=request.model)
    rounds = request.rounds or context.rounds
    inputs = {"topic": request.topic, "user_profile": request.user_profile, "rounds": rounds}
    try:
        limits = await steering.budget_for(engine.db, caller.workspace, request.steer.budget)
        if limits:
            steering.require_minimum(limits, steering.spend_of(minimum_calls(inputs, context)),
                                     what="one round of this duel and its verdict")
        model = engine.services.factory.resolve(context.model).model_id
        if problem := engine.services.factory.reasoning_problem(model, request.reasoning_effort):
            raise InvalidRequest(f"reasoningEffort: {problem}", code="reasoning_unsupported")
        debate = await store.create_debate(
            engine.db, debate_id=new_debate_id(), user=caller.user, workspace=caller.workspace, topic=request.topic,
            user_profile=request.user_profile, rounds=rounds, model=model, stream_token=secrets.token_urlsafe(18),
        )
        granted = await tool_service.grants_of(engine.db, workspace=caller.workspace,
                                               subjects=[duel_subject(side) for side in DUEL_SIDES])
        tools = {side: granted[duel_subject(side)] for side in DUEL_SIDES if duel_subject(side) in granted}
        steer = SteerOptions(request.steer.await_at, limits, request.steer.response_cache).dump()
        extra = {**({"steer": steer} if steer else {}), **({"tools": tools} if tools else {}),
                 **({"model": request.model} if request.model else {}),
                 **({"reasoning": {"*": request.reasoning_effort}} if request.reasoning_effort else {})}
        await engine.submit("duel", caller=caller, run_id=debate["_id"], title=request.topic,
                            ref={"debateId": debate["_id"]}, input={**inputs, **extra})
    except ModelError as exc:
        log.error("could not start a debate: no usable model: %s", exc)
        raise CannotStart(START_FAILED) from exc
    except PyMongoError as exc:
        log.error("could not start a debate: %s", exc)
        raise CannotStart(START_FAILED) from exc
    return debate


async def debate_result(engine: RunEngine, principal: Principal, debate_id: str) -> dict:
    """The client's view of the debate once its run has ended.

    Raises:
        RunFailed: the debate failed (its error) or was cancelled.
        RunWaiting: the debate waits for a person (a pause, `await`).
    """
    finished = await engine.wait(debate_id, or_waiting=True)
    if finished["status"] == "waiting":
        raise RunWaiting(finished)
    if finished["status"] != "completed":
        raise RunFailed(finished.get("error") or {"message": CANCELLED, "status": 499, "code": "cancelled"},
                        run_id=debate_id)
    return public_debate(await get_debate(engine.db, principal, debate_id))


def public_debate(record: dict, *, summary: bool = False) -> dict:
    """The client's view of a stored debate."""
    view = {
        "id": record["_id"],
        "topic": record["topic"],
        "status": record["status"],
        "createdAt": clock.iso(record["createdAt"]),
        "updatedAt": clock.iso(record["updatedAt"]),
        "rounds": record.get("rounds"),
        "userProfile": record.get("userProfile"),
        "opponentProfile": record.get("opponentProfile"),
    }
    synthesis = record.get("synthesis")
    if summary:
        view["messageCount"] = len(record.get("messages") or [])
        view["winner"] = synthesis.get("winner") if synthesis else None
        return view
    view.update(
        messages=record.get("messages") or [],
        synthesis=synthesis,
        verdicts=record.get("verdicts") or [],
        error=record.get("error"),
        eventsUrl=events_url(record),
    )
    return view


def events_url(record: dict) -> str:
    """Where a browser's EventSource follows the debate (authenticated by the debate's stream token)."""
    return f"/api/debate/{record['_id']}/events?token={record.get('streamToken', '')}"


async def get_debate(db: AsyncDatabase, principal: Principal, debate_id: str) -> dict:
    """The debate, as stored, if the key may see it (its owner's or an admin's, see `access`)."""
    record = await store.get_debate(db, debate_id=debate_id, visible=access.owned(principal, "duel"))
    if record is None:
        raise DebateNotFound(debate_id)
    return record


async def list_debates(db: AsyncDatabase, caller: Caller, *, limit: int, cursor: str | None,
                       page: int | None) -> dict[str, Any]:
    """One page of the caller's own debates, newest first (an admin key too lists only its user's).

    Raises:
        ValueError: `cursor` is not one this list gave.
    """
    rows, next_cursor, total = await store.list_debates(
        db, user=caller.user, workspace=caller.workspace, limit=limit, cursor=cursor, page=page,
    )
    body: dict[str, Any] = {"debates": [public_debate(r, summary=True) for r in rows],
                            "nextCursor": next_cursor, "total": total, "limit": limit}
    if page and not cursor:
        body["page"] = page
    return body


def stream_token_expired(record: dict, *, grace: float) -> bool:
    """A debate's stream token works while the debate runs and for `grace` seconds after it ended (an ended
    debate is not written again, so its `updatedAt` is when it ended)."""
    if record["status"] == store.IN_PROGRESS:
        return False
    ended = record["updatedAt"] if record["updatedAt"].tzinfo else record["updatedAt"].replace(tzinfo=UTC)
    return clock.now() - ended > timedelta(seconds=grace)


async def authorise_events(db: AsyncDatabase, debate_id: str, *, principal: Principal | None, token: str | None,
                           token_grace: float) -> dict:
    """The debate whose events may be read by `principal` (as `get_debate`) or with its stream `token`, while that
    token has not expired (`token_grace` seconds after the debate ended)."""
    if principal is not None:
        return await get_debate(db, principal, debate_id)
    record = await store.get_debate(db, debate_id=debate_id)
    if record is None or not secrets.compare_digest(record.get("streamToken") or "", token or ""):
        raise DebateNotFound(debate_id)
    if stream_token_expired(record, grace=token_grace):
        raise DebateNotFound(debate_id)  # answered as a wrong token is: nothing says the debate exists
    return record
