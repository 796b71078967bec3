"""Which capability a graph's node (or router) is: the eight nodes of the design, each built by one factory in
`nodes/`, mark what they build, so a test can read which graphs use each one (docs/architecture.md's table).

A wrapper around a capability node (the designer's instrumentation, a node-type adapter) names the node it wraps as
its `__wrapped__`; `capability_of` follows that chain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

CAPABILITIES = ("speak", "select_opponent", "fan_out", "arbitrate", "judge", "score_convergence", "synthesize",
                "boundary")

F = TypeVar("F", bound=Callable[..., Any])


def mark(node: F, capability: str) -> F:
    """Mark `node` as built by the capability `capability` (one of `CAPABILITIES`) and return it."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown capability {capability!r}")
    node.capability = capability  # type: ignore[attr-defined]
    return node


def capability_of(fn: Any) -> str | None:
    """The capability `fn` is, or wraps (through `__wrapped__`); None when it is a mode's own step."""
    seen: set[int] = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        if (name := getattr(fn, "capability", None)) is not None:
            return name
        fn = getattr(fn, "__wrapped__", None)
    return None
