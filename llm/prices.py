"""Prices of models: the built-in table (USD per million tokens) and how a model id finds its row.

A deployment amends the table with `PARLEY_HOME/prices.json` (`llm.factory.ModelFactory` reads that file).
"""

from __future__ import annotations

from dataclasses import dataclass

from parley.llm.providers import split_model_id

# USD per one million (input, output) tokens, keyed by model name without provider.
BUILTIN_PRICES: dict[str, tuple[float, float]] = {
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "o3": (2.00, 8.00),
    "o4-mini": (1.10, 4.40),
    "claude-opus-4-5": (5.00, 25.00),
    "claude-sonnet-4-5": (3.00, 15.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "gemini-2.5-pro": (1.25, 10.00),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-flash-lite": (0.10, 0.40),
    "gemini-2.0-flash": (0.10, 0.40),
    "llama-4-maverick": (0.27, 0.85),
    "llama-4-scout": (0.18, 0.59),
    "mistral-large-latest": (2.00, 6.00),
    "mistral-small-latest": (0.20, 0.60),
    "deepseek-chat": (0.27, 1.10),
    "deepseek-reasoner": (0.55, 2.19),
    "qwen3-235b-a22b": (0.20, 0.60),
    "smollm2": (0.0, 0.0),
}


@dataclass(frozen=True)
class Price:
    """USD per one million input and output tokens; `known` is False for models missing from the table."""

    input: float
    output: float
    known: bool

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


def lookup_price(model_id: str, prices: dict[str, tuple[float, float]]) -> Price:
    """Find a model's price by exact name, then by the longest table entry it starts with."""
    _, name = split_model_id(model_id)
    name = name.lower()
    if name in prices:
        return Price(*prices[name], known=True)
    prefixes = [key for key in prices if name.startswith(key)]
    if prefixes:
        return Price(*prices[max(prefixes, key=len)], known=True)
    return Price(0.0, 0.0, known=False)

