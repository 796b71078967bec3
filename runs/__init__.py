"""Runs: one durable way for every mode to execute its graph, stream and store its events, and resume after a crash.

`RunEngine` (in `runs.engine`) is the engine each worker runs, given the modes it drives (`runs.modes` says
what each mode does with it) and how a run is billed when it ends. The services (`services/`) start runs
through it, and the HTTP layer and the CLI follow them; it knows graphs and pymongo, never FastAPI, nor
anything of `services/` or `api/`.
"""

from parley.runs.engine import Caller, RunEngine
from parley.runs.events import TERMINAL, Event
from parley.runs.following import RunNotFound
from parley.runs.modes.base import RunFailure

__all__ = ["TERMINAL", "Caller", "Event", "RunEngine", "RunFailure", "RunNotFound"]
