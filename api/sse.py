"""Server-Sent Events responses: numbered events, keep-alive comments, and the seed's headers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence

from sse_starlette import EventSourceResponse, ServerSentEvent

from runs.events import Event

KEEPALIVE_SECONDS = 15
SSE_HEADERS = {"Cache-Control": "no-cache", "Connection": "keep-alive", "X-Accel-Buffering": "no"}


def to_sse(event: Event) -> ServerSentEvent:
    """One run event as SSE: `id:` its sequence number, `event:` its name, `data:` its compact JSON."""
    return ServerSentEvent(
        data=json.dumps(event.data, ensure_ascii=False, separators=(",", ":")),
        event=event.event,
        id=None if event.seq is None else str(event.seq),
    )


def sse_response(
    events: AsyncIterator[Event | Sequence[Event]], *, keepalive: float = KEEPALIVE_SECONDS,
    headers: dict[str, str] | None = None,
) -> EventSourceResponse:
    """Stream `events` as `text/event-stream`, with a `: ping` comment every `keepalive` seconds of silence.

    An item may be a batch of events that were ready together (a listener catching up); a batch
    goes out in one write, which matters when many streams share one busy worker.
    """

    async def render() -> AsyncIterator[ServerSentEvent | bytes]:
        async for item in events:
            if isinstance(item, Event):
                yield to_sse(item)
            else:
                yield b"".join(to_sse(event).encode() for event in item)

    return EventSourceResponse(render(), ping=keepalive, headers={**SSE_HEADERS, **(headers or {})})
