"""Budgets: a run's limits on tokens, cost and seconds, what it has spent, and the check every model call passes.

A `Budget` reads what the run spent from its usage ledger (the calls made, as their servers counted them) and
its clock (the seconds the run has been active: time spent waiting for a person does not count). Two checks
use it:

- before every model call (`BudgetGuard`, bound by `ModelFactory` to every model of a run that has a budget):
  the call is refused (`BudgetExceeded`) when what was spent plus the call's reserved estimate (its prompt
  and its output cap, at the model's price) would pass `maxTokens` or `maxCost`. This is the hard cap;
- before every step (`nodes.steer`, at a turn's or a round's end): when the next step, estimated from the
  last one, and the reserve for the synthesis or verdict would pass a limit, the graph goes to its
  synthesis instead (`stoppedBy: "budget"`). `maxSeconds` is checked there only: a step under way is not cut.

    budget = Budget(BudgetLimits(max_cost=0.05), ledger)
    budget.fits(Spend(tokens=900, cost=0.004))
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage
from pydantic import BaseModel

from parley.llm.guards import CallRefused, Guard
from parley.llm.prices import Price
from parley.llm.tokens import approx_tokens
from parley.llm.usage import UsageLedger, usd

# Output tokens reserved for a call that sets no cap of its own and answers no bounded schema.
UNCAPPED_OUTPUT_TOKENS = 512
# Reserved for a string of a structured answer that its schema does not bound, and a list's items when unbounded.
UNBOUNDED_STRING_TOKENS, UNBOUNDED_ITEMS = 128, 4
# A prompt's estimate (`approx_tokens`) may fall short of what the server counts: reserve this much more.
PROMPT_MARGIN = 1.25

FIELDS = {"maxTokens": "max_tokens", "maxCost": "max_cost", "maxSeconds": "max_seconds"}


class InvalidBudget(ValueError):
    """A budget that is not one: a limit that is not a positive number, or an unknown field. `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class BudgetExceeded(CallRefused):
    """A model call refused before it was sent: it would take the run past its budget."""

    def __init__(self, message: str, *, figures: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.figures = figures or {}


@dataclass(frozen=True)
class Spend:
    """Tokens, USD and seconds: what was spent, or what a step is expected to take."""

    tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0

    def __add__(self, other: Spend) -> Spend:
        return Spend(self.tokens + other.tokens, self.cost + other.cost, self.seconds + other.seconds)

    def __sub__(self, other: Spend) -> Spend:
        return Spend(max(0, self.tokens - other.tokens), max(0.0, self.cost - other.cost),
                     max(0.0, self.seconds - other.seconds))

    def scaled(self, factor: float) -> Spend:
        return Spend(math.ceil(self.tokens * factor), self.cost * factor, self.seconds * factor)

    def dump(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "costUsd": usd(self.cost), "seconds": round(self.seconds, 3)}

    @classmethod
    def load(cls, row: Mapping[str, Any] | None) -> Spend:
        row = row or {}
        return cls(int(row.get("tokens", 0)), float(row.get("costUsd", 0.0)), float(row.get("seconds", 0.0)))


@dataclass(frozen=True)
class BudgetLimits:
    """What a run may spend: tokens, USD, active seconds (None: no limit of that kind)."""

    max_tokens: int | None = None
    max_cost: float | None = None
    max_seconds: float | None = None

    def __bool__(self) -> bool:
        return any(value is not None for value in (self.max_tokens, self.max_cost, self.max_seconds))

    @classmethod
    def parse(cls, value: Any, *, where: str = "") -> BudgetLimits:
        """The limits of a JSON object `{"maxTokens", "maxCost", "maxSeconds"}` (each optional).

        Raises:
            InvalidBudget: not an object, an unknown field, or a limit that is not a positive number
                (`maxTokens` an integer).
        """
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise InvalidBudget(where or "budget", "must be an object with maxTokens, maxCost and/or maxSeconds")
        unknown = sorted(set(value) - set(FIELDS))
        if unknown:
            raise InvalidBudget(f"{where}{unknown[0]}", f"unknown budget field (use {', '.join(FIELDS)})")
        return cls(**{FIELDS[name]: limit(name, value.get(name), where=where) for name in FIELDS})

    def dump(self) -> dict[str, Any]:
        """The limits set, as the API writes them."""
        return {name: getattr(self, attr) for name, attr in FIELDS.items() if getattr(self, attr) is not None}

    def over(self, default: BudgetLimits) -> BudgetLimits:
        """These limits, each one not set taken from `default` (a workspace's)."""
        return BudgetLimits(*(getattr(self, attr) if getattr(self, attr) is not None else getattr(default, attr)
                              for attr in FIELDS.values()))

    def short_of(self, need: Spend) -> list[str]:
        """The limits (API names) that `need` would pass."""
        short = []
        if self.max_tokens is not None and need.tokens > self.max_tokens:
            short.append("maxTokens")
        if self.max_cost is not None and need.cost > self.max_cost:
            short.append("maxCost")
        if self.max_seconds is not None and need.seconds > self.max_seconds:
            short.append("maxSeconds")
        return short


def limit(name: str, value: Any, *, where: str = "") -> int | float | None:
    """One limit as given (None when absent), checked: a positive number, `maxTokens` a whole one."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise InvalidBudget(f"{where}{name}", "must be a positive number")
    if name == "maxTokens":
        if isinstance(value, float) and not value.is_integer():
            raise InvalidBudget(f"{where}{name}", "must be a whole number of tokens")
        return int(value)
    return float(value)


@dataclass(frozen=True)
class CallEstimate:
    """A model call's reserved estimate: its prompt and output cap, in tokens, at `price`."""

    prompt_tokens: int
    output_tokens: int
    price: Price

    @property
    def spend(self) -> Spend:
        return Spend(self.prompt_tokens + self.output_tokens, self.price.cost(self.prompt_tokens, self.output_tokens))


def estimate_call(messages: Sequence[BaseMessage] | int, max_tokens: int | None, price: Price,
                  schema: type[BaseModel] | None = None) -> CallEstimate:
    """What a call reserves: its prompt (messages, or their token count), with a margin for the estimate's error,
    and its output: its cap, else the largest answer its `schema` allows (`schema_tokens`), else
    `UNCAPPED_OUTPUT_TOKENS`."""
    prompt = messages if isinstance(messages, int) else approx_tokens(messages)
    output = max_tokens or (schema_tokens(schema.model_json_schema()) if schema is not None else UNCAPPED_OUTPUT_TOKENS)
    return CallEstimate(math.ceil(prompt * PROMPT_MARGIN), output, price)


def schema_tokens(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None, depth: int = 0) -> int:
    """The tokens of the largest JSON answer a JSON Schema allows, roughly: its strings' `maxLength` (a token every
    three characters), its lists' `maxItems`, its keys and punctuation; what it leaves unbounded counts
    `UNBOUNDED_STRING_TOKENS` a string and `UNBOUNDED_ITEMS` items a list. Parley's structured answers bound their
    fields (`nodes.bounds`), so a stance reserves tens of tokens and a synthesis hundreds."""
    root = root if root is not None else schema
    if depth > 8:
        return UNBOUNDED_STRING_TOKENS
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return schema_tokens((root.get("$defs") or {}).get(name, {}), root, depth + 1)
    options = schema.get("anyOf") or schema.get("oneOf") or schema.get("allOf")
    if options:
        return max(schema_tokens(option, root, depth + 1) for option in options)
    if "enum" in schema:
        return max(len(str(value)) for value in schema["enum"]) // 3 + 2
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return 2 + sum(len(key) // 3 + 2 + schema_tokens(sub, root, depth + 1)
                       for key, sub in (schema.get("properties") or {}).items())
    if kind == "array":
        items = schema.get("maxItems", UNBOUNDED_ITEMS)
        return 2 + items * (1 + schema_tokens(schema.get("items") or {}, root, depth + 1))
    if kind == "string":
        return schema["maxLength"] // 3 + 2 if "maxLength" in schema else UNBOUNDED_STRING_TOKENS
    return 4  # a number, a boolean, null


@dataclass
class Budget:
    """A run's limits, what it spent (its `ledger`, and `clock`: its active seconds), what the calls under way have
    reserved, and the checks.

    `reserved` adds up the reserved estimates of every call admitted so far (a boundary compares the last step's
    with what it spent, `nodes.steer.next_step_fits`); `in_flight` those of the calls not ended yet, which count as
    spent until they end, so calls made at once (a round's seats) cannot pass a limit together.
    """

    limits: BudgetLimits
    ledger: UsageLedger
    clock: Callable[[], float] = field(default_factory=lambda: _since(time.monotonic()))
    reserved: Spend = field(default_factory=Spend)
    in_flight: dict[Any, Spend] = field(default_factory=dict)

    def spent(self) -> Spend:
        return Spend(self.ledger.total_tokens, self.ledger.total_cost, self.clock())

    def committed(self) -> Spend:
        """What was spent, and what the calls under way may still spend."""
        pending = Spend(sum(s.tokens for s in self.in_flight.values()), sum(s.cost for s in self.in_flight.values()))
        return self.spent() + pending

    def fits(self, more: Spend) -> bool:
        """Whether spending `more` on top of what was spent (and reserved by calls under way) stays within every
        limit."""
        return not self.limits.short_of(self.committed() + more)

    def admit(self, call: CallEstimate, what: str, key: Any = None) -> None:
        """Refuse a model call whose reserved estimate would take the run past `maxTokens` or `maxCost`, counting
        the calls under way at their reserved estimates; else hold its reservation (under `key`) until `release`.

        Raises:
            BudgetExceeded: naming the limit, with the figures.
        """
        committed = self.committed()
        need = committed + call.spend
        short = [name for name in self.limits.short_of(Spend(need.tokens, need.cost)) if name != "maxSeconds"]
        if short:
            raise BudgetExceeded(
                f"{what} was not made: its reserved estimate ({call.spend.tokens} tokens, ${call.spend.cost:.6f}) "
                f"would take the run past its {short[0]} ({self.limits.dump()[short[0]]}); it has spent or reserved "
                f"{committed.tokens} tokens, ${committed.cost:.6f}", figures=self.figures())
        self.reserved = self.reserved + call.spend
        self.in_flight[key if key is not None else object()] = call.spend

    def release(self, key: Any) -> None:
        """A call ended (its usage is in the ledger now, or it failed): drop its reservation."""
        self.in_flight.pop(key, None)

    def figures(self) -> dict[str, Any]:
        """The limits and what was spent, as run records and events carry them."""
        return {"limits": self.limits.dump(), "spent": self.spent().dump()}


def _since(start: float) -> Callable[[], float]:
    return lambda: time.monotonic() - start


class BudgetGuard(Guard):
    """Refuse a model call of a run with a budget before it is sent (see `Budget.admit`), and hold its reservation
    until it ends.

    `ModelFactory` binds one to every model it builds for a run that has a budget, after the call recorder (which
    records the call's usage before its reservation is dropped): the one place every model call passes.
    """

    def __init__(self, budget: Budget, *, model_id: str, price: Price, max_tokens: int | None,
                 schema: type[BaseModel] | None = None) -> None:
        self.budget, self.model_id, self.price, self.max_tokens = budget, model_id, price, max_tokens
        self.schema = schema

    async def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], *, run_id: Any = None,
                                  **kwargs: Any) -> None:
        prompt = sum(approx_tokens(batch) for batch in messages)
        try:
            self.budget.admit(estimate_call(prompt, self.max_tokens, self.price, self.schema),
                              f"A call to {self.model_id}", key=run_id)
        except BudgetExceeded as refusal:  # raised by the client before it sends anything (`llm.guards`)
            self.refuse(run_id, refusal)

    async def on_llm_end(self, response: Any, *, run_id: Any = None, **kwargs: Any) -> None:
        await super().on_llm_end(response, run_id=run_id)
        self.budget.release(run_id)

    async def on_llm_error(self, error: BaseException, *, run_id: Any = None, **kwargs: Any) -> None:
        await super().on_llm_error(error, run_id=run_id)
        self.budget.release(run_id)
