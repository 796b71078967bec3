"""The run context of a workflow: `RunContext`'s models and ledger, plus what only the designer needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parley.nodes.context import RunContext


@dataclass(kw_only=True)
class WorkflowContext(RunContext):
    """Knobs of one workflow run.

    `workspace_agents` seats a round-table node whose config says `"agents": "workspace"`: the HTTP
    service fills it with the caller's workspace agents; a Python caller may pass its own list (each
    `{id, name, role, persona, model?, isDevilsAdvocate, memories, documents}`). Each model call's usage
    record in `ledger` names the node that made it (the compiler's wrapper sees to that).
    """

    workspace_agents: list[dict[str, Any]] | None = None
    # The tools each streamed `llm` node (by id) was granted (`workflow:<id>:<node>` grants of a stored workflow).
    node_tools: dict[str, list[str]] | None = None

