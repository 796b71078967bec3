"""The `synthesize` node: one structured answer written from what the run produced, else a fallback built
from the run's own data.

    builder.add_node("synthesize", synthesize(
        schema=SynthesisDraft, prompt=synthesis_prompt, fallback=fallback_synthesis, shape=finish_synthesis,
        context=RoundTableContext, model_role="synthesis_model", label="roundtable:synthesis"))

`prompt(state, ctx)` gives the messages; the model answers an instance of `schema` through
`ask_structured`; when that answer is unreadable, `fallback(state, exc)` stands in (the node logs it),
so the run ends with a synthesis whatever the synthesizer wrote. `shape(state, ctx, draft)` turns the
draft into the node's state update (and may announce it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime
from pydantic import BaseModel

from parley.nodes.capability import mark
from parley.nodes.context import RunContext
from parley.nodes.structured import ask_structured, is_unreadable, node_attempt

log = logging.getLogger("parley.synthesize")

State = Mapping[str, Any]


def synthesize(
    *,
    schema: type[BaseModel],
    prompt: Callable[[State, Any], Sequence[BaseMessage]],
    shape: Callable[[State, Any, BaseModel], dict[str, Any]],
    fallback: Callable[[State, BaseException], BaseModel] | None = None,
    fallback_on: Callable[[BaseException], bool] = is_unreadable,
    context: type[RunContext] = RunContext,
    model_role: str | None = None,
    model: Callable[[State], str | None] | None = None,
    temperature: float | None = 0.2,
    label: str | Callable[[State], str] = "synthesis",
    attempts: int = 1,
    what: str = "synthesis",
):
    """Build a structured-synthesis node: the model answers with an instance of `schema`, shaped into the update.

    The answer is asked for as `schema` (structured output in the provider's dialect) and read by pydantic; an
    unreadable one is asked again by the node's retry policy, and on the last attempt `fallback` stands in for it.

    Args:
        schema: the pydantic model the synthesizer answers with.
        prompt: the messages, from the state and the run's context.
        shape: the state update, from the state, the context and the draft (a `schema` instance).
        fallback: the draft when the answer is unusable (`fallback_on`, unreadable by default); None: the
            failure fails the node.
        context: the run context class the node reads; `model_role` names its field giving the model, or
            `model` gives it from the state (neither: the run's model).
        temperature: the synthesizer's sampling temperature.
        label: the usage label of its call (or a function of the state giving it).
        attempts: the node's attempts (its retry policy's); the fallback stands in on the last only.
        what: what the logs call it.

    Returns:
        The async node `(state, runtime) -> update` (the update `shape` returns).

    Raises:
        Exception: (when the node runs) the model's failure, or an answer still unreadable without a `fallback`.

    Example:
        ```python
        # docs/python.md, council.py: a Summary (a pydantic model) of the arbitrator's answer
        builder.add_node("summarise", parley.synthesize(
            schema=Summary,
            prompt=lambda state, ctx: [HumanMessage(f"Summarise this advice:\n{state['answer']}")],
            shape=lambda state, ctx, draft: {"summary": draft.model_dump()},
        ))
        ```
    """

    async def write_synthesis(state: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
        """Write the structured synthesis, or its fallback when the answer cannot be read."""
        ctx = context.of(runtime)
        chosen = model(state) if model is not None else getattr(ctx, model_role) if model_role else None
        tag = label(state) if callable(label) else label
        structured = ctx.structured(schema, chosen, temperature=temperature, label=tag)

        def stand_in(exc: BaseException) -> BaseModel:
            log.warning("%s unreadable (%s); using its fallback", what, exc.__class__.__name__)
            return fallback(state, exc)

        draft = await ask_structured(
            structured, prompt(state, ctx), fallback=stand_in if fallback is not None else None,
            fallback_on=fallback_on, attempt=node_attempt(runtime, default=attempts), attempts=attempts,
        )
        return shape(state, ctx, draft)

    write_synthesis.__name__ = "synthesize"
    return mark(write_synthesis, "synthesize")
