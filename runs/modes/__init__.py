"""Each mode as the run engine drives it: its graph, its wire events and what it stores (one module per mode)."""

from parley.runs.modes.base import ModeRun
from parley.runs.modes.duel import DuelRun
from parley.runs.modes.panel import PanelRun
from parley.runs.modes.roundtable import RoundtableRun
from parley.runs.modes.workflow import WorkflowRun

MODES: dict[str, type[ModeRun]] = {mode.kind: mode for mode in (DuelRun, PanelRun, RoundtableRun, WorkflowRun)}
