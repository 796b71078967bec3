"""The `select_opponent` node: a model casts an opponent for a topic, opposed to the user's likely stance.

    builder.add_node("select_opponent", select_opponent(
        system=prompts.SELECT_OPPONENT_SYSTEM, prompt=prompts.SELECT_OPPONENT_PROMPT,
        fallback=fallback_opponent, context=DuelContext))

A cast that fails (the model call fails, or its answer is unreadable, blank, or the user themself)
is replaced by the caller's `fallback(topic, user_name)`: a run never stops for want of an opponent.
The chosen profile is announced as `{"event": "opponent", "opponentProfile": ...}`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # pydantic's schemas need these before Python 3.12

from parley.nodes.bounds import AtMost, Clipped
from parley.nodes.capability import mark
from parley.nodes.context import RunContext
from parley.nodes.events import emit
from parley.nodes.structured import ask_structured, is_unusable
from parley.nodes.text import clip, topic_language

log = logging.getLogger("parley.duel")


# Bounded lengths keep answers short everywhere and stop a small model running out of tokens mid-JSON.
class OpponentProfile(BaseModel):
    """The opponent persona."""

    name: Clipped(60) = Field(description="The opponent's full name, realistic for the topic's language.")
    title: Clipped(80) = Field(description="A short professional title, e.g. 'Labour economist'.")
    bio: Clipped(200) = Field(description="One sentence on who they are and why they hold their view.")
    stance: Clipped(200) = Field(
        description="Their position on the topic in one sentence, opposed to the user's likely stance."
    )
    traits: AtMost(5, Clipped(40)) = Field(description="Three short personality traits that shape how they argue.")


class OpponentInput(TypedDict):
    topic: str
    user_profile: dict


def listing(items: object) -> str:
    """A list for a prompt, comma-separated; "not given" when there is none."""
    if isinstance(items, list | tuple) and items:
        return ", ".join(str(i) for i in items)
    return "not given"


def usable_opponent(choice: object, user_name: str) -> dict | None:
    """The model's opponent as a profile dict, or None when it is unusable (blank, or the user themself)."""
    if not isinstance(choice, OpponentProfile):
        return None
    name = choice.name.strip()
    if not name or not choice.stance.strip() or name == user_name.strip():
        return None
    return {
        "name": clip(name, 60),
        "title": clip(choice.title, 80),
        "bio": clip(choice.bio, 300),
        "stance": clip(choice.stance, 300),
        "traits": [clip(t, 40) for t in choice.traits if t.strip()][:5],
    }


def select_opponent(
    *,
    system: str,
    prompt: str,
    fallback: Callable[[str, str], dict],
    context: type[RunContext] = RunContext,
    model_role: str | None = "opponent_model",
    temperature_role: str | None = "temperature",
    temperature: float | None = None,
    topic_key: str = "topic",
    user_key: str = "user_profile",
    output_key: str = "opponent_profile",
    label: str = "select_opponent",
):
    """Build an opponent-casting node: a persona suited to the topic and opposed to the user's likely stance.

    The model answers with an `OpponentProfile` (name, title, bio, stance, traits), written to `output_key`; an
    answer that fails, cannot be read or casts the user themself gives way to `fallback`, so the node never fails
    the run for it.

    Args:
        system, prompt: the caster's templates; `system` takes `{language}`, `prompt` takes `{topic}`,
            `{name}`, `{bio}`, `{traits}` and `{interests}` (the user's, from their profile's `softMemory`).
        fallback: the opponent when casting fails, from the topic and the user's name.
        context: the run context class the node reads; `model_role` and `temperature_role` name its
            fields giving the caster's model and temperature (None or a missing field: the run's model,
            and `temperature`).
        topic_key, user_key, output_key: the state keys it reads (topic, user profile) and writes.
        label: the usage label of its call.

    Returns:
        The async node `(state, runtime) -> update`.

    Example:
        ```python
        # The duel's casting (parley.graphs.duel), which reads its model from a DuelContext's `opponent_model`.
        pick_opponent = parley.select_opponent(system=prompts.SELECT_OPPONENT_SYSTEM,
                                               prompt=prompts.SELECT_OPPONENT_PROMPT,
                                               fallback=fallback_opponent, context=parley.DuelContext)
        builder.add_node("select_opponent", pick_opponent)
        ```
    """

    async def cast_opponent(state: dict[str, Any], runtime: Runtime) -> dict:
        """Choose an opponent suited to the topic and opposed to the user's likely stance, else a built-in persona."""
        ctx = context.of(runtime)
        topic, user = state[topic_key], state[user_key]
        memory = user.get("softMemory") or {}
        messages = [
            SystemMessage(system.format(language=topic_language(topic))),
            HumanMessage(prompt.format(
                topic=topic, name=user.get("name", ""), bio=user.get("bio") or "not given",
                traits=listing(memory.get("traits")), interests=listing(memory.get("interests")),
            )),
        ]
        model = ctx.structured(
            OpponentProfile, getattr(ctx, model_role, None) if model_role else None,
            temperature=getattr(ctx, temperature_role, temperature) if temperature_role else temperature, label=label,
        )

        def failed(exc: BaseException) -> None:
            log.warning("opponent selection failed for %r (%s: %s); using a built-in persona", topic,
                        type(exc).__name__, exc)

        choice = await ask_structured(model, messages, fallback=failed, fallback_on=is_unusable)
        profile = usable_opponent(choice, user.get("name", "")) if choice is not None else None
        if choice is not None and profile is None:
            log.warning("opponent selection for %r gave an unusable persona; using a built-in one", topic)
        profile = profile or fallback(topic, user.get("name", ""))
        emit({"event": "opponent", "opponentProfile": profile})
        return {output_key: profile}

    cast_opponent.__name__ = "select_opponent"
    return mark(cast_opponent, "select_opponent")
