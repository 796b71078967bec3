"""Server-Sent Events responses: numbered events, keep-alive comments, and the duel contract's headers."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from parley.core.limits import INT64_MAX, INT64_MIN, MAX_EVENT_ID_DIGITS
from parley.core.metrics import sse_listener
from parley.runs import RunEngine
from parley.runs.events import Event

KEEPALIVE_SECONDS = 15
SSE_HEADERS = {"Cache-Control": "no-cache", "Connection": "keep-alive", "X-Accel-Buffering": "no"}


def to_sse(event: Event) -> ServerSentEvent:
    """One run event as SSE: `id:` its sequence number, `event:` its name, `data:` its compact JSON."""
    return ServerSentEvent(
        data=json.dumps(event.data, ensure_ascii=False, separators=(",", ":")),
        event=event.event,
        id=None if event.seq is None else str(event.seq),
    )


class CountedEventSourceResponse(EventSourceResponse):
    """An SSE response counted in the open-listeners gauge (by route template) for as long as it is open.

    The count wraps the whole ASGI call, which returns however the stream ends (finished, the client
    gone, the server shutting down), so a dropped client never leaves the gauge too high.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = getattr(scope.get("route"), "path", None) or scope.get("path", "")
        with sse_listener(route):
            await super().__call__(scope, receive, send)


# An event id: an integer, as `Last-Event-ID` (header) or `lastEventId` (query, for EventSource clients).
EVENT_ID_PATTERN = rf"^\s*-?[0-9]{{1,{MAX_EVENT_ID_DIGITS}}}\s*$"


def resume_after(request: Request, last_event_id: str | None) -> int:
    """The id after which a listener resumes (-1: from the start), from `Last-Event-ID` or `lastEventId`.

    Raises:
        ValueError: the id is not an integer MongoDB can compare (64 bits).
    """
    resume = request.headers.get("last-event-id") or last_event_id
    if resume in (None, ""):
        return -1
    if not re.fullmatch(EVENT_ID_PATTERN, resume) or not INT64_MIN <= int(resume) <= INT64_MAX:
        raise ValueError(resume)
    return int(resume)


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

    return CountedEventSourceResponse(render(), ping=keepalive, headers={**SSE_HEADERS, **(headers or {})})


class RunStream:
    """One client's stream of a run it started (a streamed chat completion or response): the run's events, and an SSE
    response that cancels the run when the client hangs up before its end (nobody reads the answer any more; the run
    still settles its credit for what was used).

    A stream ended by a storage failure (its `error` event has no id) leaves the run alone: it goes on once storage
    is back, and whoever follows its events (the Studio, `GET /v1/runs/{id}/events`) sees its end.
    """

    def __init__(self, engine: RunEngine, run_id: str) -> None:
        self.engine, self.run_id = engine, run_id
        self.storage_failed = False

    async def events(self) -> AsyncIterator[Event]:
        """The run's events from its first to its last."""
        async for batch in self.engine.follow(self.run_id):
            for event in batch:
                if event.event == "error":
                    self.storage_failed = event.seq is None
                yield event

    def response(self, body: AsyncIterator[ServerSentEvent], headers: dict[str, str]) -> EventSourceResponse:
        """`body` as `text/event-stream`, with keep-alive comments."""

        async def cancel_unfinished() -> None:
            if not self.storage_failed:
                await self.engine.cancel(self.run_id)  # a run that has ended is left as it is

        return CountedEventSourceResponse(body, ping=KEEPALIVE_SECONDS, headers={**SSE_HEADERS, **headers},
                                          background=BackgroundTask(cancel_unfinished))
