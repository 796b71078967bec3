"""A span recorder attached to every LangChain/LangGraph call in the test process, as LangSmith's tracer is.

LangChain adds its LangSmith tracer to each callback manager through a configure hook; this module
registers one the same way, so a test sees the runs (spans) a real tracer would receive, with their
names, tags and metadata, even from a Parley served on another thread. It records only while a
test holds the `spans` fixture.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.context import register_configure_hook


@dataclass
class Span:
    kind: str  # "chain" (graphs, nodes, runnables) or "chat_model"
    name: str | None
    run_id: Any
    parent_run_id: Any
    tags: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


class SpanRecorder(BaseCallbackHandler):
    """Keeps each run start it sees while recording."""

    run_inline = True  # called in the run's own thread and loop, never from an executor

    def __init__(self) -> None:
        self.recording = False
        self._spans: list[Span] = []
        self._lock = threading.Lock()

    @property
    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()

    def _add(self, kind: str, name: str | None, kwargs: dict[str, Any]) -> None:
        if not self.recording:
            return
        span = Span(kind, name, kwargs.get("run_id"), kwargs.get("parent_run_id"), list(kwargs.get("tags") or []),
                    dict(kwargs.get("metadata") or {}))
        with self._lock:
            self._spans.append(span)

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        self._add("chain", kwargs.get("name"), kwargs)

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self._add("chat_model", kwargs.get("name"), kwargs)


RECORDER = SpanRecorder()
# The variable's default is the recorder itself, so every thread and task sees it without setting it.
register_configure_hook(ContextVar("parley_test_span_recorder", default=RECORDER), inheritable=True)
