"""The workflow node types backed by Parley's modes: `debate`, `panel`, `duel` and `roundtable`.

Thin adapters: each renders its inputs from workflow state, runs the mode's own compiled graph (`graphs.panel.graph`,
`graphs.duel.graph`, `graphs.roundtable.graph`, imported on first use, so the designer works without a mode it does
not run) as a nested graph, re-emits that graph's stream events under the workflow node's id, and writes the result
to the node's output key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from langgraph.graph.state import CompiledStateGraph

from parley.core.limits import MAX_DUEL_ROUNDS, MIN_DUEL_ROUNDS
from parley.designer.context import WorkflowContext
from parley.designer.nodes import NodeFn
from parley.designer.spec import DebateNode, DuelNode, PanelNode, RoundtableNode
from parley.designer.templates import render
from parley.nodes.context import RunContext
from parley.nodes.events import event_writer, relay
from parley.nodes.speak import is_chunk
from parley.nodes.tools import TOOL_EVENTS

DEFAULT_USER_PROFILE = {"name": "Advocate"}
# A nested mode shares the workflow's models, ledger and budget; not its steering: a person steers a workflow at
# its own `await` nodes, never inside a nested duel or table.
_SHARED_CONTEXT_FIELDS = tuple(f.name for f in dataclasses.fields(RunContext) if f.name != "steering")


class NodeInputError(ValueError):
    """A mode node got an input it cannot use (a profile that is not an object, no workspace agents …)."""


def tag_event(node_id: str, event: Any) -> dict[str, Any]:
    """A nested graph's custom stream event, as the workflow's own: token chunks stay `chunk` (in the one shape
    of `nodes.speak`, tagged with the node: `{node, speaker, round, content}`), the rest become `progress`
    with the original event name as `kind`."""
    if not isinstance(event, Mapping):
        return {"event": "progress", "node": node_id, "kind": "custom", "data": event}
    rest = {k: v for k, v in event.items() if k not in ("event", "node")}
    if event.get("event") == "chunk":
        return {"event": "chunk", "node": node_id, **rest}
    return {"event": "progress", "node": node_id, "kind": str(event.get("event") or "custom"), "data": rest}


def workflow_event(event: Any) -> Any:
    """A workflow's own custom stream event as its stream shows it: a `chunk` in the one shape
    (`nodes.speak`) spoken by a workflow node becomes `{"event": "chunk", "node": id, "content": ...}`, and its
    `tool_call` and `tool_result` (`nodes.tools`) name the node the same way;
    any other event (a nested mode graph's, already tagged by `tag_event`) stays as it is."""
    if is_chunk(event) and "node" not in event:
        return {"event": "chunk", "node": event["speaker"]["id"], "content": event["content"]}
    if isinstance(event, Mapping) and event.get("event") in TOOL_EVENTS and "speaker" in event:
        # A node's call of a tool it was granted, and its result: `{"event", "node", "index", "id", "name", ...}`.
        return {"event": event["event"], "node": event["speaker"]["id"],
                **{k: v for k, v in event.items() if k not in ("event", "speaker", "round")}}
    return event


async def run_nested(node_id: str, graph: CompiledStateGraph, payload: dict[str, Any], context: Any) -> dict[str, Any]:
    """Run a mode's compiled graph inside a workflow node; return its final state."""
    write = event_writer()
    final: dict[str, Any] = {}
    # subgraphs=True: a mode may run a graph inside one of its nodes, and its events should reach the
    # workflow's stream too. The result is the shallowest graph's values
    # (namespaces are absolute, so when this runs inside a workflow node even the top one has a prefix).
    depth = None
    async for namespace, mode, chunk in graph.astream(
        payload, context=context, stream_mode=["custom", "values"], subgraphs=True
    ):
        if mode == "values":
            if depth is None or len(namespace) <= depth:
                depth, final = len(namespace), chunk
        else:
            write(relay(chunk, tag_event(node_id, chunk)))
    return final


def mode_context(schema: Any, ctx: RunContext, options: Mapping[str, Any]) -> Any:
    """The context a mode graph expects: its own context class, sharing this node's models and ledger."""
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        if options:
            raise NodeInputError(f"this mode takes no options (got {', '.join(sorted(options))})")
        return ctx
    names = [f.name for f in dataclasses.fields(schema) if f.init]
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise NodeInputError(f"unknown option(s) {', '.join(unknown)}; this mode takes: {', '.join(names)}")
    shared = {name: getattr(ctx, name) for name in _SHARED_CONTEXT_FIELDS if name in names}
    return schema(**shared, **options)


def debate_node(node: DebateNode | PanelNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `debate` spec (arbitrated answer) or a `panel` spec (labelled raw answers): the panel
    mode's own compiled graph (`graphs.panel.graph`) on the rendered question."""

    async def ask_panel(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Put the rendered input to a panel of distinct-family models and write its answer."""
        from parley.graphs.panel import PanelContext, graph, question_input

        config, ctx = node.config, WorkflowContext.of(runtime)
        try:
            inputs = question_input(
                render(node.inputs.input, state, defaults), models=config.models,
                arbitrators=getattr(config, "arbitrators", None), panel_size=config.panel_size,
                allow_same_family=config.allow_same_family, system_prompt=config.system_prompt,
                arbitrator_prompt=getattr(config, "arbitrator_prompt", None), mode=node.type,
                default_arbitrator=ctx.factory.settings.arbitrator_model,
                rule=getattr(config, "rule", "synthesis"), answer_rule=getattr(config, "answer_rule", None))
        except ValueError as exc:
            raise NodeInputError(f"inputs.input gives no question ({exc})") from None
        final = await run_nested(node.id, graph, inputs, mode_context(PanelContext, ctx, {}))
        return {node.output_key: final.get("answer", "")}

    return ask_panel


def winner_argument(final: Mapping[str, Any]) -> str:
    """The winning side's turns of a duel as one text; every turn when it is a tie."""
    synthesis = final.get("synthesis") or {}
    winner = synthesis.get("winner") if isinstance(synthesis, Mapping) else None
    messages = [m for m in final.get("messages") or [] if isinstance(m, Mapping)]
    picked = [m for m in messages if winner and winner in (m.get("role"), m.get("name"))] or messages
    return "\n\n".join(f"{m.get('name') or m.get('role')}: {m.get('content', '')}" for m in picked)


def user_profile_input(
    configured: Mapping[str, Any] | None, template: str | None, state: Mapping[str, Any], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """The user's profile a node argues for: its rendered input (an object, or a name), else its config's, else
    `DEFAULT_USER_PROFILE`."""
    profile: Any = configured or DEFAULT_USER_PROFILE
    if template:
        profile = render(template, state, defaults, raw=True)
        if isinstance(profile, str):
            profile = {"name": profile}
        if not isinstance(profile, Mapping):
            raise NodeInputError(f"inputs.user_profile must give an object or a name, not {type(profile).__name__}")
    return dict(profile)


def duel_node(node: DuelNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `duel` spec."""
    async def stage_duel(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Stage a duel on the rendered topic; write its transcript, verdict and the winner's argument."""
        from parley.graphs.duel import DuelContext, graph

        profile = user_profile_input(node.config.user_profile, node.inputs.user_profile, state, defaults)
        payload: dict[str, Any] = {"topic": render(node.inputs.topic, state, defaults), "user_profile": profile}
        rounds = render(node.inputs.rounds, state, defaults, raw=True) if node.inputs.rounds else node.config.rounds
        if rounds is not None:
            if isinstance(rounds, bool) or not isinstance(rounds, int):
                raise NodeInputError(f"inputs.rounds must give an integer, not {rounds!r}")
            if not MIN_DUEL_ROUNDS <= rounds <= MAX_DUEL_ROUNDS:  # as `config.rounds` and the duel's own route
                raise NodeInputError(f"inputs.rounds must give {MIN_DUEL_ROUNDS} to {MAX_DUEL_ROUNDS}, not {rounds}")
            payload["rounds"] = rounds
        ctx = WorkflowContext.of(runtime)
        final = await run_nested(node.id, graph, payload, mode_context(DuelContext, ctx, node.config.options))
        result = {key: final.get(key) for key in ("opponent_profile", "messages", "synthesis")}
        result["winner_argument"] = winner_argument(final)
        return {node.output_key: result}

    return stage_duel


def table_agents(node: RoundtableNode, ctx: RunContext) -> list[dict[str, Any]]:
    """The agents a round-table node seats: its inline list, or the workspace's from the run context."""
    if node.config.agents == "workspace":
        agents = getattr(ctx, "workspace_agents", None)
        if agents is None:
            raise NodeInputError(
                "agents 'workspace' are only known to HTTP runs (the service passes the caller's workspace "
                "agents); list the agents inline, or pass WorkflowContext(workspace_agents=[...]) from Python"
            )
        if not agents:
            raise NodeInputError("the workspace has no agents; create some with POST /v1/agents first")
        return [dict(agent) for agent in agents]
    seated = []
    for i, agent in enumerate(node.config.agents):
        data = agent.model_dump(exclude_none=True)
        data.setdefault("id", f"{node.id}-{i + 1}")
        seated.append(data)
    return seated


def roundtable_node(node: RoundtableNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `roundtable` spec."""
    async def hold_round_table(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Put the rendered question to a round table and write its synthesis and transcript."""
        from parley.graphs.roundtable import RoundTableContext, graph

        ctx = WorkflowContext.of(runtime)
        payload = {
            "question": render(node.inputs.question, state, defaults),
            "topic": render(node.inputs.topic, state, defaults) if node.inputs.topic else None,
            "agents": table_agents(node, ctx),
            "history": None,
        }
        final = await run_nested(node.id, graph, payload, mode_context(RoundTableContext, ctx, node.config.options))
        return {node.output_key: {key: final.get(key) for key in ("synthesis", "total_rounds", "rounds", "transcript")}}

    return hold_round_table
