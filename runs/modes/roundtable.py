"""Round-table runs (seeds/round-table-conversations.md): one question put to a conversation's table.

Before the run: the table is seated (the workspace's first regular agents and its devil's advocate, with
their memories and documents), a minimum debate is reserved from the workspace's token allowance, and
the question is stored as the conversation's next exchange. The run's events are the graph's own
(`round_start`, `chunk`, `message`, `convergence`, `synthesis`) and a last `done` with the response body
(or `error`). At the end the transcript, the rounds and each agent's new memories are stored and the
tokens billed. An `Idempotency-Key` names the run it started, so a retry follows that run (from any worker)
or gets its result, and never starts a second debate.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel
from pymongo.asynchronous.database import AsyncDatabase

from graphs.roundtable import RoundTableContext, estimate_minimum_tokens, format_history
from graphs.roundtable import graph as roundtable_graph
from nodes.failures import describe_failure, is_model_failure
from nodes.models import UsageLedger
from nodes.speak import is_chunk
from runs.modes.base import Emit, ModeRun, Outcome, RunFailure, with_checkpointer
from store import agents as agent_store
from store import conversations as conv_store
from store import workspaces as ws_store
from store.usage import record_usage

if TYPE_CHECKING:
    from runs.engine import Caller, RunEngine

NO_AGENTS = "No agents found. Please create agents first."
KEY_WAIT_SECONDS = 30  # how long a retry waits for the first request to get its run started
KEY_POLL_SECONDS = 0.1


@dataclass
class Asked:
    """The run a question started (or an idempotent retry found), or the result of one that finished."""

    run_id: str | None = None
    replay: dict[str, Any] | None = None


async def seated_agents(db: AsyncDatabase, *, workspace: str, ctx: RoundTableContext | None = None) -> list[dict]:
    """The workspace's table in the round-table graph's input shape: the first regular agents by creation
    order plus the devil's advocate (created on first use), each with its memories and documents.

    Raises:
        RunFailure: the workspace has no regular agent (the seed's 500).
    """
    ctx = ctx or RoundTableContext()
    agents = await agent_store.list_agents(db, workspace=workspace)
    regular = [a for a in agents if not a.get("isDevilsAdvocate")]
    if not regular:
        raise RunFailure(NO_AGENTS, status=500)
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


async def conversation_history(db: AsyncDatabase, conversation_id: str) -> str | None:
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


async def ask_table(
    engine: RunEngine, caller: Caller, conversation: dict, content: str, *, idempotency_key: str | None = None,
) -> Asked:
    """Put a question to a conversation's table: start its run, or find the run (or result) an earlier
    request with the same `idempotency_key` started.

    Raises:
        RunFailure: 409 when the key was used for another question; 500 without agents or allowance.
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
        run_id = await _start(engine, caller, conversation, content, key)
    except BaseException:
        if key:
            await conv_store.release_idempotency_key(db, **key)
        raise
    return Asked(run_id=run_id)


async def _earlier_run(db: AsyncDatabase, record: dict, key: dict[str, str], fingerprint: str) -> Asked:
    if record.get("fingerprint") != fingerprint:
        raise RunFailure("This Idempotency-Key was already used for a different message in this conversation",
                         status=409, code="idempotency_key_reused")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + KEY_WAIT_SECONDS
    while True:
        if record.get("status") == "done":
            return Asked(replay=record["result"])
        if record.get("runId"):
            return Asked(run_id=record["runId"])
        if loop.time() > deadline:
            raise RunFailure("A debate with this Idempotency-Key is still being set up", status=409,
                             code="idempotency_key_in_progress")
        await asyncio.sleep(KEY_POLL_SECONDS)
        record = await conv_store.get_idempotency_record(db, **key)
        if record is None:
            raise RunFailure("The debate started with this Idempotency-Key failed; send the request again to "
                             "run it anew")


async def _start(engine: RunEngine, caller: Caller, conversation: dict, content: str, key: dict | None) -> str:
    """Seat the table, reserve the allowance, store the question, start the run; return its id."""
    db = engine.db
    ctx = RoundTableContext(models=engine.services.factory)
    inputs = {
        "question": content,
        "topic": conversation["title"],
        "history": await conversation_history(db, conversation["_id"]),
        "agents": await seated_agents(db, workspace=caller.workspace, ctx=ctx),
    }
    needed = estimate_minimum_tokens(inputs, ctx)
    reserved = await ws_store.reserve_allowance(db, caller.workspace, needed)
    if reserved is False:
        left = (await ws_store.get_workspace(db, caller.workspace)).get("allowanceTokens") or 0
        raise RunFailure(
            f"Insufficient token allowance: the workspace has {left} tokens left and a minimum debate needs about "
            f"{needed}. Raise it with `parley workspaces allowance {caller.workspace} --set N`.", status=500)
    async with ws_store.released_on_failure(db, caller.workspace, tokens=needed if reserved else 0):
        exchange, _ = await conv_store.start_exchange(db, conversation=conversation, content=content)
        record = await engine.submit(
            "roundtable", caller=caller, title=content[:200],
            run_id=f"rt_{uuid.uuid4().hex[:16]}",
            ref={"conversationId": conversation["_id"], "exchange": exchange},
            input={"graph": inputs, "exchange": exchange, "reserved": needed if reserved else None,
                   "conversation": {"_id": conversation["_id"], "workspace": conversation["workspace"]},
                   "idempotency": key},
        )
    if key:
        await conv_store.set_idempotency_run(db, **key, run_id=record["_id"])
    return record["_id"]


def seed_chunk(event: dict[str, Any]) -> dict[str, Any]:
    """A `chunk` of the one shape (`nodes.speak`) as the seed's round-table chunk: the agent, the round, the text."""
    speaker = event["speaker"]
    return {"agentId": speaker["id"], "agentName": speaker["name"], "roundNumber": event["round"],
            "content": event["content"]}


def failure_message(exc: BaseException) -> str:
    """The model layer's account of a model failure (upstream text capped and redacted there), or the kind of
    any other failure."""
    if is_model_failure(exc):
        return f"Model failure: {describe_failure(exc)}"
    return f"The debate failed: {exc.__class__.__name__}"


def render_synthesis(synthesis: dict[str, Any]) -> str:
    """The synthesizer message's text: summary, recommended action, consensus, risks and conditions."""
    lines = [synthesis["summary"], "", f"Recommended action: {synthesis['recommendedAction']}"]
    for title, key in (("Consensus", "consensus"), ("Risks", "riskPoints"), ("Conditions", "conditions")):
        if synthesis.get(key):
            lines += ["", f"{title}:"] + [f"- {item}" for item in synthesis[key]]
    return "\n".join(lines)


def transcript_messages(exchange: int, transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The agents' turns as conversation messages, chronological as the seed lists them: a round's turns in
    the order they finished."""
    ordered = sorted(transcript, key=lambda m: (m["roundNumber"], m.get("createdAt", "")))
    return [
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
        for m in ordered
    ]


def new_notes(agents: list[dict[str, Any]], memories: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Each agent's new memory notes, without those it already holds (or repeats)."""
    notes: dict[str, list[str]] = {}
    for entry in memories:
        agent = next((a for a in agents if a["id"] == entry["agentId"]), {"memories": []})
        seen = {m.strip().lower() for m in agent["memories"]}
        kept = notes.setdefault(entry["agentId"], [])
        for note in entry["notes"]:
            if note.strip().lower() not in seen:
                seen.add(note.strip().lower())
                kept.append(note)
    return notes


class RoundtableRun(ModeRun):
    """One question debated by a conversation's table."""

    kind = "roundtable"

    def __init__(self, record: dict[str, Any], services: Any) -> None:
        super().__init__(record, services)
        self.conversation = self.input["conversation"]
        self.transcript: list[dict[str, Any]] = []  # turns finished so far (what a cancelled run keeps)

    def graph(self, checkpointer: BaseCheckpointSaver) -> Pregel:
        return with_checkpointer(roundtable_graph, checkpointer)

    def context(self, ledger: UsageLedger) -> RoundTableContext:
        return RoundTableContext(models=self.services.factory, ledger=ledger)

    def graph_input(self) -> dict[str, Any]:
        return dict(self.input["graph"])

    def translate(self, mode: str, part: Any) -> Iterable[Emit]:
        data = seed_chunk(part) if is_chunk(part) else {k: v for k, v in part.items() if k != "event"}
        if part.get("event") == "message":
            self.transcript.append(data)
        yield Emit(part["event"], data)

    async def resumed(self, state: dict[str, Any]) -> None:
        self.transcript = list(state.get("transcript") or [])

    async def _bill(self, ledger: UsageLedger) -> int | None:
        """Charge what the run used: conversation tokens, usage rows, the allowance. Return the allowance left."""
        db, workspace, total = self.services.db, self.record["workspace"], ledger.total_tokens
        await conv_store.add_tokens(db, conversation_id=self.conversation["_id"], tokens=total)
        await record_usage(db, workspace=workspace, user=self.record["user"], request_id=self.run_id,
                           mode="roundtable", ledger=ledger)
        if self.input.get("reserved") is None:
            return None
        return await ws_store.settle_allowance(db, workspace, reserved=self.input["reserved"], actual=total)

    async def _release_key(self) -> None:
        if self.input.get("idempotency"):
            await conv_store.release_idempotency_key(self.services.db, **self.input["idempotency"])

    async def completed(self, state: dict[str, Any], ledger: UsageLedger) -> Outcome:
        db, exchange = self.services.db, self.input["exchange"]
        synthesis, total_rounds = state["synthesis"], state["total_rounds"]
        messages = transcript_messages(exchange, state.get("transcript") or [])
        messages.append({"exchange": exchange, "senderType": "synthesizer", "content": render_synthesis(synthesis),
                         "metadata": {**synthesis, "totalRounds": total_rounds}})
        if await conv_store.add_messages(db, conversation=self.conversation, messages=messages):
            await conv_store.add_rounds(db, conversation_id=self.conversation["_id"], exchange=exchange,
                                        rounds=sorted(state.get("rounds") or [], key=lambda r: r["roundNumber"]))
        # Memories belong to the agents, not the conversation: kept even if it was deleted meanwhile.
        await agent_store.add_memories(db, workspace=self.record["workspace"], conversation_id=self.conversation["_id"],
                                       notes=new_notes(self.input["graph"]["agents"], state.get("memories") or []))
        remaining = await self._bill(ledger)
        result = {"synthesis": synthesis, "totalRounds": total_rounds,
                  "tokenUsage": {"totalTokensUsed": ledger.total_tokens, "remainingBalance": remaining}}
        if self.input.get("idempotency"):
            await conv_store.complete_idempotency_key(db, **self.input["idempotency"], result=result)
        return Outcome("completed", [Emit("done", {"conversationId": self.conversation["_id"], **result})],
                       result=result)

    async def failed(self, exc: BaseException, ledger: UsageLedger) -> Outcome:
        remaining = await self._bill(ledger)
        await self._release_key()
        message = exc.error["message"] if isinstance(exc, RunFailure) else failure_message(exc)
        code = {"code": exc.error["code"]} if isinstance(exc, RunFailure) and exc.error.get("code") else {}
        error = {"message": message, "status": 500, **code,
                 "tokenUsage": {"totalTokensUsed": ledger.total_tokens, "remainingBalance": remaining}}
        return Outcome("failed", [Emit("error", {"error": message, "status": 500, **code})], error=error)

    async def cancelled(self, ledger: UsageLedger) -> Outcome:
        """Keep the turns finished before the cancel in the conversation, and bill them."""
        messages = transcript_messages(self.input["exchange"], self.transcript)
        if messages:
            await conv_store.add_messages(self.services.db, conversation=self.conversation, messages=messages)
        await self._bill(ledger)
        await self._release_key()
        return Outcome("cancelled", [Emit("cancelled", {"message": "Debate cancelled"})])
