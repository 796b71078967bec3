"""Duel runs (seeds/duel-sse-api.md): the duel graph's events as the seed's SSE events, and the `debates` record.

The debate id is the run id. The record is written `in_progress` before the run starts; the opponent and
each message are written once, as the run's `init` and `message` events, each sent only once it is stored
(`Emit.durable`: a client that sees one can read it back, `store.debates.get_debate`); the opponent, the
messages, the synthesis and both verdicts go into the record with its end. The stored events are the duel's
only durability: it saves no LangGraph checkpoints, and a resumed duel goes on from its last stored turn.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from graphs.duel import DuelContext
from graphs.duel import graph as duel_graph
from graphs.duel.steps import TurnInterrupted
from llm.failures import failure_message
from llm.usage import UsageLedger
from nodes.tools import TOOL_EVENTS
from runs.modes.base import Emit, ModeRun, Outcome, RunFailure, with_checkpointer
from store import debates as store

CANCELLED = "Debate cancelled"


def describe_failure(exc: BaseException) -> str:
    """What to tell the client about a failed debate: the model layer's account of a model failure (upstream
    text capped and redacted there), nothing of Parley's internals otherwise."""
    cause = exc.__cause__ if isinstance(exc, TurnInterrupted) and exc.__cause__ else exc
    return "Debate generation failed: " + failure_message(
        cause, model="the model failed ({detail})", unreadable="the model's answer could not be used",
        other="an internal error")


class DuelRun(ModeRun):
    """A duel: `init` once the opponent is chosen, `start`/`chunk`/`message` per turn, `synthesizing`, then
    `synthesis` and `done` (or `error`)."""

    kind = "duel"
    # The debate record is the duel's checkpoint: its opponent and each message are stored at the turn's end,
    # before anyone is shown them. A duel resumed elsewhere goes on from its last stored turn (`restart`).
    checkpointed = False

    def __init__(self, record: dict[str, Any], services: Any) -> None:
        super().__init__(record, services)
        self.speaking: str | None = None  # the turn under way, so a retried turn is announced once
        self.opponent: dict[str, Any] | None = None  # what the debate's events have told so far
        self.messages: list[dict[str, Any]] = []

    def graph(self, checkpointer: BaseCheckpointSaver | None) -> Pregel:
        return with_checkpointer(duel_graph, checkpointer)

    def context(self, ledger: UsageLedger) -> DuelContext:
        return DuelContext(models=self.services.factory, ledger=ledger, tools=self.tool_access())

    def graph_input(self) -> dict[str, Any]:
        return dict(self.input)

    def translate(self, mode: str, part: Any) -> Iterable[Emit]:
        kind = part.get("event")
        if kind == "chunk":
            yield Emit("chunk", {"role": part["speaker"]["id"], "content": part["content"]})  # the seed's chunk
        elif kind in TOOL_EVENTS:  # a side's call of a tool it was granted, and its result
            yield Emit(kind, {"role": part["speaker"]["id"],
                              **{k: v for k, v in part.items() if k not in ("event", "speaker", "round")}})
        elif kind == "start" and self.speaking != part["role"]:
            self.speaking = part["role"]
            yield Emit("start", {"role": part["role"], "name": part["name"]})
        elif kind == "message":
            self.speaking = None
            message = {key: part[key] for key in ("role", "name", "content", "timestamp", "toolCalls") if key in part}
            self.messages.append(message)
            yield Emit("message", message, durable=True)
        elif kind == "opponent":
            self.opponent = part["opponentProfile"]
            yield Emit("init", {"id": self.run_id, "topic": self.input["topic"],
                                "userProfile": self.input["user_profile"], "opponentProfile": self.opponent},
                       durable=True)
        elif kind == "synthesizing":
            yield Emit("synthesizing", {})

    async def restart(self, rows: list[dict]) -> tuple[dict[str, Any], set[int]] | None:
        """Go on from the last turn whose `message` event was stored (a turn under way is asked again); start
        over when not even the opponent's `init` was."""
        opening = next((row for row in rows if row["event"] == "init"), None)
        if opening is None:
            return None
        told = [row for row in rows if row["event"] == "message"]
        self.opponent, self.messages = store.progress(rows)
        last = told[-1]["seq"] if told else opening["seq"]
        graph_input = {**self.graph_input(), "opponent_profile": self.opponent, "messages": list(self.messages)}
        return graph_input, {row["seq"] for row in rows if row["seq"] <= last}

    async def completed(self, state: dict[str, Any], ledger: UsageLedger) -> Outcome:
        synthesis, messages = state.get("synthesis"), list(state.get("messages") or [])
        if synthesis is None:
            raise RuntimeError("the duel graph ended without a synthesis")
        verdicts = sorted(state.get("verdicts") or [], key=lambda verdict: verdict["order"] != "as_debated")
        await self.settle(ledger)
        done = {"id": self.run_id, "topic": self.input["topic"], "messages": messages, "synthesis": synthesis}
        return Outcome("completed", [
            Emit("synthesis", synthesis, partial(store.complete_debate, self.services.db, debate_id=self.run_id,
                                                 opponent_profile=state.get("opponent_profile") or self.opponent,
                                                 synthesis=synthesis, verdicts=verdicts, messages=messages)),
            Emit("done", done),
        ], result={"winner": synthesis.get("winner"), "messages": len(messages)})

    async def failed(self, exc: BaseException, ledger: UsageLedger) -> Outcome:
        error = exc.error if isinstance(exc, RunFailure) else {"message": describe_failure(exc), "status": 500}
        await self.settle(ledger)
        await store.end_debate(self.services.db, debate_id=self.run_id, status=store.FAILED, error=error["message"],
                               opponent_profile=self.opponent, messages=self.messages)
        event = {"message": error["message"], **({"code": error["code"]} if error.get("code") else {})}
        return Outcome("failed", [Emit("error", event)], error=error)

    async def cancelled(self, ledger: UsageLedger) -> Outcome:
        await self.settle(ledger)
        await store.end_debate(self.services.db, debate_id=self.run_id, status=store.CANCELLED, error=CANCELLED,
                               opponent_profile=self.opponent, messages=self.messages)
        return Outcome("cancelled", [Emit("cancelled", {"message": CANCELLED})])
