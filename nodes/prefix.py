"""A seat's prompt in cache-friendly order: what stays the same for the seat from call to call first, what changes last.

Providers read a repeated prompt prefix from their cache at a fraction of the price (OpenAI by itself from 1,024
tokens, Anthropic-family models at `cache_control` breakpoints), and llama.cpp reuses a cached prefix instead of
reading it again. A debate calls each seat once a round with the same instructions and a transcript that only grows,
so the duel, the round table and the multi-agent debate build every turn's prompt here:

    [SystemMessage(stable), HumanMessage(earlier[0]), HumanMessage(earlier[1]), ..., HumanMessage(ask)]

- `stable`: the seat's instructions, persona, the topic and its documents — byte-identical on each of its calls;
- `earlier`: the material of earlier turns or rounds, one message each, in order; a later call repeats these
  messages as they were and appends the new ones;
- `ask`: what is new to this call (the round, the cue, the steering of the person who asked) — always last.

The context guard (`llm.tokens.context_guard`) cuts a prompt that does not fit from the oldest of `earlier`, keeping
`stable` and `ask`: a prompt that fits is sent whole, its prefix intact.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage


def stable_first(stable: str, earlier: Sequence[str], ask: str) -> list[BaseMessage]:
    """Messages of a seat's call: `stable` as the system message, each of `earlier` in order, then `ask`.

    Args:
        stable: what the seat is told on every call, identical from call to call (no round number, no counter).
        earlier: one text per earlier turn or round, oldest first; each rendered the same on every later call.
        ask: the new material and the request of this call.
    """
    return [SystemMessage(stable), *(HumanMessage(text) for text in earlier), HumanMessage(ask)]
