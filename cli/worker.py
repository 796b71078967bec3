"""One worker process of `parley serve --workers N`: its app, and nothing of the command line, so that a worker
imports only what serving needs and answers uvicorn's start-up check quickly on a loaded machine."""

from __future__ import annotations

import os

from parley.core.embedded import die_with

SERVE_PID = "PARLEY_SERVE_PID"  # set by `parley serve --workers N` for its workers


def worker_app():
    """The app of one worker of `parley serve --workers N`: it stops (SIGTERM) when serve dies, even killed hard."""
    set_death_signal = die_with(int(os.environ[SERVE_PID]))
    if set_death_signal is not None:
        set_death_signal()
    from parley.api.main import create_app

    return create_app()
