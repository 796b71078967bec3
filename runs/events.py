"""A run's events as listeners see them: numbered, terminal ones, and what a resumed run voids.

When a worker dies in the middle of a turn, the worker that resumes the run streams that turn again from
its start. The events the unfinished turn had sent are then void: they are kept in the log (marked),
a `retract` event lists them, and each listener is shown a view of the log in which

- an event it has not seen yet and that is void is skipped, and
- a `retract` is shown only when the listener saw some of the events it lists (only those are listed),

so a client that applies `retract` (drop the listed events) ends up with every message exactly once and
each turn's chunks equal to its message, and a client that connects later never sees void events at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

TERMINAL = ("done", "error", "cancelled")
RETRACT = "retract"
STORAGE_UNAVAILABLE = "storage_unavailable"


@dataclass(frozen=True)
class Event:
    """One event of a run: its name, JSON payload and sequence number (the SSE `id:`)."""

    event: str
    data: dict[str, Any]
    seq: int | None = None

    @property
    def terminal(self) -> bool:
        return self.event in TERMINAL


class Signal:
    """Wakes every coroutine waiting for the next change (a wait sees only changes made after it began)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self) -> None:
        await self._event.wait()


def listener_view(rows: Iterable[dict], *, after: int) -> list[Event]:
    """The stored rows (`{seq, event, data, void?}`, in order, all after `after`) as a listener who has
    seen everything up to `after` should get them."""
    shown = []
    for row in rows:
        if row.get("void"):
            continue
        if row["event"] == RETRACT:
            seen = [seq for seq in row["data"]["seqs"] if seq <= after]
            if not seen:
                continue
            shown.append(Event(RETRACT, {**row["data"], "seqs": seen}, row["seq"]))
            continue
        shown.append(Event(row["event"], row["data"], row["seq"]))
    return shown


def storage_failure() -> Event:
    """The `error` that ends a listener's stream when the database fails. It has no id and is not stored: the
    run is resumed once storage is back, and a listener that reconnects with the last id it saw reads on."""
    message = "Storage is unavailable: this stream ends; the run resumes once the database is back"
    return Event("error", {"message": message, "code": STORAGE_UNAVAILABLE, "status": 503})
