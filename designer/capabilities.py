"""The workflow node types backed by Parley's capability nodes: `select_opponent`, `synthesize` and
`score_convergence`.

Each renders its inputs from workflow state, runs the capability node the modes are built of (the duel's
`select_opponent`, the round table's `synthesize` and `score_convergence`) with its settings taken from the
node's config, and writes the result to the node's output key. The node's own stream events (the opponent
once cast, the convergence score) come out as `progress` events under the workflow node's id, as a mode
node's do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


from designer.modes import NodeInputError, tag_event, user_profile_input
from designer.nodes import NodeFn, prompt_of
from designer.schemas import model_from_schema
from designer.spec import ScoreConvergenceNode, SelectOpponentNode, SynthesizeNode
from designer.templates import render
from nodes.convergence import score_convergence
from nodes.events import EVENT_SINK, event_writer, relay
from nodes.personas import fallback_opponent
from nodes.prompts import duel as duel_prompts
from nodes.select_opponent import select_opponent
from nodes.synthesize import synthesize


@contextmanager
def events_under(node_id: str) -> Iterator[None]:
    """Send the events of the capability node run inside this block as the workflow node's own."""
    write = event_writer()
    token = EVENT_SINK.set(lambda event: write(relay(event, tag_event(node_id, event))))
    try:
        yield
    finally:
        EVENT_SINK.reset(token)


def select_opponent_node(node: SelectOpponentNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `select_opponent` spec: the duel's caster, on the node's model and temperature."""
    cast = select_opponent(
        system=duel_prompts.SELECT_OPPONENT_SYSTEM, prompt=duel_prompts.SELECT_OPPONENT_PROMPT,
        fallback=fallback_opponent, model_role=None, temperature_role=None, temperature=node.config.temperature,
        label=node.id,
    )

    async def choose_opponent(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Cast an opponent for the rendered topic and write its profile."""
        profile = user_profile_input(node.config.user_profile, node.inputs.user_profile, state, defaults)
        with events_under(node.id):
            out = await cast({"topic": render(node.inputs.topic, state, defaults), "user_profile": profile}, runtime)
        return {node.output_key: out["opponent_profile"]}

    choose_opponent.__wrapped__ = cast  # type: ignore[attr-defined]
    return choose_opponent


def synthesize_node(node: SynthesizeNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `synthesize` spec: a structured answer, or the config's fallback when unreadable."""
    config = node.config
    schema = model_from_schema(config.output_schema, node.id)
    return synthesize(
        schema=schema, prompt=prompt_of(node, defaults), shape=lambda state, ctx, draft: {node.output_key: draft.model_dump(mode="json")},
        fallback=None if config.fallback is None else lambda state, exc: schema.model_validate(config.fallback),
        temperature=config.temperature, label=node.id, what=f"synthesis of node {node.id!r}",
    )


def score_convergence_node(node: ScoreConvergenceNode, defaults: Mapping[str, Any]) -> NodeFn:
    """Build the node for a `score_convergence` spec: the round table's score, at the config's threshold."""
    score = score_convergence(threshold_role=None, threshold=node.config.threshold)

    async def measure(state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """Score the rendered transcript's round and write the score and whether it converged."""
        transcript = render(node.inputs.transcript, state, defaults, raw=True)
        if not isinstance(transcript, list) or not all(isinstance(m, Mapping) for m in transcript):
            raise NodeInputError(f"inputs.transcript must give a list of messages, not {type(transcript).__name__}")
        if node.inputs.round:
            round_number = render(node.inputs.round, state, defaults, raw=True)
            if isinstance(round_number, bool) or not isinstance(round_number, int):
                raise NodeInputError(f"inputs.round must give an integer, not {round_number!r}")
        else:
            round_number = max((int(m.get("roundNumber", 0)) for m in transcript), default=0)
        with events_under(node.id):
            out = await score({"transcript": transcript, "round": round_number}, runtime)
        record = out["rounds"][0]
        return {node.output_key: {"roundNumber": record["roundNumber"], "convergenceScore": record["convergenceScore"],
                                  "converged": out["converged"], "usage": record["usage"]}}

    measure.__wrapped__ = score  # type: ignore[attr-defined]
    return measure
