"""Prices of models: the built-in table (USD per million tokens) and how a model id finds its row.

A row is `(input, output)` or `(input, output, cached input)`: the price of a prompt token the provider read from its
prompt cache (a repeated prefix), where it charges less for one; without it a cached token costs as much as any other.
Reasoning tokens are output tokens and cost the output price. A deployment amends the table with
`PARLEY_HOME/prices.json` (`llm.factory.ModelFactory` reads that file; a row there takes two or three numbers).
"""

from __future__ import annotations

from dataclasses import dataclass

from parley.llm.providers import split_model_id

# USD per one million (input, output[, cached input]) tokens, keyed by model name without provider.
BUILTIN_PRICES: dict[str, tuple[float, ...]] = {
    "gpt-5": (1.25, 10.00, 0.125),
    "gpt-5-mini": (0.25, 2.00, 0.025),
    "gpt-5-nano": (0.05, 0.40, 0.005),
    "gpt-4.1": (2.00, 8.00, 0.50),
    "gpt-4.1-mini": (0.40, 1.60, 0.10),
    "gpt-4.1-nano": (0.10, 0.40, 0.025),
    "gpt-4o": (2.50, 10.00, 1.25),
    "gpt-4o-mini": (0.15, 0.60, 0.075),
    "o3": (2.00, 8.00, 0.50),
    "o4-mini": (1.10, 4.40, 0.275),
    "claude-opus-4-5": (5.00, 25.00, 0.50),
    "claude-sonnet-4-5": (3.00, 15.00, 0.30),
    "claude-haiku-4-5": (1.00, 5.00, 0.10),
    "claude-3-5-haiku": (0.80, 4.00, 0.08),
    "gemini-2.5-pro": (1.25, 10.00, 0.31),
    "gemini-2.5-flash": (0.30, 2.50, 0.03),
    "gemini-2.5-flash-lite": (0.10, 0.40, 0.01),
    "gemini-2.0-flash": (0.10, 0.40, 0.025),
    "llama-4-maverick": (0.27, 0.85),
    "llama-4-scout": (0.18, 0.59),
    "mistral-large-latest": (2.00, 6.00),
    "mistral-small-latest": (0.20, 0.60),
    "deepseek-chat": (0.27, 1.10, 0.07),
    "deepseek-reasoner": (0.55, 2.19, 0.14),
    "qwen3-235b-a22b": (0.20, 0.60),
    "smollm2": (0.0, 0.0),
}


@dataclass(frozen=True)
class Price:
    """USD per one million input, output and cached input tokens; `known` is False for models missing from the
    table. `cached_input` None: the provider charges a cached prompt token as any other."""

    input: float
    output: float
    known: bool
    cached_input: float | None = None

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        """USD of a call: `input_tokens` prompt tokens of which `cached_tokens` were read from the provider's prompt
        cache, and `output_tokens` (reasoning included)."""
        cached = min(max(cached_tokens, 0), input_tokens)
        cached_rate = self.input if self.cached_input is None else self.cached_input
        return ((input_tokens - cached) * self.input + cached * cached_rate + output_tokens * self.output) / 1_000_000


def price_of(row: tuple[float, ...] | list[float]) -> Price:
    """A table row, `(input, output)` or `(input, output, cached input)`, as a known `Price`."""
    return Price(float(row[0]), float(row[1]), known=True,
                 cached_input=float(row[2]) if len(row) > 2 and row[2] is not None else None)


def lookup_price(model_id: str, prices: dict[str, tuple[float, ...]]) -> Price:
    """Find a model's price by exact name, then by the longest table entry it starts with."""
    _, name = split_model_id(model_id)
    name = name.lower()
    if name in prices:
        return price_of(prices[name])
    prefixes = [key for key in prices if name.startswith(key)]
    if prefixes:
        return price_of(prices[max(prefixes, key=len)])
    return Price(0.0, 0.0, known=False)

