"""The workflow node types that need no mode: `llm`, `transform` and `condition`.

Each factory takes the node's spec and the workflow's declared defaults and returns an async LangGraph
node `(state, runtime) -> {output_key: value}`. Model calls go through `runtime.context` (a
`RunContext`), labelled with the node id; a streamed `llm` node is a `speak` node (`nodes.speak`) whose
chunks the workflow's stream shows as `{"event": "chunk", "node": id, "content": ...}`
(`designer.modes.workflow_event`).
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from parley.designer.context import WorkflowContext
from parley.designer.routing import Routing, evaluate, read
from parley.designer.schemas import model_from_schema
from parley.designer.spec import ConditionNode, LlmNode, TransformNode
from parley.designer.templates import lookup, render, to_text
from parley.nodes.speak import speak

NodeFn = Callable[[dict[str, Any], Any], Awaitable[dict[str, Any]]]


def prompt_of(node: Any, defaults: Mapping[str, Any]) -> Callable[[Mapping[str, Any], Any], list[BaseMessage]]:
    """The prompt of a node whose inputs are a `prompt` template and an optional `system` one: its messages,
    rendered against the state."""

    def prompt(state: Mapping[str, Any], ctx: Any) -> list[BaseMessage]:
        messages: list[BaseMessage] = []
        if node.inputs.system:
            messages.append(SystemMessage(render(node.inputs.system, state, defaults)))
        messages.append(HumanMessage(render(node.inputs.prompt, state, defaults)))
        return messages

    return prompt


def llm_node(node: LlmNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for an `llm` spec: one model call, streamed (a `speak` node, the node speaking as itself),
    or structured when a schema is given."""
    config = node.config
    prompt = prompt_of(node, defaults)

    if config.output_schema is None:
        return speak(
            name="call_model", doc="Ask the node's model the rendered prompt and write its answer to the output key.",
            prompt=prompt, speaker={"id": node.id, "name": node.id}, writes=node.output_key,
            model=config.model, temperature=config.temperature, max_tokens=config.max_tokens, label=node.id,
            resend=True,  # a retried node (its `retries`) streams its answer again, as it always has
            context=WorkflowContext, grants=lambda state, ctx: (ctx.node_tools or {}).get(node.id),
        )
    output_model = model_from_schema(config.output_schema, node.id)

    async def call_model(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Ask the node's model the rendered prompt and write its answer to the output key."""
        ctx = WorkflowContext.of(runtime)
        knobs = {"temperature": config.temperature, "max_tokens": config.max_tokens, "label": node.id}
        answer = await ctx.structured(output_model, config.model, **knobs).ainvoke(prompt(state, ctx))
        return {node.output_key: answer.model_dump(mode="json")}

    return call_model


def _items(value: Any, field: str | None) -> list[Any]:
    items = value if isinstance(value, list) else [value]
    if field is None:
        return items
    return [item.get(field) if isinstance(item, Mapping) else item for item in items]


def transform_node(node: TransformNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `transform` spec (pick, join or format)."""
    config = node.config

    async def transform(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Pick, join or format state values into the output key."""
        if config.op == "pick":
            # A copy, so that a later in-place change of one key can never show through another.
            return {node.output_key: copy.deepcopy(lookup(state, config.key, defaults))}
        if config.op == "join":
            items = [item for key in config.keys for item in _items(lookup(state, key, defaults), config.field)]
            return {node.output_key: config.separator.join(to_text(item) for item in items)}
        return {node.output_key: render(node.inputs.template or "", state, defaults)}

    return transform


def condition_node(node: ConditionNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `condition` spec; the route itself is `condition_router`."""

    async def note_route(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Record which node the condition routes to, when the spec names an output key."""
        if not node.output_key:
            return {}
        return {node.output_key: choose_case(node, state, defaults)}

    return note_route


def choose_case(node: ConditionNode, state: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    """The node a condition routes to: the first passing case's `goto`, else the default."""
    value = read(state, node.config.key, defaults)
    for case in node.config.cases:
        if evaluate(case.op, value, case.value):
            return case.goto
    return node.config.default


def condition_router(node: ConditionNode, defaults: Mapping[str, Any]) -> Callable[[dict[str, Any]], str]:
    """The routing function LangGraph calls after a condition node."""

    def route(state: dict[str, Any]) -> str:
        return choose_case(node, state, defaults)

    route.__name__ = f"route_{node.id}"
    return route


def edge_router(node_id: str, routing: Routing, defaults: Mapping[str, Any]) -> Callable[[dict[str, Any]], Any]:
    """The routing function for a node with `when` edges: the first passing edge, else its plain edges."""

    def route(state: dict[str, Any]) -> str | list[str]:
        for test, target in routing.when:
            if evaluate(test.op, read(state, test.key, defaults), test.value):
                return target
        fallback = routing.fallback
        return fallback[0] if len(fallback) == 1 else list(fallback)

    route.__name__ = f"route_{node_id}"
    return route
