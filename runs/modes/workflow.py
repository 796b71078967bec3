"""Designer workflow runs: a compiled workflow's node events, and its `workflow_runs` record.

The workflow run id is the run id. Events: `run_start`, then the workflow's own (`node_start`, `chunk`,
`progress`, `node_end`) and a last `done {runId, state, usage}` (or `error {runId, error, node, code}`).
At the end the run's usage rows are recorded and its tokens taken from the workspace allowance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel import Pregel

from designer import WorkflowContext, WorkflowSpec, compile_workflow, validate_workflow
from designer.modes import NodeInputError, tag_event, workflow_event
from designer.run import run_error
from designer.templates import MissingValue, TemplateError
from designer.usage import run_usage
from nodes.models import UsageLedger
from runs.modes.base import Emit, ModeRun, Outcome, RunFailure
from store import workflows as store
from store import workspaces as ws_store
from store.usage import record_usage

if TYPE_CHECKING:
    from runs.engine import Caller, RunEngine


def jsonable(value: Any) -> Any:
    """State values as plain JSON (a mode may hold datetimes or other objects)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


async def start_workflow(
    engine: RunEngine, caller: Caller, *, spec: WorkflowSpec, initial: dict[str, Any], workflow_id: str | None,
    workspace_agents: list[dict[str, Any]] | None,
) -> dict:
    """Store the workflow run as `running` and start it; return the `workflow_runs` record."""
    run_id = store.new_run_id()
    record = await store.insert_run(engine.db, run_id=run_id, workspace=caller.workspace, user=caller.user,
                                    workflow_id=workflow_id, workflow_name=spec.name, input=initial)
    await engine.submit(
        "workflow", caller=caller, run_id=run_id, title=spec.name,
        ref={"workflowId": workflow_id, "workflowRunId": run_id},
        input={"workflow": spec.dump(), "initial": jsonable(initial), "workflowId": workflow_id,
               "workspaceAgents": workspace_agents},
    )
    return record


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

    def graph(self, checkpointer: BaseCheckpointSaver) -> Pregel:
        return compile_workflow(self.spec, checkpointer=checkpointer)

    def context(self, ledger: UsageLedger) -> WorkflowContext:
        return WorkflowContext(models=self.services.factory, ledger=ledger,
                               workspace_agents=self.input.get("workspaceAgents"))

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
        db, workspace = self.services.db, self.record["workspace"]
        await record_usage(db, workspace=workspace, user=self.record["user"], request_id=self.run_id,
                           mode="workflow", ledger=ledger)
        if ledger.total_tokens:
            await ws_store.consume_allowance(db, workspace, ledger.total_tokens)
        return run_usage(ledger)

    async def completed(self, state: dict[str, Any], ledger: UsageLedger) -> Outcome:
        final = jsonable(state)
        usage = await self._settle(ledger)
        await store.finish_run(self.services.db, run_id=self.run_id, status="completed", output=final, usage=usage)
        return Outcome("completed", [Emit("done", {"runId": self.run_id, "state": final, "usage": usage})],
                       result={"output": final})

    async def failed(self, exc: BaseException, ledger: UsageLedger) -> Outcome:
        error = run_error(exc)
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
