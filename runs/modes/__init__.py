"""Each mode as the run engine drives it: its graph, its wire events and what it stores (one module per mode)."""

from runs.modes.base import ModeRun
from runs.modes.duel import DuelRun
from runs.modes.panel import PanelRun
from runs.modes.roundtable import RoundtableRun
from runs.modes.workflow import WorkflowRun

MODES: dict[str, type[ModeRun]] = {mode.kind: mode for mode in (DuelRun, PanelRun, RoundtableRun, WorkflowRun)}
