"""The runs this worker executes: each one's task, and when the lease its execution began with ends.

Changed on the event loop; the lease thread (`runs.leases.LeaseKeeper`) reads it only through `snapshot`, taken under
a lock, so a renewal never sees a run half added or half removed.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Holding:
    """A run this worker executes, as the lease thread sees it: its execution's task, and when the lease that
    execution began with (its start, take-over or wake) ends."""

    task: asyncio.Task
    lease_until: datetime | None


class HeldRuns:
    """The task executing each run this worker holds, and the end of the lease it began with."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task] = {}  # changed on the loop under `_lock`, read by the lease thread
        self._leases: dict[str, datetime | None] = {}  # run id → when its execution's first lease ends (same lock)
        self._lock = threading.Lock()

    def add(self, run_id: str, task: asyncio.Task, lease_until: datetime | None) -> None:
        with self._lock:
            self._tasks[run_id] = task
            self._leases[run_id] = lease_until

    def discard(self, run_id: str, task: asyncio.Task) -> None:
        """Forget the run, if `task` still executes it (not a later execution of it here)."""
        with self._lock:
            if self._tasks.get(run_id) is task:
                del self._tasks[run_id]
                self._leases.pop(run_id, None)

    def task(self, run_id: str) -> asyncio.Task | None:
        return self._tasks.get(run_id)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._tasks

    def ids(self) -> list[str]:
        return list(self._tasks)

    def tasks(self) -> list[asyncio.Task]:
        return list(self._tasks.values())

    def snapshot(self) -> dict[str, Holding]:
        """Each run with its task and its lease's end (called from the lease thread)."""
        with self._lock:
            return {run_id: Holding(task, self._leases.get(run_id)) for run_id, task in self._tasks.items()}
