"""What a mode tells the engine: its graph, context and input; how its stream parts become its wire events;
and what it stores when the run ends (completed, failed or cancelled)."""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel
from pymongo.asynchronous.database import AsyncDatabase

from parley.core.settings import Settings
from parley.llm.factory import ModelFactory
from parley.llm.usage import UsageLedger
from parley.nodes.context import RunContext
from parley.runs.tools import WorkspaceTools
from parley.store.response_cache import SHARED as SHARED_CACHE
from parley.store.response_cache import ResponseCache

# One response cache per database, workspace and user: the model factory keeps a client per cache it is given.
_CACHES: weakref.WeakKeyDictionary[AsyncDatabase, dict[tuple[str, str | None], ResponseCache]] = \
    weakref.WeakKeyDictionary()


def response_cache(db: AsyncDatabase, workspace: str, user: str | None = None) -> ResponseCache:
    """The response cache of `user`'s runs in `workspace` (None: the one every user of the workspace shares), the
    same object for every run of theirs."""
    caches = _CACHES.setdefault(db, {})
    if (workspace, user) not in caches:
        caches[workspace, user] = ResponseCache(db, scope=workspace, user=user)
    return caches[workspace, user]


# Bill a run that ends (its record, what its model calls used): record its usage, settle what was reserved for it;
# return the token allowance left (None: unlimited, or not charged). `services.billing.settle` is Parley's.
Settle = Callable[[AsyncDatabase, dict[str, Any], UsageLedger], Awaitable[int | None]]


@dataclass(frozen=True)
class Services:
    """What a mode may use while it runs: the database, the model factory, the deployment settings, and how the
    run is billed when it ends (`settle`, given to the engine: runs/ knows no billing rules)."""

    db: AsyncDatabase
    factory: ModelFactory
    settings: Settings
    settle: Settle


@dataclass
class Emit:
    """A wire event, and the change to the mode's own records that is stored before anyone sees it. A `durable`
    event is stored before anyone sees it too (with nothing else to store: the event log is its record)."""

    event: str
    data: dict[str, Any]
    store: Callable[[], Awaitable[Any]] | None = None
    durable: bool = False


@dataclass
class Outcome:
    """How a run ended: its status, closing events, the result stored on the run, or its error.

    `error` is `{"message", "status", "code"?, ...}`: the HTTP layer answers a client waiting for the run
    with that status and body. `stopped_by` says why a completed run went to its synthesis early (stored on the
    run record as `stoppedBy`).
    """

    status: str
    events: list[Emit] = field(default_factory=list)
    result: Any = None
    error: dict[str, Any] | None = None
    stopped_by: str | None = None  # why a completed run went to its synthesis early (`nodes.steer`)


class RunFailure(RuntimeError):
    """A run that cannot go on, with what the client should be told."""

    def __init__(self, message: str, *, status: int = 500, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.error = {"message": message, "status": status, **({"code": code} if code else {}), **extra}


_DURABLE: weakref.WeakKeyDictionary[BaseCheckpointSaver, dict[str, Pregel]] = weakref.WeakKeyDictionary()


def with_checkpointer(graph: Pregel, checkpointer: BaseCheckpointSaver | None) -> Pregel:
    """A mode's module-level `graph` saving its checkpoints with `checkpointer` (a copy, made once per saver);
    the graph itself when there is none (a mode that is not `checkpointed`)."""
    if checkpointer is None:
        return graph
    copies = _DURABLE.setdefault(checkpointer, {})
    if graph.name not in copies:
        copies[graph.name] = graph.copy(update={"checkpointer": checkpointer})
    return copies[graph.name]


class ModeRun(ABC):
    """One run of one mode, as the engine drives it.

    The engine builds a fresh instance for each execution (a resumed run gets a new one), so what an
    instance keeps is only what it saw in this execution's stream.
    """

    kind: ClassVar[str]
    stream_mode: ClassVar[tuple[str, ...]] = ("custom",)
    first_seq: ClassVar[int] = 0  # the number of the run's first event (the SSE `id:` clients see first)
    # Whether the run saves a LangGraph checkpoint after each step. A mode whose runs are short (a panel request
    # takes about a second) does not: a run resumed after its worker died starts over (its events retracted),
    # and it asks the database for nothing but its events, usage and records.
    checkpointed: ClassVar[bool] = True
    # Seconds between the batches in which its events are stored (at once for a record change, or when LangGraph
    # waits to save a step): how late a listener on another worker sees them.
    store_every: ClassVar[float] = 0.25
    # Whether a person may steer its runs (`POST /v1/runs/{id}/input`): its graph has boundaries (`nodes.steer`).
    steerable: ClassVar[bool] = True

    def __init__(self, record: dict[str, Any], services: Services) -> None:
        self.record = record
        self.run_id: str = record["_id"]
        self.input: dict[str, Any] = record["input"]
        self.services = services

    @classmethod
    def steers(cls, record: dict[str, Any]) -> bool:
        """Whether this run takes inputs from a person (the mode's `steerable`, unless one run's graph differs)."""
        return cls.steerable

    async def settle(self, ledger: UsageLedger) -> int | None:
        """Bill the run for what `ledger` recorded: its usage rows, and what was reserved for it settled to what it
        used (`Services.settle`); return the token allowance left (None: unlimited, or not charged)."""
        return await self.services.settle(self.services.db, self.record, ledger)

    def tool_access(self, *, conversation_id: str | None = None) -> WorkspaceTools:
        """The tools the run's speakers were granted in its workspace (`RunContext.tools`)."""
        return WorkspaceTools(self.services.db, self.services.settings, self.record["workspace"],
                              conversation_id=conversation_id)

    @abstractmethod
    def graph(self, checkpointer: BaseCheckpointSaver | None) -> Pregel:
        """The mode's compiled graph, saving its checkpoints with `checkpointer` (None: saving none)."""

    @abstractmethod
    def context(self, ledger: UsageLedger) -> RunContext:
        """The run context, billing every model call to `ledger`."""

    def knobs(self, context: RunContext) -> RunContext:
        """`context` with the model knobs the request stored in the run's input: the reasoning effort of its seats
        (`reasoning`: seat, label or model id → effort) and, when it opted in (`steer.responseCache`), the response
        cache (`store.response_cache`) of the run's user, or the workspace's shared one (`"workspace"`)."""
        if reasoning := self.input.get("reasoning"):
            context.reasoning = {**context.reasoning, **reasoning}
        if cache := (self.input.get("steer") or {}).get("responseCache"):
            user = None if cache == SHARED_CACHE else self.record.get("user") or ""
            context.response_cache = response_cache(self.services.db, self.record["workspace"], user)
        return context

    async def prepare(self) -> None:
        """Read what the run's input refers to rather than holds, before its graph starts (each execution)."""

    @abstractmethod
    def graph_input(self) -> dict[str, Any]:
        """The graph's input when the run starts (a resumed run continues from its checkpoint instead)."""

    def opening(self) -> list[Emit]:
        """Events that open the run, before anything its graph sends (not repeated when a run resumes)."""
        return []

    @abstractmethod
    def translate(self, mode: str, part: Any) -> Iterable[Emit]:
        """The wire events for one part of the graph's stream (`mode` is one of `stream_mode`)."""

    async def resumed(self, state: dict[str, Any]) -> None:
        """Bring the mode's records in line with the checkpoint a resumed run continues from."""

    async def restart(self, rows: list[dict]) -> tuple[dict[str, Any], set[int]] | None:
        """Where a run of a mode that is not `checkpointed` goes on after its worker stopped, from `rows`, the
        events its earlier executions stored (void ones left out): the graph's input, continuing from what
        those events tell, and the numbers of the events that stand (the others are retracted). The mode brings
        its records in line. None (the default): the run starts over, and all its events are retracted."""
        return None

    @abstractmethod
    async def completed(self, state: dict[str, Any], ledger: UsageLedger) -> Outcome:
        """Store what the finished run produced (its final graph `state`); return its closing events."""

    @abstractmethod
    async def failed(self, exc: BaseException, ledger: UsageLedger) -> Outcome:
        """Store the failure; return the closing events."""

    @abstractmethod
    async def cancelled(self, ledger: UsageLedger) -> Outcome:
        """Store what was done before the run was cancelled; return the closing events."""
