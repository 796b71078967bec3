"""Stopping the runs this worker executes: why each was told to stop, its task cancelled (again when a cancellation
is lost in the graph), and no model call started once it was told (`StopGuard`).

A cancel request stops the run's graph, and with it its model calls, at once on the worker executing it and within a
heartbeat from any other (the lease renewal reads the requests); a run whose cancel was recorded ends `cancelled` (the
end of a run is claimed before it is stored, see `store.runs.conclude`). A run past its deadline
(`PARLEY_RUN_DEADLINE`) is stopped and stored `failed` (`run_deadline`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from parley.llm.guards import CallRefused, Guard
from parley.runs.held import HeldRuns

# Why a run stops that is delivered again if the run goes on (see `Stops.still_running`).
REPEATED = ("cancel", "deadline", "failed", "storage")


class RunStopped(CallRefused):
    """A model call refused because its run was told to stop (cancelled, past its deadline, ...)."""


class Stops:
    """Why each run this worker executes was told to stop (the first reason given stands): `cancel`, `deadline`,
    `failed` (its mode refused to go on), `storage`, `lost` (another worker holds it) or `shutdown`; and the runs
    that nothing stops any more, their end being stored."""

    def __init__(self, held: HeldRuns) -> None:
        self.held = held
        self._reasons: dict[str, str] = {}  # run id → why its execution stops
        self._failures: dict[str, Exception] = {}  # run id → why its mode refused to go on
        self._closing: set[str] = set()  # runs whose graph has finished and whose outcome is being stored

    def stop(self, run_id: str, reason: str) -> None:
        """Stop executing a run here, for `reason` (the first one given stands): cancel its task."""
        task = self.held.task(run_id)
        if task is None or run_id in self._closing or run_id in self._reasons:
            return
        self._reasons[run_id] = reason
        task.cancel()

    def fail(self, run_id: str, exc: Exception) -> None:
        """Stop a run whose mode refused to go on, for it to end failed with `exc`."""
        self._failures[run_id] = exc
        self.stop(run_id, "failed")

    def mark(self, run_id: str, reason: str) -> None:
        """Note why a run stops whose execution stops itself (it raises `CancelledError` next)."""
        self._reasons[run_id] = reason

    def told(self, run_id: str) -> bool:
        """Whether the run was told to stop."""
        return run_id in self._reasons

    def reason(self, run_id: str) -> str | None:
        """Why the run was told to stop (None: it was not)."""
        return self._reasons.get(run_id)

    def failure(self, run_id: str) -> Exception:
        """Why the run's mode refused to go on (see `fail`)."""
        return self._failures[run_id]

    def still_running(self, run_id: str) -> None:
        """The run sent an event, or began a model call, after it was told to stop: its cancellation was lost in
        the graph's machinery (one that lands as a step's task returns can be), so deliver it again. Nothing
        is repeated for a hand-over (`lost`, `shutdown`), which must not be interrupted."""
        task = self.held.task(run_id)
        if task is not None and run_id not in self._closing and self._reasons.get(run_id) in REPEATED:
            task.cancel()

    def close(self, run_id: str) -> None:
        """Nothing stops this execution of the run from now on: it is storing how the run ends (or waits)."""
        self._closing.add(run_id)

    def reopen(self, run_id: str) -> None:
        """The run's end was not stored after all (see `close`): it may be stopped again."""
        self._closing.discard(run_id)

    def forget(self, run_id: str) -> None:
        """The run's execution here has ended."""
        self._reasons.pop(run_id, None)
        self._failures.pop(run_id, None)
        self._closing.discard(run_id)


class StopGuard(Guard):
    """Refuse to start a model call of a run that was told to stop.

    Stopping a run cancels its task; should that cancellation be lost on its way through the graph, a
    node could go on to its next model call. Every model call of a run inherits this callback, which
    refuses it with `RunStopped` (raised by the client before the request is sent, `llm.guards`; and delivers the stop
    again). A call answered from the response cache sends nothing, and is not refused. With `hold`, a call first
    awaits it (`RunEngine.leases_hold`: until the worker's lease renewals show that its leases still hold), so that
    no call starts under a lease that may have been taken over.
    """

    def __init__(self, stops: Stops, run_id: str, hold: Callable[[], Awaitable[None]] | None = None) -> None:
        self.stops, self.run_id, self.hold = stops, run_id, hold

    def _check(self) -> None:
        if self.stops.told(self.run_id):
            self.stops.still_running(self.run_id)
            raise RunStopped(f"run {self.run_id} was told to stop")

    async def on_chat_model_start(self, *args: Any, run_id: Any = None, **kwargs: Any) -> None:
        await self._held(run_id)

    async def on_llm_start(self, *args: Any, run_id: Any = None, **kwargs: Any) -> None:
        await self._held(run_id)

    async def _held(self, call: Any) -> None:
        try:
            self._check()
        except RunStopped as refusal:
            self.refuse(call, refusal)
            return
        if (hold := self.hold) is not None:

            async def held() -> None:  # awaited by the client, not in LangChain's dispatch (`llm.guards`)
                await hold()
                self._check()

            self.defer(call, held)
