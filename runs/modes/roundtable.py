"""Round-table runs (the round-table contract, docs/api.md): one question put to a conversation's table.

Before the run (`services.roundtable`): the table is seated, a minimum debate reserved from the workspace's
token allowance, and the question stored as the conversation's next exchange. The run's events are the graph's own
(`round_start`, `chunk`, `message`, `convergence`, `synthesis`; `human`, `resumed`, `stopping` from its boundary,
`nodes.steer`) and a last `done` with the response body (or `error`). A person's messages are stored in the
transcript as `user` messages of the exchange (`metadata.inputId` tells them from the question). At the end the transcript, the rounds and each agent's new memories are stored and the
tokens billed. An `Idempotency-Key` names the run it started, so a retry follows that run (from any worker)
or gets its result, and never starts a second debate.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from parley.core import clock
from parley.graphs.roundtable import RoundTableContext
from parley.graphs.roundtable import graph as roundtable_graph
from parley.llm.failures import failure_message
from parley.llm.usage import UsageLedger
from parley.nodes.speak import is_chunk
from parley.nodes.steer import HUMAN_ID
from parley.nodes.tools import TOOL_EVENTS
from parley.runs.modes.base import Emit, ModeRun, Outcome, RunFailure, with_checkpointer
from parley.store import agents as agent_store
from parley.store import conversations as conv_store


def seed_chunk(event: dict[str, Any]) -> dict[str, Any]:
    """A `chunk` of the one shape (`nodes.speak`) as the round-table contract's chunk: the agent, the round, the text;
    a `tool_call` or `tool_result` (`nodes.tools`) the same way, the agent and round first, then its own fields."""
    speaker = event["speaker"]
    return {"agentId": speaker["id"], "agentName": speaker["name"], "roundNumber": event["round"],
            **{k: v for k, v in event.items() if k not in ("event", "speaker", "round")}}


def _spoken(event: Any) -> bool:
    return is_chunk(event) or (isinstance(event, dict) and event.get("event") in TOOL_EVENTS and "speaker" in event)


def render_synthesis(synthesis: dict[str, Any]) -> str:
    """The synthesizer message's text: summary, recommended action, consensus, risks and conditions."""
    lines = [synthesis["summary"], "", f"Recommended action: {synthesis['recommendedAction']}"]
    for title, key in (("Consensus", "consensus"), ("Risks", "riskPoints"), ("Conditions", "conditions")):
        if synthesis.get(key):
            lines += ["", f"{title}:"] + [f"- {item}" for item in synthesis[key]]
    return "\n".join(lines)


def human_event(message: dict[str, Any]) -> dict[str, Any]:
    """A person's message (`nodes.steer.human_turn`) as the table's `human` event: it is first seen in
    `roundNumber`."""
    return {"id": message["id"], "senderType": "user", "name": message["speaker"]["name"],
            "content": message["content"], "roundNumber": message["round"],
            "createdAt": message.get("at") or clock.iso(datetime.fromtimestamp(message["timestamp"] / 1000, UTC))}


def transcript_messages(exchange: int, transcript: list[dict[str, Any]],
                        human: list[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The agents' turns (and a person's messages, `human` events) as conversation messages, chronological as
    the round-table contract lists them: a round's turns in the order they finished, a person's message before the
    round that first saw it."""
    said = [{**m, "senderType": "user"} for m in human] + list(transcript)
    ordered = sorted(said, key=lambda m: (m["roundNumber"], m.get("createdAt", "")))
    return [
        {
            "exchange": exchange, "senderType": "user", "content": m["content"],
            "createdAt": datetime.fromisoformat(m["createdAt"]),
            "metadata": {"roundNumber": m["roundNumber"], "inputId": m["id"], "user": m["name"]},
        } if m.get("senderType") == "user" else {
            "exchange": exchange,
            "senderType": "devils-advocate" if m["isDevilsAdvocate"] else "agent",
            "agentId": m["agentId"], "agentName": m["agentName"], "agentRole": m["agentRole"],
            "content": m["content"],
            "createdAt": datetime.fromisoformat(m["createdAt"]) if m.get("createdAt") else clock.now(),
            "metadata": {
                "phase": m["phase"], "roundNumber": m["roundNumber"], "isDevilsAdvocate": m["isDevilsAdvocate"],
                "stance": m["stance"], "confidence": m["confidence"], "keyPoint": m["keyPoint"],
                "model": m.get("model"), "usage": m.get("usage", {}),
                **({"toolCalls": m["toolCalls"]} if m.get("toolCalls") else {}),
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
        self.human: list[dict[str, Any]] = []  # a person's messages so far, as `human` events

    def graph(self, checkpointer: BaseCheckpointSaver) -> Pregel:
        return with_checkpointer(roundtable_graph, checkpointer)

    def context(self, ledger: UsageLedger) -> RoundTableContext:
        return RoundTableContext(models=self.services.factory, ledger=ledger,
                                 unanimous_confidence=self.input.get("earlyStop"),
                                 tools=self.tool_access(conversation_id=self.conversation["_id"]))

    def graph_input(self) -> dict[str, Any]:
        return dict(self.input["graph"])

    def translate(self, mode: str, part: Any) -> Iterable[Emit]:
        if is_chunk(part) and part["speaker"]["id"] == HUMAN_ID:
            return  # a person's message goes out whole, as `human`
        if part.get("event") == "human":
            data = human_event(part)
            self.human.append(data)
        else:
            data = seed_chunk(part) if _spoken(part) else {k: v for k, v in part.items() if k != "event"}
        if part.get("event") == "message":
            self.transcript.append(data)
        yield Emit(part["event"], data)

    async def resumed(self, state: dict[str, Any]) -> None:
        self.transcript = list(state.get("transcript") or [])
        self.human = [human_event(m) for m in state.get("human") or []]

    async def _bill(self, ledger: UsageLedger) -> int | None:
        """Count the run's tokens on the conversation and bill it (`settle`); return the allowance left."""
        await conv_store.add_tokens(self.services.db, conversation_id=self.conversation["_id"],
                                    tokens=ledger.total_tokens)
        return await self.settle(ledger)

    async def _release_key(self) -> None:
        if self.input.get("idempotency"):
            await conv_store.release_idempotency_key(self.services.db, **self.input["idempotency"])

    async def completed(self, state: dict[str, Any], ledger: UsageLedger) -> Outcome:
        db, exchange = self.services.db, self.input["exchange"]
        synthesis, total_rounds = state["synthesis"], state["total_rounds"]
        early = {"stoppedBy": state["stopped_by"]} if state.get("stopped_by") else {}
        messages = transcript_messages(exchange, state.get("transcript") or [],
                                       [human_event(m) for m in state.get("human") or []])
        messages.append({"exchange": exchange, "senderType": "synthesizer", "content": render_synthesis(synthesis),
                         "metadata": {**synthesis, "totalRounds": total_rounds, **early}})
        if await conv_store.add_messages(db, conversation=self.conversation, messages=messages):
            await conv_store.add_rounds(db, conversation_id=self.conversation["_id"], exchange=exchange,
                                        rounds=sorted(state.get("rounds") or [], key=lambda r: r["roundNumber"]))
        # Memories belong to the agents, not the conversation: kept even if it was deleted meanwhile.
        await agent_store.add_memories(db, workspace=self.record["workspace"], conversation_id=self.conversation["_id"],
                                       notes=new_notes(self.input["graph"]["agents"], state.get("memories") or []))
        remaining = await self._bill(ledger)
        result = {"synthesis": synthesis, "totalRounds": total_rounds,
                  "tokenUsage": {"totalTokensUsed": ledger.total_tokens, "remainingBalance": remaining}, **early}
        if self.input.get("idempotency"):
            await conv_store.complete_idempotency_key(db, **self.input["idempotency"], result=result)
        return Outcome("completed", [Emit("done", {"conversationId": self.conversation["_id"], **result})],
                       result=result, stopped_by=state.get("stopped_by"))

    async def failed(self, exc: BaseException, ledger: UsageLedger) -> Outcome:
        remaining = await self._bill(ledger)
        await self._release_key()
        if isinstance(exc, RunFailure):
            message = exc.error["message"]
        else:  # a model failure as the model layer words it (upstream text capped and redacted there)
            message = failure_message(exc, model="Model failure: {detail}", other="The debate failed: {kind}")
        code = {"code": exc.error["code"]} if isinstance(exc, RunFailure) and exc.error.get("code") else {}
        error = {"message": message, "status": 500, **code,
                 "tokenUsage": {"totalTokensUsed": ledger.total_tokens, "remainingBalance": remaining}}
        return Outcome("failed", [Emit("error", {"error": message, "status": 500, **code})], error=error)

    async def cancelled(self, ledger: UsageLedger) -> Outcome:
        """Keep the turns finished before the cancel in the conversation, and bill them."""
        messages = transcript_messages(self.input["exchange"], self.transcript, self.human)
        if messages:
            await conv_store.add_messages(self.services.db, conversation=self.conversation, messages=messages)
        await self._bill(ledger)
        await self._release_key()
        return Outcome("cancelled", [Emit("cancelled", {"message": "Debate cancelled"})])
