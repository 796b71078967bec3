"""Duels (seeds/duel-sse-api.md): start a debate, the client's view of a debate, its list, and who may read its
events.

Running a debate is the run engine's (`runs.modes.duel`); a debate's events are its run's. A duel is charged
no credit or allowance; its run records its usage (`services.billing`).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from graphs.duel import DuelContext, minimum_calls
from llm.failures import ModelError
from runs import Caller, RunEngine
from services import access, steering
from services.access import Principal
from services.errors import CannotStart, NotFound
from services.steering import SteerOptions
from store import debates as store

log = logging.getLogger("parley.duel")

LEGACY_INTERRUPTED = "Debate interrupted: the server running it stopped"
START_FAILED = "Failed to start debate"  # the seed's message, whatever the cause (the log has it)


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


def new_debate_id() -> str:
    """`debate_<ms>_<random>`, the seed's format."""
    return f"debate_{int(time.time() * 1000)}_{secrets.token_hex(4)}"


async def start_duel(engine: RunEngine, caller: Caller, request: DebateRequest) -> dict:
    """Store a new debate and start its run; return the debate record.

    Raises:
        CannotStart: the debate could not be set up (no usable model, or the database refused it).
        PaymentRequired, InvalidRequest: its budget (or the workspace's default) is too small for one round and the
            verdict (`budget_too_small`).
    """
    context = DuelContext(models=engine.services.factory)
    rounds = request.rounds or context.rounds
    inputs = {"topic": request.topic, "user_profile": request.user_profile, "rounds": rounds}
    try:
        limits = await steering.budget_for(engine.db, caller.workspace, request.steer.budget)
        if limits:
            steering.require_minimum(limits, steering.spend_of(minimum_calls(inputs, context)),
                                     what="one round of this duel and its verdict")
        model = engine.services.factory.resolve(context.model).model_id
        debate = await store.create_debate(
            engine.db, debate_id=new_debate_id(), user=caller.user, workspace=caller.workspace, topic=request.topic,
            user_profile=request.user_profile, rounds=rounds, model=model, stream_token=secrets.token_urlsafe(18),
        )
        steer = SteerOptions(request.steer.await_at, limits).dump()
        await engine.submit("duel", caller=caller, run_id=debate["_id"], title=request.topic,
                            ref={"debateId": debate["_id"]}, input={**inputs, **({"steer": steer} if steer else {})})
    except ModelError as exc:
        log.error("could not start a debate: no usable model: %s", exc)
        raise CannotStart(START_FAILED) from exc
    except PyMongoError as exc:
        log.error("could not start a debate: %s", exc)
        raise CannotStart(START_FAILED) from exc
    return debate


def public_debate(record: dict, *, summary: bool = False) -> dict:
    """The client's view of a stored debate."""
    view = {
        "id": record["_id"],
        "topic": record["topic"],
        "status": record["status"],
        "createdAt": record["createdAt"].isoformat(),
        "updatedAt": record["updatedAt"].isoformat(),
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
    return datetime.now(UTC) - ended > timedelta(seconds=grace)


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
