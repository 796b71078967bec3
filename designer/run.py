"""Run a workflow and describe what happens as events; shared by the HTTP service and the CLI.

`stream_workflow` yields `node_start`, `chunk`, `progress`, `node_end` and finally `done` as plain dicts
(`{"event": name, ...}`); a failure raises `WorkflowRunError` naming the node that failed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from langgraph.errors import GraphRecursionError
from langgraph.graph.state import CompiledStateGraph

from parley.designer.compile import compile_workflow
from parley.designer.context import WorkflowContext
from parley.designer.modes import workflow_event
from parley.designer.spec import WorkflowSpec
from parley.designer.validate import Issue, suggest, type_matches
from parley.llm.failures import failure_message
from parley.llm.usage import usage_view


class WorkflowInputError(ValueError):
    """Input values that do not fit the workflow's declared state."""

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = issues
        super().__init__("Invalid input: " + "; ".join(str(i) for i in issues))


class WorkflowRunError(RuntimeError):
    """A run that failed; `node` is the node that raised, when known."""

    def __init__(self, message: str, *, node: str | None = None) -> None:
        super().__init__(f"At node '{node}': {message}" if node else message)
        self.node = node
        self.reason = message


# --- input ----------------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", dict: "object", list: "array"}.get(type(value), type(value).__name__)


def prepare_input(spec: WorkflowSpec, values: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check input values against the declared state and return the initial state (defaults filled in).

    Raises:
        WorkflowInputError: an undeclared key, a value of the wrong type, or a missing required key.
    """
    values = dict(values or {})
    issues = []
    for key, value in values.items():
        declared = spec.state.get(key)
        if declared is None:
            issues.append(Issue(None, f"input.{key}", f"unknown state key '{key}'{suggest(key, spec.state)}; "
                                                      f"declared: {', '.join(spec.state) or 'none'}"))
        elif not type_matches(declared.type, value):
            issues.append(Issue(None, f"input.{key}", f"expected {declared.type}, got {_json_type(value)}"))
    for key, declared in spec.state.items():
        if declared.required and key not in values:
            issues.append(Issue(None, f"input.{key}", f"missing required input '{key}'"))
    if issues:
        raise WorkflowInputError(issues)
    return {**copy.deepcopy(spec.defaults), **values}


_TRUE, _FALSE = {"true", "yes", "1", "on"}, {"false", "no", "0", "off"}


def parse_assignments(spec: WorkflowSpec, pairs: Iterable[str]) -> dict[str, Any]:
    """Turn command-line `key=value` pairs into typed input values, by each key's declared type.

    Raises:
        WorkflowInputError: a pair without `=`, or a value that is not of its key's type.
    """
    values: dict[str, Any] = {}
    issues = []
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            issues.append(Issue(None, f"input.{key or pair}", f"'{pair}' is not key=value"))
            continue
        kind = spec.state[key].type if key in spec.state else "any"
        try:
            values[key] = _coerce(kind, text)
        except ValueError:
            issues.append(Issue(None, f"input.{key}", f"'{text}' is not {'an' if kind[0] in 'aeiou' else 'a'} {kind}"))
    if issues:
        raise WorkflowInputError(issues)
    return values


def _coerce(kind: str, text: str) -> Any:
    if kind == "string":
        return text
    if kind == "integer":
        return int(text)
    if kind == "number":
        number = float(text)
        return int(number) if number.is_integer() and "." not in text else number
    if kind == "boolean":
        if text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        raise ValueError(text)
    if kind in ("object", "array"):
        value = json.loads(text)
        if not isinstance(value, dict if kind == "object" else list):
            raise ValueError(text)
        return value
    try:
        return json.loads(text)
    except ValueError:
        return text


# --- running --------------------------------------------------------------------------------


def workflow_run_error(exc: BaseException) -> WorkflowRunError:
    """The `WorkflowRunError` a run failing with `exc` raises, naming the node at fault when known."""
    if isinstance(exc, WorkflowRunError):
        return exc
    if isinstance(exc, GraphRecursionError):
        message = "the run took too many steps; a loop in the workflow may never exit"
    else:  # a model failure as the model layer words it (upstream text capped and redacted there)
        message = failure_message(exc, model="the model failed ({detail})", other="{text}")
    error = WorkflowRunError(message, node=getattr(exc, "workflow_node", None))
    error.__cause__ = exc
    return error


async def stream_workflow(
    spec: WorkflowSpec,
    initial: Mapping[str, Any],
    *,
    context: WorkflowContext,
    graph: CompiledStateGraph | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Run a workflow, yielding its events in order.

    Events: `node_start {node, type, attempt}`, `chunk {node, content}` (tokens, also from nested mode
    graphs), `progress {node, kind, data}` (other events of nested mode graphs), `node_end {node, keys,
    output, usage}` (the state keys the node wrote, their values, the node's usage this time) and last
    `done {state, usage}`.

    Args:
        spec: a checked workflow.
        initial: the initial state (see `prepare_input`).
        context: the run context; its ledger fills up as the run goes.
        graph: the compiled workflow, when the caller already has it.

    Raises:
        WorkflowRunError: a node failed (its id is `.node`), or the run never finished.
    """
    graph = graph or compile_workflow(spec)
    final: dict[str, Any] = dict(initial)
    try:
        async for mode, chunk in graph.astream(dict(initial), context=context, stream_mode=["custom", "values"]):
            if mode == "custom":
                if isinstance(chunk, Mapping) and "event" in chunk:
                    yield dict(workflow_event(chunk))
            else:
                final = chunk
    except Exception as exc:
        raise workflow_run_error(exc) from exc
    usage = usage_view(context.ledger, per_model=True, per_node=True)
    yield {"event": "done", "state": dict(final), "usage": usage}
