"""Designer workflow runs: a compiled workflow's node events, and its `workflow_runs` record.

The workflow run id is the run id. Events: `run_start`, then the workflow's own (`node_start`, `chunk`,
`progress`, `node_end`; an `await` node's `progress` of kind `human`, `resumed`, `stopping`, and `waiting` while the
run waits there for a person) and a last `done {runId, state, usage, stoppedBy?}` (or `error {runId, error, node,
code}`). A person steers only a workflow with an `await` node (`nodes.steer`); its state keys stay out of `state`.
At the end the run is billed (`ModeRun.settle`): its usage rows recorded, its tokens taken from the workspace
allowance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from parley.designer import WorkflowContext, compile_workflow, validate_workflow
from parley.designer.modes import NodeInputError, tag_event, workflow_event
from parley.designer.run import workflow_run_error
from parley.designer.spec import STEER_KEYS
from parley.designer.templates import MissingValue, TemplateError
from parley.llm.usage import UsageLedger, usage_view
from parley.runs.modes.base import Emit, ModeRun, Outcome, RunFailure
from parley.store import workflows as store


def jsonable(value: Any) -> Any:
    """State values as plain JSON (a mode may hold datetimes or other objects)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def is_input_problem(exc: BaseException) -> bool:
    """Whether a failed run's cause is a value the workflow got (422) rather than a node failing (502)."""
    return isinstance(exc.__cause__, MissingValue | NodeInputError | TemplateError)


class WorkflowRun(ModeRun):
    """One run of a designer workflow."""

    kind = "workflow"
    first_seq = 1  # workflow streams have numbered their events from 1 since they began

    def __init__(self, record: dict[str, Any], services: Any) -> None:
        super().__init__(record, services)
        self.spec = validate_workflow(self.input["workflow"])

    @classmethod
    def steers(cls, record: dict[str, Any]) -> bool:
        """Only a workflow with an `await` node takes a person's input (it has nowhere else to take it in)."""
        return any(isinstance(node, dict) and node.get("type") == "await"
                   for node in record["input"]["workflow"].get("nodes") or ())

    def graph(self, checkpointer: BaseCheckpointSaver) -> Pregel:
        return compile_workflow(self.spec, checkpointer=checkpointer)

    def context(self, ledger: UsageLedger) -> WorkflowContext:
        return WorkflowContext(models=self.services.factory, ledger=ledger, tools=self.tool_access(),
                               workspace_agents=self.input.get("workspaceAgents"),
                               node_tools=self.input.get("nodeTools"))

    def graph_input(self) -> dict[str, Any]:
        return dict(self.input["initial"])

    def opening(self) -> list[Emit]:
        return [Emit("run_start", {"runId": self.run_id, "workflowId": self.input["workflowId"],
                                   "name": self.spec.name})]

    def translate(self, mode: str, part: Any) -> Iterable[Emit]:
        origin = getattr(part, "origin", None)
        if origin is not None and origin.nested:
            # An event of a mode graph running inside a workflow node: shown as that node's.
            part = tag_event(origin.outermost_node, part)
        else:
            part = workflow_event(part)
        data = {k: v for k, v in part.items() if k != "event"}
        if part.get("event") == "node_end":
            data["output"] = jsonable(data["output"])
        yield Emit(part["event"], data)

    async def _settle(self, ledger: UsageLedger) -> dict[str, Any]:
        """Record the run's usage rows and take its tokens from the allowance; return the run's usage."""
        await self.settle(ledger)
        return usage_view(ledger, per_model=True, per_node=True)

    async def completed(self, state: dict[str, Any], ledger: UsageLedger) -> Outcome:
        kept = STEER_KEYS if self.spec.steerable else ()  # the await nodes' own keys
        final = jsonable({key: value for key, value in state.items() if key not in kept})
        early = {"stoppedBy": state["stopped_by"]} if self.spec.steerable and state.get("stopped_by") else {}
        usage = await self._settle(ledger)
        await store.finish_run(self.services.db, run_id=self.run_id, status="completed", output=final, usage=usage)
        return Outcome("completed", [Emit("done", {"runId": self.run_id, "state": final, "usage": usage, **early})],
                       result={"output": final, **early}, stopped_by=early.get("stoppedBy"))

    async def failed(self, exc: BaseException, ledger: UsageLedger) -> Outcome:
        error = workflow_run_error(exc)
        usage = await self._settle(ledger)
        await store.finish_run(self.services.db, run_id=self.run_id, status="failed", output=None, usage=usage,
                               error=str(error), failed_node=error.node)
        bad_input = is_input_problem(error)
        code = "invalid_input" if bad_input else "workflow_failed"
        status = 422 if bad_input else 502
        if isinstance(exc, RunFailure):  # what the engine says (past its deadline, say)
            code, status = exc.error.get("code", code), exc.error.get("status", status)
        return Outcome(
            "failed", [Emit("error", {"runId": self.run_id, "error": str(error), "node": error.node, "code": code})],
            error={"message": str(error), "status": status, "code": code, "runId": self.run_id,
                   "node": error.node, "usage": usage},
        )

    async def cancelled(self, ledger: UsageLedger) -> Outcome:
        usage = await self._settle(ledger)
        await store.finish_run(self.services.db, run_id=self.run_id, status="cancelled", output=None, usage=usage,
                               error="cancelled")
        return Outcome("cancelled", [Emit("cancelled", {"runId": self.run_id, "message": "Workflow run cancelled"})])
