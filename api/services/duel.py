"""Running duels for the HTTP API: the graph run in the background, its persistence, and its event fan-out.

A debate runs as a background task owned by the app, not by the request that started it: the
POST's SSE stream and any `GET /api/debate/{id}/events` listener follow the run's event log, so a
client that disconnects loses nothing and can re-attach with `Last-Event-ID`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import openai
from fastapi import FastAPI
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from api.sse import KEEPALIVE_SECONDS, Event
from core.metrics import record_run
from core.telemetry import trace_config
from store import debates as store
from store.usage import record_usage
from graphs.duel import DuelContext, graph
from nodes.duel import TurnInterrupted
from nodes.models import ModelError, ModelFactory

log = logging.getLogger("parley.duel")

HEARTBEAT_SECONDS = 10.0
STALE_AFTER_SECONDS = 45.0  # several missed heartbeats: the owning process is gone
POLL_SECONDS = 0.25  # how often a listener re-reads a debate another process is running
FLUSH_EVERY = 64  # chunk events are stored in batches, at least at every message
TERMINAL = ("done", "error")
INTERRUPTED = "Debate interrupted: the server running it stopped"


class DebateStartError(RuntimeError):
    """The debate could not be set up (no usable model, database refused the record)."""


class DebateNotFound(LookupError):
    """No such debate for this caller."""


@dataclass
class DebateRequest:
    """A validated `POST /api/debate` body."""

    topic: str
    user_profile: dict
    rounds: int | None = None


@dataclass
class Caller:
    """Who asked: the key's user and workspace."""

    user: str
    workspace: str


@dataclass
class DebateRun:
    """One debate running in this process: its numbered events, and the listeners waiting for more.

    Events get their sequence number when added. Most become visible to listeners at once; a
    gated one (init, message, synthesis) only once it is stored, and everything after it waits
    behind it, so a listener never sees what the database does not yet hold.
    """

    id: str
    caller: Caller
    topic: str
    stream_token: str
    events: list[Event] = field(default_factory=list)
    visible: int = 0  # events[:visible] may be sent
    saved: int = 0  # events[:saved] are stored
    gates: deque[int] = field(default_factory=deque)  # seqs held back until stored
    finished: bool = False
    _wakeup: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, name: str, data: dict[str, Any], *, gate: bool = False) -> Event:
        event = Event(name, data, seq=len(self.events))
        self.events.append(event)
        if gate:
            self.gates.append(event.seq)
        self.show()
        return event

    def stored(self, upto: int) -> None:
        """Note that events[:upto] are stored, opening their gates."""
        self.saved = max(self.saved, upto)
        while self.gates and self.gates[0] < self.saved:
            self.gates.popleft()
        self.show()

    def show(self) -> None:
        limit = self.gates[0] if self.gates else len(self.events)
        if limit > self.visible:
            self.visible = limit
            self._wake()

    def finish(self) -> None:
        self.gates.clear()
        self.finished = True
        self.visible = len(self.events)
        self._wake()

    def _wake(self) -> None:
        wakeup, self._wakeup = self._wakeup, asyncio.Event()
        wakeup.set()

    async def follow(self, after: int = -1) -> AsyncIterator[list[Event]]:
        """Yield the events after sequence number `after`, then new ones as they come, until the run ends.

        Events come in batches: whatever became visible since the listener last looked.
        """
        index = after + 1
        while True:
            if index < self.visible:
                batch, index = self.events[index:self.visible], self.visible
                yield batch
                continue
            if self.finished:
                return
            await self._wakeup.wait()


class StorageWriter:
    """Store a run's events and record changes in order, off the path of the graph.

    LangGraph advances a run only while its stream is read, so the loop reading it must never wait
    on the database; writes queue here instead, and each opens its events' gates when done.
    """

    def __init__(self, db: AsyncDatabase, run: DebateRun) -> None:
        self.db, self.run = db, run
        self.queued = 0  # events[:queued] are covered by a queued write
        self._jobs: asyncio.Queue[tuple[int, Callable[[], Awaitable[Any]] | None] | None] = asyncio.Queue()
        self._task = asyncio.create_task(self._loop(), name=f"store {run.id}")

    def write(self, change: Callable[[], Awaitable[Any]] | None = None) -> None:
        """Store every event added so far, together with `change()` to the debate record."""
        self.queued = len(self.run.events)
        self._jobs.put_nowait((self.queued, change))

    def check(self) -> None:
        """Raise the storage failure, if a write failed."""
        if self._task.done() and not self._task.cancelled():
            self._task.result()

    async def close(self) -> None:
        """Finish the queued writes (raising a storage failure)."""
        self._jobs.put_nowait(None)
        await self._task

    def cancel(self) -> None:
        self._task.cancel()

    async def _loop(self) -> None:
        while (job := await self._jobs.get()) is not None:
            upto, change = job
            rows = [{"seq": e.seq, "event": e.event, "data": e.data} for e in self.run.events[self.run.saved:upto]]
            await asyncio.gather(store.append_events(self.db, debate_id=self.run.id, events=rows),
                                 *([change()] if change is not None else []))
            self.run.stored(upto)


def new_debate_id() -> str:
    """`debate_<ms>_<random>`, the seed's format."""
    return f"debate_{int(time.time() * 1000)}_{secrets.token_hex(4)}"


def describe_failure(exc: BaseException) -> str:
    """What to tell the client about a failed debate, without leaking internals."""
    cause = exc.__cause__ if isinstance(exc, TurnInterrupted) and exc.__cause__ else exc
    if isinstance(cause, openai.APITimeoutError):
        detail = "the model timed out"
    elif isinstance(cause, openai.APIConnectionError):
        detail = "the model could not be reached"
    elif isinstance(cause, openai.APIStatusError):
        detail = f"the model answered HTTP {cause.status_code}"
    elif isinstance(cause, ValueError):
        detail = "the model's answer could not be used"
    else:
        detail = "an internal error"
    return f"Debate generation failed: {detail}"


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
        eventsUrl=f"/api/debate/{record['_id']}/events?token={record.get('streamToken', '')}",
    )
    return view


class DuelService:
    """Starts duels, runs them to the end whoever is listening, and serves their stored events."""

    def __init__(self, db: AsyncDatabase, factory: ModelFactory, background: set[asyncio.Task]) -> None:
        self.db, self.factory, self.background = db, factory, background
        self.owner = {"instance": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid()}
        self.runs: dict[str, DebateRun] = {}
        self.keepalive: float = KEEPALIVE_SECONDS

    # --- starting and running ----------------------------------------------------------------

    async def start(self, caller: Caller, request: DebateRequest) -> DebateRun:
        """Store a new debate and start running it in the background; return the live run."""
        context = DuelContext(models=self.factory)
        rounds = request.rounds or context.rounds
        try:
            model = self.factory.resolve(context.model).model_id
            debate_id = new_debate_id()
            token = secrets.token_urlsafe(18)
            await store.create_debate(
                self.db, debate_id=debate_id, user=caller.user, workspace=caller.workspace, topic=request.topic,
                user_profile=request.user_profile, rounds=rounds, model=model, owner=self.owner, stream_token=token,
            )
        except (ModelError, PyMongoError) as exc:
            raise DebateStartError(str(exc)) from exc
        run = DebateRun(debate_id, caller, request.topic, token)
        self.runs[debate_id] = run
        inputs = {"topic": request.topic, "user_profile": request.user_profile, "rounds": rounds}
        task = asyncio.create_task(self._run(run, inputs, context), name=f"duel {debate_id}")
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return run

    async def _run(self, run: DebateRun, inputs: dict, context: DuelContext) -> None:
        beat = asyncio.create_task(self._heartbeat(run.id))
        writer = StorageWriter(self.db, run)
        try:
            await self._drive(run, inputs, context, writer)
            await writer.close()
            record_run("duel", "completed")
        except asyncio.CancelledError:
            writer.cancel()
            record_run("duel", "failed")
            await self._fail(run, INTERRUPTED, log_exc=False)
            raise
        except Exception as exc:  # the top of a background task: record the failure, tell the listeners
            log.exception("debate %s failed", run.id)
            record_run("duel", "failed")
            try:
                await writer.close()
            except PyMongoError:
                log.exception("debate %s could not be stored", run.id)
            await self._fail(run, describe_failure(exc))
        finally:
            beat.cancel()
            try:  # before the listeners learn the debate is over, so whoever reads next finds its usage
                await record_usage(self.db, workspace=run.caller.workspace, user=run.caller.user,
                                   request_id=run.id, mode="duel", ledger=context.ledger)
            except PyMongoError:
                log.exception("usage of debate %s could not be stored", run.id)
            run.finish()
            self.runs.pop(run.id, None)

    async def _drive(self, run: DebateRun, inputs: dict, context: DuelContext, writer: StorageWriter) -> None:
        messages: list[dict] = []
        verdicts: list[dict] = []
        synthesis: dict | None = None
        speaking: str | None = None  # role of the turn under way, so a retried turn is announced once
        config = trace_config(run.id, "duel", run.caller.workspace, run.caller.user)
        async for mode, payload in graph.astream(inputs, config, context=context, stream_mode=["custom", "updates"]):
            writer.check()
            if mode == "custom":
                kind = payload.get("event")
                if kind == "chunk":
                    run.add("chunk", {"role": payload["role"], "content": payload["content"]})
                    if len(run.events) - writer.queued >= FLUSH_EVERY:
                        writer.write()
                elif kind == "start" and speaking != payload["role"]:
                    speaking = payload["role"]
                    run.add("start", {"role": payload["role"], "name": payload["name"]})
                elif kind == "message":
                    speaking = None
                    message = {key: payload[key] for key in ("role", "name", "content", "timestamp")}
                    messages.append(message)
                    run.add("message", message, gate=True)
                    writer.write(partial(store.append_message, self.db, debate_id=run.id, message=message))
                elif kind == "synthesizing":
                    run.add("synthesizing", {})
            elif "select_opponent" in payload:
                opponent = payload["select_opponent"]["opponent_profile"]
                run.add("init", {"id": run.id, "topic": inputs["topic"], "userProfile": inputs["user_profile"],
                                 "opponentProfile": opponent}, gate=True)
                writer.write(partial(store.set_opponent, self.db, debate_id=run.id, opponent_profile=opponent))
            elif "judge" in payload:
                verdicts += payload["judge"]["verdicts"]
            elif "synthesize" in payload:
                synthesis = payload["synthesize"]["synthesis"]
        if synthesis is None:
            raise RuntimeError("the duel graph ended without a synthesis")
        verdicts.sort(key=lambda verdict: verdict["order"] != "as_debated")
        run.add("synthesis", synthesis, gate=True)
        run.add("done", {"id": run.id, "topic": inputs["topic"], "messages": messages, "synthesis": synthesis})
        writer.write(partial(store.complete_debate, self.db, debate_id=run.id, synthesis=synthesis,
                             verdicts=verdicts))

    async def _fail(self, run: DebateRun, message: str, *, log_exc: bool = True) -> None:
        run.add("error", {"message": message})
        rows = [{"seq": e.seq, "event": e.event, "data": e.data} for e in run.events[run.saved:]]
        try:
            await store.fail_debate(self.db, debate_id=run.id, error=message)
            await store.append_events(self.db, debate_id=run.id, events=rows)
            run.stored(len(run.events))
        except PyMongoError:
            if log_exc:
                log.exception("failure of debate %s could not be stored", run.id)

    async def _heartbeat(self, debate_id: str) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                await store.heartbeat(self.db, debate_ids=[debate_id])
            except PyMongoError as exc:
                log.warning("heartbeat of debate %s failed: %s", debate_id, exc)

    # --- reading -----------------------------------------------------------------------------

    async def get(self, caller: Caller, debate_id: str) -> dict:
        """The caller's debate, as stored."""
        record = await store.get_debate(self.db, debate_id=debate_id, user=caller.user, workspace=caller.workspace)
        if record is None:
            raise DebateNotFound(debate_id)
        return await self._expire_if_stale(record)

    async def list(self, caller: Caller, *, limit: int, cursor: str | None, page: int | None) -> dict:
        """One page of the caller's debates, newest first."""
        await self.expire_stale(check_processes=False)
        rows, next_cursor, total = await store.list_debates(
            self.db, user=caller.user, workspace=caller.workspace, limit=limit, cursor=cursor, page=page,
        )
        body: dict[str, Any] = {"debates": [public_debate(r, summary=True) for r in rows],
                                "nextCursor": next_cursor, "total": total, "limit": limit}
        if page and not cursor:
            body["page"] = page
        return body

    async def authorise_events(self, debate_id: str, *, caller: Caller | None, token: str | None) -> dict:
        """The debate whose events may be read by `caller` (its owner) or with its stream `token`."""
        if caller is not None:
            record = await store.get_debate(self.db, debate_id=debate_id, user=caller.user,
                                            workspace=caller.workspace)
        else:
            record = await store.get_debate(self.db, debate_id=debate_id)
            if record is not None and not secrets.compare_digest(record.get("streamToken") or "", token or ""):
                record = None
        if record is None:
            raise DebateNotFound(debate_id)
        return record

    async def events(self, record: dict, *, after: int = -1) -> AsyncIterator[list[Event]]:
        """Replay a debate's events after `after`, then follow it live until it ends (in batches)."""
        run = self.runs.get(record["_id"])
        if run is not None:
            async for batch in run.follow(after):
                yield batch
            return
        # Not running here: what is stored, then whatever a sibling process running it adds.
        while True:
            rows = await store.events_after(self.db, debate_id=record["_id"], after=after)
            if rows:
                end = next((i + 1 for i, row in enumerate(rows) if row["event"] in TERMINAL), len(rows))
                yield [Event(row["event"], row["data"], seq=row["seq"]) for row in rows[:end]]
                if end < len(rows) or rows[end - 1]["event"] in TERMINAL:
                    return
                after = rows[-1]["seq"]
                continue
            current = await store.get_debate(self.db, debate_id=record["_id"])
            if current is None:
                return
            if current["status"] != store.IN_PROGRESS:
                # Ended between our two reads: take what it stored last, then stop.
                rows = await store.events_after(self.db, debate_id=record["_id"], after=after)
                if rows:
                    yield [Event(row["event"], row["data"], seq=row["seq"]) for row in rows]
                return
            await self._expire_if_stale(current)
            await asyncio.sleep(POLL_SECONDS)

    # --- stale debates -----------------------------------------------------------------------

    async def _expire_if_stale(self, record: dict) -> dict:
        """Mark a debate `failed` if it is `in_progress` but its process stopped beating; return it fresh."""
        if record["status"] != store.IN_PROGRESS or record["_id"] in self.runs:
            return record
        if record["heartbeatAt"] >= store.stale_cutoff(STALE_AFTER_SECONDS):
            return record
        if await store.fail_debate(self.db, debate_id=record["_id"], error=INTERRUPTED):
            await self._close_event_log(record["_id"])
        return await store.get_debate(self.db, debate_id=record["_id"]) or record

    async def expire_stale(self, *, check_processes: bool = True) -> list[str]:
        """Mark the debates whose process is gone as `failed`; return their ids.

        Gone means no heartbeat for `STALE_AFTER_SECONDS`, or (with `check_processes`, as at
        start-up) an owning process on this host that no longer runs.
        """
        dead = []
        for owner in await store.in_progress_owners(self.db) if check_processes else []:
            if owner.get("instance") == self.owner["instance"] or owner.get("host") != self.owner["host"]:
                continue
            pid = owner.get("pid")
            # Our own pid under another instance id is a predecessor whose pid was reused (containers).
            if isinstance(pid, int) and (pid == self.owner["pid"] or not _pid_alive(pid)):
                dead.append({"host": owner["host"], "pid": pid, "instance": owner.get("instance")})
        marked = await store.mark_stale_failed(
            self.db, stale_before=store.stale_cutoff(STALE_AFTER_SECONDS), dead_owners=dead, error=INTERRUPTED,
        )
        for debate_id in marked:
            await self._close_event_log(debate_id)
        if marked:
            log.warning("marked %d debate(s) left by a stopped process as failed", len(marked))
        return marked

    async def _close_event_log(self, debate_id: str) -> None:
        """End a dead debate's stored events with an `error`, so replays end the way live streams do."""
        seq = await store.last_seq(self.db, debate_id=debate_id) + 1
        await store.append_events(
            self.db, debate_id=debate_id, events=[{"seq": seq, "event": "error", "data": {"message": INTERRUPTED}}]
        )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


async def on_startup(app: FastAPI) -> None:
    """Create the app's duel service and fail the debates that a dead Parley process left `in_progress`."""
    service = DuelService(app.state.db, app.state.factory, app.state.background)
    app.state.duel = service
    await service.expire_stale()
