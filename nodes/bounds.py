"""Length bounds for structured outputs: told to the model, enforced by cutting, never by refusing.

The bound goes into the JSON Schema (`maxLength`, `maxItems`), so the model reads it and a
grammar-constrained server (llama.cpp) cannot exceed it; a provider that ignores it gets its answer
cut to size rather than thrown away.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StringConstraints


def _cut(limit: int):
    def cut(value: Any) -> Any:
        return value[:limit] if isinstance(value, str | list) else value

    return BeforeValidator(cut)


def Clipped(max_chars: int) -> Any:  # noqa: N802 - used like a type: `summary: Clipped(400)`
    """A string of at most `max_chars` characters."""
    return Annotated[str, _cut(max_chars), StringConstraints(max_length=max_chars)]


def AtMost(max_items: int, item: Any) -> Any:  # noqa: N802 - used like a type: `risks: AtMost(4, Clipped(120))`
    """A list of at most `max_items` items."""
    return Annotated[list[item], _cut(max_items), Field(max_length=max_items)]
