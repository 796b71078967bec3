"""A run's inbox: what a person sent a running debate (a message, or an action), as the run engine delivers it.

The engine stores each input before it acknowledges it, and delivers the stored inputs of a run to the
`Steering` of the run's context: at the start of every execution (a resumed run gets again what it had not
consumed) and whenever a new one is stored. Graph nodes never take an input out of the inbox: the boundary
node (`nodes.steer`) reads the inputs that its graph's state does not list as consumed, and writes the ones
it consumed into the state, so that each is applied exactly once, whichever worker runs the graph.

An input, as delivered:

    {"id": "in_...", "content": "...", "action": "guide", "user": "ada", "at": "2026-...Z"}

`action` is one of `ACTIONS` or absent (a plain message); `content` is there for a message and for `guide`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Action = Literal["continue", "guide", "end", "pause"]
ACTIONS: tuple[str, ...] = ("continue", "guide", "end", "pause")
# Actions that let a waiting run go on (`end`: to its synthesis).
RELEASES: tuple[str, ...] = ("continue", "guide", "end")
# Where a run may be told to wait (`await` on a run): after each duel turn, after each round.
Boundary = Literal["after_turn", "after_round"]
BOUNDARIES: tuple[str, ...] = ("after_turn", "after_round")


@dataclass
class Steering:
    """A run's steering: where it waits by itself (`await_at`), and the inputs delivered to it, in the order
    they were stored."""

    await_at: str | None = None
    inbox: list[dict[str, Any]] = field(default_factory=list)

    def deliver(self, inputs: Iterable[Mapping[str, Any]]) -> int:
        """Add inputs not delivered yet (known by id), keeping the stored order; return how many were new."""
        known = {row["id"] for row in self.inbox}
        new = [dict(row) for row in inputs if row["id"] not in known]
        if new:
            self.inbox = sorted([*self.inbox, *new], key=order)
        return len(new)

    def pending(self, consumed: Iterable[str]) -> list[dict[str, Any]]:
        """The inputs delivered and not consumed (`consumed`: the ids a graph's state lists), in order."""
        done = set(consumed)
        return [row for row in self.inbox if row["id"] not in done]


def order(row: Mapping[str, Any]) -> tuple[str, str]:
    """Inputs go in the order they were stored: their time, then their id (increasing within a worker)."""
    return (str(row.get("at") or ""), row["id"])
