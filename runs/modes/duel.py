"""Duel runs (seeds/duel-sse-api.md): the duel graph's events as the seed's SSE events, and the `debates` record.

The debate id is the run id. The record is written `in_progress` before the run starts, the opponent
and each message as they come (each event sent only once that write is stored), the synthesis and
both verdicts with `completed` at the end. The record and the stored events are the duel's only
durability: it saves no LangGraph checkpoints, and a resumed duel goes on from its last stored turn.

A person's messages (`POST /v1/runs/{id}/input`, taken in at the boundary after each turn, `nodes.steer`) are
`human` events and messages of the record with `role: "human"`, `senderType: "user"`, among the turns. A duel
that waits for a person is not checkpointed either: every change its boundary makes is one of its stored events
(`human`, `resumed`, `stopping`), so the worker that receives the answer rebuilds the duel from them, as it does
after a crash (`restart`), and goes on from the boundary where it waited. Checkpointing every duel (any of them
may be paused) would add a write per turn to the mode that runs most, for what its events already hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from graphs.duel import DuelContext, transcript
from graphs.duel import graph as duel_graph
from graphs.duel.steps import TurnInterrupted
from llm.failures import failure_message
from llm.usage import UsageLedger
from nodes.steer import HUMAN_ID
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


# The events that say where a duel had got to: its turns and what its boundaries did (`restart`).
RECORDED = ("message", "human", "resumed", "stopping", "waiting")


def human_message(event: dict[str, Any]) -> dict[str, Any]:
    """A person's message as the debate record and `done` list it, from its node event or its wire event."""
    name = event["speaker"]["name"] if "speaker" in event else event["name"]
    return {"role": "human", "senderType": "user", "name": name, "content": event["content"],
            "timestamp": event["timestamp"], "id": event["id"]}


def steered(rows: list[dict]) -> dict[str, Any]:
    """The duel graph's state from its stored events (`message`, `human`, `resumed`, `stopping`): its turns, the
    person's messages, the inputs its boundaries took in, the last boundary passed after a wait, and why it
    stopped early."""
    state: dict[str, Any] = {"messages": [], "human": [], "consumed": []}
    for row in rows:
        data = row["data"]
        if row["event"] == "message":
            state["messages"].append(data)
        elif row["event"] == "human":
            state["human"].append({"id": data["id"], "speaker": {"id": HUMAN_ID, "name": data["name"]},
                                   "content": data["content"], "round": data.get("round"),
                                   "position": data["position"], "timestamp": data["timestamp"]})
            state["consumed"].append(data["id"])
        elif row["event"] in ("resumed", "stopping"):
            state["consumed"] += [i for i in data.get("inputs") or () if i not in state["consumed"]]
            if row["event"] == "resumed":
                state["passed"] = data["position"]
            else:
                state["stopped_by"] = data["by"]
    return state


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

    def graph(self, checkpointer: BaseCheckpointSaver | None) -> Pregel:
        return with_checkpointer(duel_graph, checkpointer)

    def context(self, ledger: UsageLedger) -> DuelContext:
        return DuelContext(models=self.services.factory, ledger=ledger)

    def graph_input(self) -> dict[str, Any]:
        return {key: value for key, value in self.input.items() if key != "steer"}  # the engine reads `steer`

    def _store(self, change, **fields: Any):
        return partial(change, self.services.db, debate_id=self.run_id, **fields)

    def translate(self, mode: str, part: Any) -> Iterable[Emit]:
        kind = part.get("event")
        if kind == "chunk" and part["speaker"]["id"] == HUMAN_ID:
            return  # a person's message goes out whole, as `human` (the seed's chunks are the debaters')
        if kind == "chunk":
            yield Emit("chunk", {"role": part["speaker"]["id"], "content": part["content"]})  # the seed's chunk
        elif kind == "start" and self.speaking != part["role"]:
            self.speaking = part["role"]
            yield Emit("start", {"role": part["role"], "name": part["name"]})
        elif kind == "message":
            self.speaking = None
            message = {key: part[key] for key in ("role", "name", "content", "timestamp")}
            yield Emit("message", message, self._store(store.append_message, message=message))
        elif kind == "opponent":
            opponent = part["opponentProfile"]
            yield Emit("init", {"id": self.run_id, "topic": self.input["topic"],
                                "userProfile": self.input["user_profile"], "opponentProfile": opponent},
                       self._store(store.set_opponent, opponent_profile=opponent))
        elif kind == "synthesizing":
            yield Emit("synthesizing", {})
        elif kind == "human":
            said = human_message(part)
            yield Emit("human", {**said, "round": part["round"], "position": part["position"]},
                       self._store(store.append_message, message=said))
        elif kind in ("resumed", "stopping"):
            yield Emit(kind, {key: value for key, value in part.items() if key != "event"})

    async def restart(self, rows: list[dict]) -> tuple[dict[str, Any], set[int]] | None:
        """Go on from the boundary after the last turn whose `message` event was stored (a turn under way is
        asked again), with what the boundaries had taken in (their `human`, `resumed` and `stopping` events);
        start over when not even the opponent's `init` was."""
        opening = next((row for row in rows if row["event"] == "init"), None)
        if opening is None:
            return None
        told = [row for row in rows if row["event"] in RECORDED]
        # The record may hold a message whose event was not stored: it goes back to the stored ones.
        await store.set_messages(self.services.db, debate_id=self.run_id,
                                 messages=[row["data"] if row["event"] == "message" else human_message(row["data"])
                                           for row in told if row["event"] in ("message", "human")])
        last = told[-1]["seq"] if told else opening["seq"]
        graph_input = {**self.graph_input(), "opponent_profile": opening["data"]["opponentProfile"],
                       **steered(told)}
        return graph_input, {row["seq"] for row in rows if row["seq"] <= last}

    async def completed(self, state: dict[str, Any], ledger: UsageLedger) -> Outcome:
        synthesis = state.get("synthesis")
        if synthesis is None:
            raise RuntimeError("the duel graph ended without a synthesis")
        turns = list(state.get("messages") or [])
        messages = transcript(turns, state.get("human"))
        verdicts = sorted(state.get("verdicts") or [], key=lambda verdict: verdict["order"] != "as_debated")
        stopped_by = state.get("stopped_by")
        early = {"stoppedBy": stopped_by} if stopped_by else {}
        await self.settle(ledger)
        done = {"id": self.run_id, "topic": self.input["topic"], "messages": messages, "synthesis": synthesis, **early}
        return Outcome("completed", [
            Emit("synthesis", synthesis, self._store(store.complete_debate, synthesis=synthesis, verdicts=verdicts,
                                                     messages=messages, stopped_by=stopped_by)),
            Emit("done", done),
        ], result={"winner": synthesis.get("winner"), "messages": len(turns), **early})

    async def failed(self, exc: BaseException, ledger: UsageLedger) -> Outcome:
        error = exc.error if isinstance(exc, RunFailure) else {"message": describe_failure(exc), "status": 500}
        await self.settle(ledger)
        await store.end_debate(self.services.db, debate_id=self.run_id, status=store.FAILED, error=error["message"])
        event = {"message": error["message"], **({"code": error["code"]} if error.get("code") else {})}
        return Outcome("failed", [Emit("error", event)], error=error)

    async def cancelled(self, ledger: UsageLedger) -> Outcome:
        await self.settle(ledger)
        await store.end_debate(self.services.db, debate_id=self.run_id, status=store.CANCELLED, error=CANCELLED)
        return Outcome("cancelled", [Emit("cancelled", {"message": CANCELLED})])
