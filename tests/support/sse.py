"""Parse Server-Sent Events in tests: from a whole body, or incrementally from an httpx streaming response."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SseEvent:
    """One dispatched event: its name (`message` when none was given), data, id, and comments seen before it."""

    event: str
    data: str
    id: str | None = None
    comments: list[str] = field(default_factory=list)

    def json(self) -> Any:
        return json.loads(self.data)


class SseParser:
    """The WHATWG event-stream algorithm, fed line by line; comments (`: ping`) are kept for inspection."""

    def __init__(self) -> None:
        self._event, self._data, self._id, self._comments = "", [], None, []
        self.comments: list[str] = []

    def feed_line(self, line: str) -> SseEvent | None:
        line = line.rstrip("\r\n")
        if line == "":
            if not self._data and not self._event:
                return None
            event = SseEvent(self._event or "message", "\n".join(self._data), self._id, self._comments)
            self._event, self._data, self._comments = "", [], []
            return event
        if line.startswith(":"):
            comment = line[1:].strip()
            self._comments.append(comment)
            self.comments.append(comment)
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None


def parse_sse(text: str) -> list[SseEvent]:
    """Every event in a complete event-stream body."""
    parser = SseParser()
    events = [parser.feed_line(line) for line in text.replace("\r\n", "\n").split("\n")]
    tail = parser.feed_line("")
    return [e for e in [*events, tail] if e is not None]


def iter_sse(lines: Iterable[str], parser: SseParser | None = None) -> Iterator[SseEvent]:
    """Events as they arrive, from `response.iter_lines()` of an httpx streaming response."""
    parser = parser or SseParser()
    for line in lines:
        event = parser.feed_line(line)
        if event is not None:
            yield event
