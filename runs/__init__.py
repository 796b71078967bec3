"""Runs: one durable way for every mode to execute its graph, stream and store its events, and resume after a crash.

`RunEngine` (in `runs.engine`) is the engine each worker runs; `runs.modes` says what each mode does
with it. The HTTP layer (`api/`) and the CLI (`cli/`) start and follow runs through it; it knows graphs
and pymongo, never FastAPI.
"""

from runs.engine import Caller, RunEngine, RunNotFound
from runs.events import TERMINAL, Event
from runs.modes.base import RunFailure

__all__ = ["TERMINAL", "Caller", "Event", "RunEngine", "RunFailure", "RunNotFound"]
