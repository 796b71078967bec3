"""Round-table questions (the round-table contract, docs/api.md): seat a conversation's table, reserve a minimum
debate from the workspace's token allowance, store the question and start its run; and what the run answers.

A run outlives its client, so a debate is always stored and billed whole (`runs.modes.roundtable`, settled by
`services.billing`); an `Idempotency-Key` names the run it started, so a retry follows that run (no 409 while it
goes on), from any worker, or gets its stored result, and never starts a second debate.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from parley.core import clock
from parley.graphs.roundtable import (
    RoundTableContext,
    estimate_minimum_tokens,
    format_history,
    minimum_calls,
    seat_order,
)
from parley.graphs.roundtable.steps import builtin_devils_advocate
from parley.runs import Caller, Event, RunEngine
from parley.services import billing, steering
from parley.services.access import Principal
from parley.services.backend import Backend
from parley.services.errors import CannotStart, Conflict, NotFound, RunFailed, ServiceError
from parley.services.steering import RunWaiting, SteerOptions
from parley.services.tools import agent_subject
from parley.store import agents as agent_store
from parley.store import conversations as conv_store
from parley.store import tools as tool_store

MESSAGE_RATE = "30/minute"
STALE_KEY_AGE = timedelta(hours=1)  # a key whose run never started this long after it was claimed is freed
NO_AGENTS = "No agents found. Please create agents first."
KEY_WAIT_SECONDS = 30  # how long a retry waits for the first request to get its run started
KEY_POLL_SECONDS = 0.1


@dataclass
class Asked:
    """The run a question started (or an idempotent retry found), or the result of one that finished."""

    run_id: str | None = None
    replay: dict[str, Any] | None = None


async def seated_agents(db: AsyncDatabase, *, workspace: str, ctx: RoundTableContext | None = None) -> list[dict]:
    """The workspace's table in the round-table graph's input shape, seated by the table's rule (`seat_order`: the
    first regular agents by creation order, then the devil's advocate, created on first use), each with its memories,
    documents and granted tools.

    Raises:
        CannotStart: the workspace has no regular agent (the contract's 500).
    """
    ctx = ctx or RoundTableContext()
    regular, advocate = seat_order(await agent_store.list_agents(db, workspace=workspace), ctx.max_seats)
    if not regular:
        raise CannotStart(NO_AGENTS)
    advocate = advocate or await agent_store.ensure_devils_advocate(db, workspace=workspace,
                                                                    profile=builtin_devils_advocate())
    seated = regular + [advocate]
    documents = await agent_store.list_documents(db, agent_ids=[a["_id"] for a in seated])
    grants = await tool_store.grants_of(db, workspace=workspace, subjects=[agent_subject(a["_id"]) for a in seated])
    return [
        {
            "id": a["_id"], "name": a["name"], "role": a.get("role", ""), "persona": a.get("persona", ""),
            "model": a.get("model"), "isDevilsAdvocate": bool(a.get("isDevilsAdvocate")),
            **({"reasoningEffort": a["reasoning_effort"]} if a.get("reasoning_effort") else {}),
            "memories": [m["content"] for m in await agent_store.list_memories(
                db, agent_ids=[a["_id"]], limit=ctx.memories_per_agent)],
            "documents": [{"title": d["title"], "text": d["text"]} for d in documents if d["agentId"] == a["_id"]],
            "tools": grants.get(agent_subject(a["_id"]), []),
        }
        for a in seated
    ]


async def conversation_history(db: AsyncDatabase, conversation_id: str) -> str | None:
    """Earlier exchanges of the conversation, bounded, for a follow-up question."""
    exchanges: dict[int, dict[str, Any]] = {}
    for m in await conv_store.list_messages(db, conversation_id=conversation_id):
        ex = exchanges.setdefault(m.get("exchange", 0), {"question": "", "synthesis": None, "rounds": {}})
        if m["senderType"] == "user" and not (m.get("metadata") or {}).get("inputId"):
            ex["question"] = m["content"]  # a person's message during the debate is not the question
        elif m["senderType"] == "synthesizer":
            ex["synthesis"] = m.get("metadata") or {}
        else:
            meta = m.get("metadata") or {}
            ex["rounds"].setdefault(meta.get("roundNumber", 0), []).append(
                {"agentName": m.get("agentName"), "stance": meta.get("stance"), "keyPoint": meta.get("keyPoint")}
            )
    finished = []
    for number in sorted(exchanges):
        ex = exchanges[number]
        if ex["synthesis"] is None:
            continue  # a question whose debate failed or is still running has no conclusion to carry over
        last = ex["rounds"][max(ex["rounds"])] if ex["rounds"] else []
        finished.append({"question": ex["question"], "synthesis": ex["synthesis"], "positions": last})
    return format_history(finished)


async def ask_table(
    engine: RunEngine, caller: Caller, conversation: dict, content: str, *, idempotency_key: str | None = None,
    steer: SteerOptions = SteerOptions(),
) -> Asked:
    """Put a question to a conversation's table: start its run, or find the run (or result) an earlier
    request with the same `idempotency_key` started. `steer`: `await: "after_round"` and the budget.

    Raises:
        Conflict: the key was used for another question, or its first request is still setting its run up.
        CannotStart: no agents, an allowance short of a minimum debate.
        PaymentRequired, InvalidRequest: the budget is too small for round 0 and the synthesis.
    """
    db = engine.db
    key = None
    if idempotency_key:
        key = {"workspace": caller.workspace, "user": caller.user, "conversation_id": conversation["_id"],
               "key": idempotency_key}
        fingerprint = hashlib.sha256(content.encode()).hexdigest()
        existing = await conv_store.claim_idempotency_key(db, **key, fingerprint=fingerprint)
        if existing is not None:
            return await _earlier_run(db, existing, key, fingerprint)
    try:
        run_id = await _start(engine, caller, conversation, content, key, steer)
    except BaseException:
        if key:
            await conv_store.release_idempotency_key(db, **key)
        raise
    return Asked(run_id=run_id)


async def _earlier_run(db: AsyncDatabase, record: dict, key: dict[str, str], fingerprint: str) -> Asked:
    if record.get("fingerprint") != fingerprint:
        raise Conflict("This Idempotency-Key was already used for a different message in this conversation",
                       code="idempotency_key_reused")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + KEY_WAIT_SECONDS
    while True:
        if record.get("status") == "done":
            return Asked(replay=record["result"])
        if record.get("runId"):
            return Asked(run_id=record["runId"])
        if loop.time() > deadline:
            raise Conflict("A debate with this Idempotency-Key is still being set up",
                           code="idempotency_key_in_progress")
        await asyncio.sleep(KEY_POLL_SECONDS)
        record = await conv_store.get_idempotency_record(db, **key)
        if record is None:
            raise CannotStart("The debate started with this Idempotency-Key failed; send the request again to "
                              "run it anew")


def seat_efforts(agents: list[dict]) -> dict[str, str]:
    """The reasoning effort of each seated agent that has one, by agent id (`RunContext.reasoning`)."""
    return {a["id"]: a["reasoningEffort"] for a in agents if a.get("reasoningEffort")}


async def _start(engine: RunEngine, caller: Caller, conversation: dict, content: str, key: dict | None,
                 steer: SteerOptions) -> str:
    """Seat the table, check the budget, reserve the allowance, store the question, start the run; return its id."""
    db = engine.db
    ctx = RoundTableContext(models=engine.services.factory)
    inputs = {
        "question": content,
        "topic": conversation["title"],
        "history": await conversation_history(db, conversation["_id"]),
        "agents": await seated_agents(db, workspace=caller.workspace, ctx=ctx),
    }
    limits = await steering.budget_for(db, caller.workspace, steer.budget)
    if limits:
        steering.require_minimum(limits, steering.spend_of(minimum_calls(inputs, ctx)),
                                 what="round 0 of this table and its synthesis")
    options = SteerOptions(steer.await_at, limits, steer.response_cache).dump()
    early_stop = engine.services.settings.parley_table_early_stop or None
    needed = estimate_minimum_tokens(inputs, ctx)
    bill = billing.Bill(usage="roundtable", allowance=await billing.reserve_allowance(
        db, caller.workspace, needed, what="a minimum debate"))
    async with billing.released_on_failure(db, caller.workspace, bill):
        exchange, _ = await conv_store.start_exchange(db, conversation=conversation, content=content)
        record = await engine.submit(
            "roundtable", caller=caller, title=content[:200],
            run_id=f"rt_{uuid.uuid4().hex[:16]}",
            ref={"conversationId": conversation["_id"], "exchange": exchange},
            input={"graph": inputs, "exchange": exchange, "bill": bill.dump(),
                   "conversation": {"_id": conversation["_id"], "workspace": conversation["workspace"]},
                   "idempotency": key, "earlyStop": early_stop, **({"steer": options} if options else {}),
                   **({"reasoning": efforts} if (efforts := seat_efforts(inputs["agents"])) else {})},
        )
    if key:
        await conv_store.set_idempotency_run(db, **key, run_id=record["_id"])
    return record["_id"]


async def tidy(db: AsyncDatabase) -> None:
    """Finish deletions a stopped process left halfway; free keys whose run a stopped process never started."""
    await conv_store.finish_deletions(db)
    await conv_store.release_stale_keys(db, older_than=clock.now() - STALE_KEY_AGE)


async def submit_message(backend: Backend, principal: Principal, conversation_id: str, content: str, *,
                         idempotency_key: str | None, steer: SteerOptions = SteerOptions()) -> Asked:
    """Put a question to the table of the key's workspace's conversation `conversation_id`: its run (or, for
    a retry of a finished one, its result).

    Raises:
        RateLimited: over `MESSAGE_RATE` for the key.
        NotFound: no such conversation in the workspace.
        Conflict, CannotStart: as `ask_table`.
    """
    limit = MESSAGE_RATE.replace("/", " calls per ")
    await backend.admit(MESSAGE_RATE, "conversations:message", principal.key_id,
                        message=f"Rate limit exceeded: at most {limit} on this route")
    conversation = await conv_store.get_conversation(backend.db, workspace=principal.workspace,
                                                     conversation_id=conversation_id)
    if conversation is None:
        raise NotFound("Conversation not found")
    return await ask_table(backend.runs, principal.caller, conversation, content, idempotency_key=idempotency_key,
                           steer=steer)


async def open_and_ask(backend: Backend, principal: Principal, *, title: str, content: str) -> tuple[str, Asked]:
    """Open a conversation titled `title` and put `content` to its table: the conversation's id and the question's
    run. A question that cannot start leaves no conversation behind.

    Raises:
        RateLimited, Conflict, CannotStart: as `submit_message`.
    """
    doc = await conv_store.create_conversation(backend.db, workspace=principal.workspace, user=principal.user,
                                               title=title)
    try:
        return doc["_id"], await submit_message(backend, principal, doc["_id"], content, idempotency_key=None)
    except ServiceError:
        await conv_store.delete_conversation(backend.db, workspace=principal.workspace, conversation_id=doc["_id"])
        raise


def replayed(result: dict[str, Any]) -> list[Event]:
    """The events an idempotent retry of a finished debate streams: its synthesis, then `done`."""
    return [Event("synthesis", {"synthesis": result["synthesis"], "totalRounds": result["totalRounds"]}, seq=0),
            Event("done", {**result, "replayed": True}, seq=1)]


async def result_of(engine: RunEngine, asked: Asked) -> dict[str, Any]:
    """The response body of the question's debate, once it has ended.

    Raises:
        RunFailed: the debate failed (its error) or was cancelled.
        RunWaiting: the debate waits for the person who asked (`await`, or a pause).
    """
    if asked.replay is not None:
        return asked.replay
    record = await engine.wait(asked.run_id, or_waiting=True)
    if record["status"] == "waiting":
        raise RunWaiting(record)
    if record["status"] == "completed":
        return record["result"]
    raise RunFailed(record.get("error") or {"message": "The debate was cancelled", "status": 500},
                    run_id=asked.run_id)
