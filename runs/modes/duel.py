"""Duel runs: the duel graph's events as the duel contract's SSE events (docs/api.md), and the `debates` record.

The debate id is the run id. The record is written `in_progress` before the run starts; the opponent and
each message are written once, as the run's `init` and `message` events, each sent only once it is stored
(`Emit.durable`: a client that sees one can read it back, `store.debates.get_debate`); the opponent, the
messages, the synthesis and both verdicts go into the record with its end. The stored events are the duel's
only durability: it saves no LangGraph checkpoints, and a resumed duel goes on from its last stored turn.

A person's messages (`POST /v1/runs/{id}/input`, taken in at the boundary after each turn, `nodes.steer`) are
`human` events, durable as `message` is, and messages of the debate with `role: "human"`, `senderType: "user"`,
among the turns. A duel that waits for a person is not checkpointed either: every change its boundary makes is
one of its stored events (`human`, `resumed`, `stopping`), so the worker that receives the answer rebuilds the duel
from them, as after a crash (`restart`), and goes on from the boundary where it waited. Checkpointing every duel
(any of them may be paused) would add writes to every turn of the mode that runs most, for what its events hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from parley.graphs.duel import DuelContext, transcript
from parley.graphs.duel import graph as duel_graph
from parley.graphs.duel.steps import TurnInterrupted
from parley.llm.failures import failure_message
from parley.llm.usage import UsageLedger
from parley.nodes.steer import HUMAN_ID
from parley.nodes.tools import TOOL_EVENTS
from parley.runs.modes.base import Emit, ModeRun, Outcome, RunFailure, with_checkpointer
from parley.store import debates as store

CANCELLED = "Debate cancelled"


def debate_failure_message(exc: BaseException) -> str:
    """What to tell the client about a failed debate: the model layer's account of a model failure (upstream
    text capped and redacted there), nothing of Parley's internals otherwise."""
    cause = exc.__cause__ if isinstance(exc, TurnInterrupted) and exc.__cause__ else exc
    return "Debate generation failed: " + failure_message(
        cause, model="the model failed ({detail})", unreadable="the model's answer could not be used",
        other="an internal error")


# The events that say where a duel had got to: its turns and what its boundaries did (`restart`).
RECORDED = ("message", "human", "resumed", "stopping", "waiting")


def human_event(part: dict[str, Any]) -> dict[str, Any]:
    """A person's message (`nodes.steer.human_turn`) as the duel's `human` event: the debate's message (`role:
    "human"`) and where it stood (`position`: the turns said before it; `round`: the round that first saw it)."""
    return {"role": "human", "senderType": "user", "name": part["speaker"]["name"], "content": part["content"],
            "timestamp": part["timestamp"], "id": part["id"], "round": part["round"], "position": part["position"]}


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
        self.opponent: dict[str, Any] | None = None  # what the debate's events have told so far
        self.messages: list[dict[str, Any]] = []

    def graph(self, checkpointer: BaseCheckpointSaver | None) -> Pregel:
        return with_checkpointer(duel_graph, checkpointer)

    def context(self, ledger: UsageLedger) -> DuelContext:
        return DuelContext(models=self.services.factory, model=self.input.get("model"), ledger=ledger,
                           tools=self.tool_access())

    def graph_input(self) -> dict[str, Any]:
        # The engine reads `steer`, the context `model`.
        return {key: value for key, value in self.input.items() if key not in ("steer", "model", "reasoning")}

    def translate(self, mode: str, part: Any) -> Iterable[Emit]:
        kind = part.get("event")
        if kind == "chunk" and part["speaker"]["id"] == HUMAN_ID:
            return  # a person's message goes out whole, as `human` (the contract's chunks are the debaters')
        if kind == "chunk":
            yield Emit("chunk", {"role": part["speaker"]["id"], "content": part["content"]})  # the contract's chunk
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
        elif kind == "human":
            said = human_event(part)
            self.messages.append(store.human_message(said))
            yield Emit("human", said, durable=True)
        elif kind in ("resumed", "stopping", "queued"):  # `queued`: a call waits for its endpoint (`nodes.events`)
            yield Emit(kind, {key: value for key, value in part.items() if key != "event"})

    async def restart(self, rows: list[dict]) -> tuple[dict[str, Any], set[int]] | None:
        """Go on from the boundary after the last turn whose `message` event was stored (a turn under way is
        asked again), with what the boundaries had taken in (their `human`, `resumed` and `stopping` events);
        start over when not even the opponent's `init` was."""
        opening = next((row for row in rows if row["event"] == "init"), None)
        if opening is None:
            return None
        told = [row for row in rows if row["event"] in RECORDED]
        self.opponent, self.messages = store.progress(rows)
        last = told[-1]["seq"] if told else opening["seq"]
        graph_input = {**self.graph_input(), "opponent_profile": self.opponent, **steered(told)}
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
            Emit("synthesis", synthesis, partial(store.complete_debate, self.services.db, debate_id=self.run_id,
                                                 opponent_profile=state.get("opponent_profile") or self.opponent,
                                                 synthesis=synthesis, verdicts=verdicts, messages=messages,
                                                 stopped_by=stopped_by)),
            Emit("done", done),
        ], result={"winner": synthesis.get("winner"), "messages": len(turns), **early}, stopped_by=stopped_by)

    async def failed(self, exc: BaseException, ledger: UsageLedger) -> Outcome:
        error = exc.error if isinstance(exc, RunFailure) else {"message": debate_failure_message(exc), "status": 500}
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
