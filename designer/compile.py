"""Build a LangGraph graph from a workflow document, after checking it.

The result is a plain `StateGraph` (or its compiled graph): callers add a checkpointer, draw it with
`get_graph().draw_mermaid()`, or add it as a node of a bigger graph.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Mapping
from typing import Annotated, Any, TypedDict, get_type_hints

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import RetryPolicy

from parley.designer import capabilities, modes
from parley.designer.context import WorkflowContext
from parley.designer.nodes import NodeFn, condition_node, condition_router, edge_router, llm_node, transform_node
from parley.designer.routing import node_routes
from parley.designer.spec import ConditionNode, WorkflowSpec
from parley.designer.validate import validate_workflow
from parley.nodes.events import event_writer
from parley.nodes.steer import SteerState
from parley.llm.failures import is_transient
from parley.llm.usage import usage_view

FACTORIES = {
    "llm": llm_node,
    "transform": transform_node,
    "condition": condition_node,
    "debate": modes.debate_node,
    "panel": modes.debate_node,
    "duel": modes.duel_node,
    "roundtable": modes.roundtable_node,
    "select_opponent": capabilities.select_opponent_node,
    "synthesize": capabilities.synthesize_node,
    "score_convergence": capabilities.score_convergence_node,
    "fan_out": capabilities.fan_out_node,
    "arbitrate": capabilities.arbitrate_node,
    "judge": capabilities.judge_node,
    "vote": capabilities.vote_node,
    "await": capabilities.await_node,
}


def state_schema(spec: WorkflowSpec) -> type:
    """A TypedDict of the declared keys; `append` keys get a list-concatenating reducer. A workflow with `await` nodes
    also has the keys its boundaries write (`nodes.steer.SteerState`, which `validate_workflow` keeps undeclared)."""
    fields: dict[str, Any] = {
        name: Annotated[list, operator.add] if key.reducer == "append" else Any for name, key in spec.state.items()
    }
    if spec.steerable:
        fields.update(get_type_hints(SteerState, include_extras=True))
    return TypedDict(f"{_class_name(spec.name)}State", fields, total=False)  # type: ignore[operator]


def _class_name(name: str) -> str:
    return "".join(part.capitalize() for part in "".join(c if c.isalnum() else " " for c in name).split()) or "Workflow"


def _instrumented(spec: WorkflowSpec, node: Any, step: NodeFn) -> NodeFn:
    """Wrap a node: announce its start and end, bill its model calls to it, name it on failure, shape append
    writes."""
    appends = {name for name, key in spec.state.items() if key.reducer == "append"}
    model = getattr(node.config, "model", None) if hasattr(node, "config") else None

    async def run(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        ctx = WorkflowContext.of(runtime)
        write = event_writer()
        attempt = runtime.execution_info.node_attempt if getattr(runtime, "execution_info", None) else 1
        write({"event": "node_start", "node": node.id, "type": node.type, "attempt": attempt})
        own = ctx.ledger.for_node(node.id)
        scoped = dataclasses.replace(ctx, ledger=own, model=model or ctx.model)
        try:
            update = await step(state, runtime.override(context=scoped))
        except Exception as exc:
            if not hasattr(exc, "workflow_node"):
                try:
                    exc.workflow_node = node.id  # type: ignore[attr-defined]
                except AttributeError:  # exceptions with __slots__
                    pass
            raise
        output = {key: [value] if key in appends else value for key, value in (update or {}).items()}
        # Sent by the node itself rather than read off the graph's updates, so it is marked with this task
        # like every other event of the node (a resumed run can tell whether it will be sent again).
        write({"event": "node_end", "node": node.id, "keys": sorted(output), "output": output,
               "usage": usage_view(own, per_model=True)})
        return output

    run.__name__ = node.id
    run.__doc__ = step.__doc__
    run.__wrapped__ = step  # type: ignore[attr-defined]  # what it runs (`nodes.capability.capability_of`)
    return run


def build_workflow(spec: Mapping[str, Any] | WorkflowSpec) -> StateGraph:
    """Check a workflow document and build its (uncompiled) `StateGraph`.

    Raises:
        WorkflowError: the document has problems; each names its node and JSON path.
    """
    spec = validate_workflow(spec)
    defaults = spec.defaults
    builder = StateGraph(state_schema(spec), context_schema=WorkflowContext)
    for node in spec.nodes:
        step = FACTORIES[node.type](node, defaults)
        # `retries` are extra attempts after a transient model failure (`is_transient`), as the field says.
        retry = RetryPolicy(max_attempts=node.retries + 1, retry_on=is_transient) if node.retries else None
        builder.add_node(node.id, _instrumented(spec, node, step), retry_policy=retry)

    builder.add_edge(START, spec.entry)
    for node_id, routing in node_routes(spec).items():
        node = spec.node(node_id)
        if isinstance(node, ConditionNode):
            builder.add_conditional_edges(node_id, condition_router(node, defaults), sorted(routing.targets()))
        elif routing.when:
            builder.add_conditional_edges(node_id, edge_router(node_id, routing, defaults), sorted(routing.targets()))
        else:
            for target in routing.fallback:
                builder.add_edge(node_id, END if target == END else target)
    return builder


def compile_workflow(spec: Mapping[str, Any] | WorkflowSpec, **compile_options: Any) -> CompiledStateGraph:
    """Check a workflow document and compile it into a LangGraph graph named after the workflow.

    Args:
        spec: the workflow, as parsed JSON (or a `WorkflowSpec`).
        **compile_options: passed to `StateGraph.compile` (`checkpointer=`, `store=`, `debug=` …).

    Returns:
        The compiled graph. Run it with `ainvoke`/`astream`, passing `context=WorkflowContext(...)` to pick
        the model factory, the default model or the round table's workspace agents.

    Raises:
        WorkflowError: listing every problem, each naming its node and JSON path.

    Example:
        >>> import parley
        >>> graph = parley.compile_workflow(parley.load_example("outline-brief"))
        >>> [n for n in graph.get_graph().nodes if not n.startswith("__")]
        ['outline', 'bullets', 'brief']

        Run it (docs/python.md, workflow.py):

        ```python
        state = await graph.ainvoke({"topic": "tides"}, context=WorkflowContext())
        state["brief"]
        ```
    """
    spec = validate_workflow(spec)
    return build_workflow(spec).compile(name=spec.name, **compile_options)
