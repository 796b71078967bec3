"""Parley's run engine: `runs.engine.RunEngine` driving every mode of Parley (`runs.modes.MODES`) and billing each
run with `services.billing.settle`. What the API's workers and the CLI run."""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from parley.runs.engine import RunEngine
from parley.runs.modes import MODES
from parley.services import billing


class ParleyRunEngine(RunEngine):
    """A run engine with Parley's modes and billing; every other argument is `runs.engine.RunEngine`'s."""

    def __init__(self, db: AsyncDatabase, **options: Any) -> None:
        super().__init__(db, modes=MODES, settle=billing.settle, **options)
