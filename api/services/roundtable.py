"""Round-table runs: check and seat a debate, run the graph in the background, store and bill what it did.

A run is a background task (it outlives its client, so a debate is always stored and billed whole);
the request that started it, and any idempotent retry of that request, follow its events or wait for
its result. A retry that arrives while the first run is still going waits for it (no 409): the
client's intent is "give me this debate's result", and a second debate is exactly what it must not get.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import openai
from fastapi import FastAPI
from pymongo.asynchronous.database import AsyncDatabase

from api.deps import Principal
from api.errors import ApiError
from api.sse import Event
from core.metrics import record_run
from core.telemetry import trace_config
from store import agents as agent_store
from store import conversations as conv_store
from store import workspaces as ws_store
from store.usage import record_usage
from graphs.roundtable import RoundTableContext, estimate_minimum_tokens, format_history, graph
from nodes.models import ModelError, UsageLedger

log = logging.getLogger("parley.roundtable")

MESSAGE_RATE = "30/minute"
# Another process's run is waited for by polling its record; a debate longer than this is presumed lost.
REMOTE_WAIT_SECONDS = 900
REMOTE_POLL_SECONDS = 0.25
STALE_RUN_AGE = timedelta(hours=1)
NO_AGENTS = "No agents found. Please create agents first."


class DebateRun:
    """One debate in flight: the events it has emitted so far and, once finished, its result or error."""

    def __init__(self, run_id: str) -> None:
        self.id = run_id
        self.events: list[Event] = []
        self.result: dict[str, Any] | None = None
        self.error: ApiError | None = None
        self.finished = False
        self._changed = asyncio.Condition()

    @classmethod
    def replay(cls, result: dict[str, Any]) -> DebateRun:
        """A finished run standing for an earlier one, as seen by an idempotent retry."""
        run = cls("replay")
        run.events = [
            Event("synthesis", {"synthesis": result["synthesis"], "totalRounds": result["totalRounds"]}, seq=0),
            Event("done", {**result, "replayed": True}, seq=1),
        ]
        run.result, run.finished = result, True
        return run

    async def emit(self, name: str, data: dict[str, Any]) -> None:
        async with self._changed:
            self.events.append(Event(name, data, seq=len(self.events)))
            self._changed.notify_all()

    async def finish(self, *, result: dict[str, Any] | None = None, error: ApiError | None = None) -> None:
        async with self._changed:
            self.result, self.error, self.finished = result, error, True
            self._changed.notify_all()

    async def follow(self) -> AsyncIterator[Event]:
        """Every event from the first, then live ones until the run finishes."""
        sent = 0
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: len(self.events) > sent or self.finished)
                batch = self.events[sent:]
                done = self.finished
            for event in batch:
                yield event
            sent += len(batch)
            if done and sent == len(self.events):
                return

    async def wait(self) -> dict[str, Any]:
        """The run's response body, once it is finished; its error raised if it failed."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.finished)
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


async def on_startup(app: FastAPI) -> None:
    """Finish deletions a stopped process left halfway, free keys of runs it never finished."""
    app.state.roundtable_runs = {}
    db: AsyncDatabase = app.state.db
    await conv_store.finish_deletions(db)
    await conv_store.release_stale_keys(db, older_than=datetime.now(UTC) - STALE_RUN_AGE)


# --- starting a run -------------------------------------------------------------------------


async def submit_message(
    app: FastAPI, principal: Principal, conversation_id: str, content: str, *, idempotency_key: str | None
) -> DebateRun:
    """Check, seat and start the debate for one question; return the run to follow or wait for.

    Raises:
        ApiError: 429 over the route's rate, 404 for an unknown conversation, 409 when an
            Idempotency-Key is reused for another question, 500 without agents or allowance.
    """
    db: AsyncDatabase = app.state.db
    decision = await app.state.ratelimiter.hit(MESSAGE_RATE, "conversations:message", principal.key_id)
    if not decision.allowed:
        raise ApiError(
            429, f"Rate limit exceeded: at most {MESSAGE_RATE.replace('/', ' calls per ')} on this route",
            code="rate_limited", headers={"Retry-After": str(decision.retry_after)},
        )
    conversation = await conv_store.get_conversation(db, workspace=principal.workspace, conversation_id=conversation_id)
    if conversation is None:
        raise ApiError(404, "Conversation not found")

    key = None
    if idempotency_key:
        key = {"workspace": principal.workspace, "conversation_id": conversation_id, "key": idempotency_key}
        fingerprint = hashlib.sha256(content.encode()).hexdigest()
        existing = await conv_store.claim_idempotency_key(db, **key, fingerprint=fingerprint)
        if existing is not None:
            return await _attach(app, existing, key, fingerprint)

    try:
        run, start = await _prepare(app, principal, conversation, content, key)
    except BaseException:
        if key:
            await conv_store.release_idempotency_key(db, **key)
        raise
    runs: dict[str, DebateRun] = app.state.roundtable_runs
    if key:
        runs[_key_id(key)] = run
    task = asyncio.create_task(start(), name=f"roundtable-{run.id}")
    app.state.background.add(task)

    def _done(t: asyncio.Task) -> None:
        app.state.background.discard(t)
        if key:
            runs.pop(_key_id(key), None)

    task.add_done_callback(_done)
    return run


def _key_id(key: dict[str, str]) -> str:
    return f"{key['workspace']}:{key['conversation_id']}:{key['key']}"


async def _attach(app: FastAPI, record: dict, key: dict[str, str], fingerprint: str) -> DebateRun:
    """The run an idempotent retry should see: the finished result, the live run, or a poll of another process's."""
    if record.get("fingerprint") != fingerprint:
        raise ApiError(
            409, "This Idempotency-Key was already used for a different message in this conversation",
            code="idempotency_key_reused",
        )
    if record.get("status") == "done":
        return DebateRun.replay(record["result"])
    live = app.state.roundtable_runs.get(_key_id(key))
    if live is not None:
        return live
    run = DebateRun("remote")
    task = asyncio.create_task(_await_remote(app.state.db, run, key))
    app.state.background.add(task)
    task.add_done_callback(app.state.background.discard)
    return run


async def _await_remote(db: AsyncDatabase, run: DebateRun, key: dict[str, str]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REMOTE_WAIT_SECONDS
    while loop.time() < deadline:
        record = await conv_store.get_idempotency_record(db, **key)
        if record is None:
            await run.finish(error=ApiError(
                500, "The debate started with this Idempotency-Key failed; send the request again to run it anew"
            ))
            return
        if record.get("status") == "done":
            result = record["result"]
            await run.emit("synthesis", {"synthesis": result["synthesis"], "totalRounds": result["totalRounds"]})
            await run.emit("done", {**result, "replayed": True})
            await run.finish(result=result)
            return
        await asyncio.sleep(REMOTE_POLL_SECONDS)
    await run.finish(error=ApiError(
        409, "A debate with this Idempotency-Key is still running", code="idempotency_key_in_progress"
    ))


async def seated_agents(db: AsyncDatabase, *, workspace: str, ctx: RoundTableContext | None = None) -> list[dict]:
    """The workspace's table in the round-table graph's input shape: the first regular agents by creation
    order plus the devil's advocate (created on first use), each with its memories and documents."""
    ctx = ctx or RoundTableContext()
    agents = await agent_store.list_agents(db, workspace=workspace)
    regular = [a for a in agents if not a.get("isDevilsAdvocate")]
    if not regular:
        raise ApiError(500, NO_AGENTS)
    advocate = next((a for a in agents if a.get("isDevilsAdvocate")), None)
    advocate = advocate or await agent_store.ensure_devils_advocate(db, workspace=workspace)
    seated = regular[: ctx.max_seats] + [advocate]
    documents = await agent_store.list_documents(db, agent_ids=[a["_id"] for a in seated])
    return [
        {
            "id": a["_id"], "name": a["name"], "role": a.get("role", ""), "persona": a.get("persona", ""),
            "model": a.get("model"), "isDevilsAdvocate": bool(a.get("isDevilsAdvocate")),
            "memories": [m["content"] for m in await agent_store.list_memories(
                db, agent_ids=[a["_id"]], limit=ctx.memories_per_agent)],
            "documents": [{"title": d["title"], "text": d["text"]} for d in documents if d["agentId"] == a["_id"]],
        }
        for a in seated
    ]


async def _prepare(app: FastAPI, principal: Principal, conversation: dict, content: str, key: dict | None):
    """Seat the table, check the allowance, store the question; return the run and its coroutine factory."""
    db: AsyncDatabase = app.state.db
    workspace = principal.workspace
    ctx = RoundTableContext(models=app.state.factory, ledger=UsageLedger())
    inputs = {
        "question": content,
        "topic": conversation["title"],
        "history": await _history(db, conversation["_id"]),
        "agents": await seated_agents(db, workspace=workspace, ctx=ctx),
    }
    needed = estimate_minimum_tokens(inputs, ctx)
    reserved = await ws_store.reserve_allowance(db, workspace, needed)
    if reserved is False:
        left = (await ws_store.get_workspace(db, workspace)).get("allowanceTokens") or 0
        raise ApiError(
            500, f"Insufficient token allowance: the workspace has {left} tokens left and a minimum debate "
            f"needs about {needed}. Raise it with `parley workspaces allowance {workspace} --set N`.",
        )
    try:
        exchange, _ = await conv_store.start_exchange(db, conversation=conversation, content=content)
    except BaseException:
        if reserved:
            await ws_store.settle_allowance(db, workspace, reserved=needed, actual=0)
        raise
    run = DebateRun("rt_" + uuid.uuid4().hex[:16])

    def start():
        return _execute(
            app, run, principal=principal, conversation=conversation, exchange=exchange, inputs=inputs, ctx=ctx,
            reserved=needed if reserved else None, key=key,
        )

    return run, start


async def _history(db: AsyncDatabase, conversation_id: str) -> str | None:
    """Earlier exchanges of the conversation, bounded, for a follow-up question."""
    exchanges: dict[int, dict[str, Any]] = {}
    for m in await conv_store.list_messages(db, conversation_id=conversation_id):
        ex = exchanges.setdefault(m.get("exchange", 0), {"question": "", "synthesis": None, "rounds": {}})
        if m["senderType"] == "user":
            ex["question"] = m["content"]
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


# --- running it -----------------------------------------------------------------------------


def _failure_message(exc: BaseException) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"Model failure: the model endpoint answered {exc.status_code} ({exc.message})"
    if isinstance(exc, openai.APIError):
        return f"Model failure: {exc.__class__.__name__}: {exc.message}"
    if isinstance(exc, ModelError):
        return f"Model failure: {exc}"
    return f"The debate failed: {exc.__class__.__name__}"


async def _execute(
    app: FastAPI, run: DebateRun, *, principal: Principal, conversation: dict, exchange: int,
    inputs: dict[str, Any], ctx: RoundTableContext, reserved: int | None, key: dict | None,
) -> None:
    """Run the graph, relaying its events; then store the transcript, rounds, memories and usage."""
    db: AsyncDatabase = app.state.db
    final: dict[str, Any] = {}
    try:
        config = trace_config(run.id, "roundtable", principal.workspace, principal.user)
        async for mode, chunk in graph.astream(inputs, config, context=ctx, stream_mode=["custom", "values"]):
            if mode == "custom":
                await run.emit(chunk["event"], {k: v for k, v in chunk.items() if k != "event"})
            else:
                final = chunk
    except Exception as exc:  # every failure ends the run with a clear 500; the cause is logged
        log.exception("round table %s failed", run.id)
        record_run("roundtable", "failed")
        remaining = await _bill(db, principal, conversation, run, ctx.ledger, reserved)
        if key:
            await conv_store.release_idempotency_key(db, **key)
        error = ApiError(500, _failure_message(exc), extra={"tokenUsage": {
            "totalTokensUsed": ctx.ledger.total_tokens, "remainingBalance": remaining}})
        await run.emit("error", {"error": error.message, "status": 500})
        await run.finish(error=error)
        return

    try:
        result = await _store(db, principal, conversation, exchange, run, ctx, inputs, final, reserved)
        if key:
            await conv_store.complete_idempotency_key(db, **key, result=result)
    except Exception:
        log.exception("round table %s could not be stored", run.id)
        record_run("roundtable", "failed")
        if key:
            await conv_store.release_idempotency_key(db, **key)
        error = ApiError(500, "The debate ran but could not be stored")
        await run.emit("error", {"error": error.message, "status": 500})
        await run.finish(error=error)
        return
    record_run("roundtable", "completed")
    await run.emit("done", {"conversationId": conversation["_id"], **result})
    await run.finish(result=result)


async def _bill(
    db: AsyncDatabase, principal: Principal, conversation: dict, run: DebateRun, ledger: UsageLedger,
    reserved: int | None,
) -> int | None:
    """Charge what the run used: conversation tokens, usage rows, the allowance. Return the allowance left."""
    total = ledger.total_tokens
    await conv_store.add_tokens(db, conversation_id=conversation["_id"], tokens=total)
    await record_usage(db, workspace=principal.workspace, user=principal.user, request_id=run.id,
                       mode="roundtable", ledger=ledger)
    if reserved is None:
        return None
    return await ws_store.settle_allowance(db, principal.workspace, reserved=reserved, actual=total)


def _render_synthesis(synthesis: dict[str, Any]) -> str:
    lines = [synthesis["summary"], "", f"Recommended action: {synthesis['recommendedAction']}"]
    for title, key in (("Consensus", "consensus"), ("Risks", "riskPoints"), ("Conditions", "conditions")):
        if synthesis.get(key):
            lines += ["", f"{title}:"] + [f"- {item}" for item in synthesis[key]]
    return "\n".join(lines)


def _new_notes(inputs: dict[str, Any], final: dict[str, Any]) -> dict[str, list[str]]:
    """Each agent's new memory notes, without those it already holds (or repeats)."""
    notes: dict[str, list[str]] = {}
    for entry in final.get("memories") or []:
        agent = next((a for a in inputs["agents"] if a["id"] == entry["agentId"]), {"memories": []})
        seen = {m.strip().lower() for m in agent["memories"]}
        kept = notes.setdefault(entry["agentId"], [])
        for note in entry["notes"]:
            if note.strip().lower() not in seen:
                seen.add(note.strip().lower())
                kept.append(note)
    return notes


async def _store(
    db: AsyncDatabase, principal: Principal, conversation: dict, exchange: int, run: DebateRun,
    ctx: RoundTableContext, inputs: dict[str, Any], final: dict[str, Any], reserved: int | None,
) -> dict[str, Any]:
    synthesis, total_rounds = final["synthesis"], final["total_rounds"]
    # Chronological, as the seed lists messages: a round's turns in the order they finished.
    transcript = sorted(final.get("transcript") or [], key=lambda m: (m["roundNumber"], m.get("createdAt", "")))
    messages = [
        {
            "exchange": exchange,
            "senderType": "devils-advocate" if m["isDevilsAdvocate"] else "agent",
            "agentId": m["agentId"], "agentName": m["agentName"], "agentRole": m["agentRole"],
            "content": m["content"],
            "createdAt": datetime.fromisoformat(m["createdAt"]) if m.get("createdAt") else datetime.now(UTC),
            "metadata": {
                "phase": m["phase"], "roundNumber": m["roundNumber"], "isDevilsAdvocate": m["isDevilsAdvocate"],
                "stance": m["stance"], "confidence": m["confidence"], "keyPoint": m["keyPoint"],
                "model": m.get("model"), "usage": m.get("usage", {}),
            },
        }
        for m in transcript
    ]
    messages.append({
        "exchange": exchange, "senderType": "synthesizer", "content": _render_synthesis(synthesis),
        "metadata": {**synthesis, "totalRounds": total_rounds},
    })
    stored = await conv_store.add_messages(db, conversation=conversation, messages=messages)
    if stored:
        await conv_store.add_rounds(db, conversation_id=conversation["_id"], exchange=exchange,
                                    rounds=sorted(final.get("rounds") or [], key=lambda r: r["roundNumber"]))
    else:
        log.warning("conversation %s was deleted during its debate; transcript dropped", conversation["_id"])
    # Memories belong to the agents, not the conversation: kept even if it was deleted meanwhile.
    await agent_store.add_memories(
        db, workspace=principal.workspace, conversation_id=conversation["_id"], notes=_new_notes(inputs, final)
    )
    remaining = await _bill(db, principal, conversation, run, ctx.ledger, reserved)
    return {
        "synthesis": synthesis,
        "totalRounds": total_rounds,
        "tokenUsage": {"totalTokensUsed": ctx.ledger.total_tokens, "remainingBalance": remaining},
    }
