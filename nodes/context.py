"""The per-run context every Parley graph takes (`context_schema=`): which models to call, where usage goes, the
run's budget (checked before every model call) and its steering (what a person sent it).

Nodes read it through `Runtime[...]`, so a test or a designer workflow swaps the model factory or
picks per-node models without touching node code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Self, TypeVar

from langchain_core.runnables import Runnable
from pydantic import BaseModel

from parley.llm.budget import Budget
from parley.llm.factory import ModelFactory
from parley.llm.formats import AnswerFormat
from parley.llm.tools import ToolSet
from parley.llm.usage import UsageLedger
from parley.nodes.inbox import Steering

if TYPE_CHECKING:
    from parley.nodes.tools import ToolAccess

SchemaT = TypeVar("SchemaT", bound=BaseModel)


@lru_cache
def default_factory() -> ModelFactory:
    """The process-wide model factory built from deployment settings."""
    return ModelFactory()


@dataclass(kw_only=True)
class RunContext:
    """Knobs shared by every graph's run; each mode's context extends it with its own."""

    models: ModelFactory | None = None
    model: str | None = None
    ledger: UsageLedger = field(default_factory=UsageLedger)
    # What the run may spend: every model call made through this context is checked against it first.
    budget: Budget | None = None
    # What a person sent the run, and where it waits for them (`nodes.steer`); None: nobody steers it.
    steering: Steering | None = None
    # Where the speakers' granted tools come from (set by the run's mode); None: no speaker has tools.
    tools: ToolAccess | None = None
    # Whether someone reads the run's answers as they are written. False (a client waiting for the whole answer):
    # an answer offered no tools is asked for in one piece rather than streamed, which costs a fraction of the CPU
    # (`nodes.arbitrate.stream_first_answer`, `nodes.speak.say`'s `whole`).
    streamed: bool = True

    @classmethod
    def of(cls, runtime: Any) -> Self:
        """This run's context as `cls`: the caller's own; a plain RunContext widened (keeping its models, model,
        ledger, budget, steering, tools and `streamed`, with this mode's default knobs); or fresh defaults when the
        caller passed none."""
        ctx = getattr(runtime, "context", None)
        if isinstance(ctx, cls):
            return ctx
        if isinstance(ctx, RunContext):
            return cls(models=ctx.models, model=ctx.model, ledger=ctx.ledger, budget=ctx.budget,
                       steering=ctx.steering, tools=ctx.tools, streamed=ctx.streamed)
        return cls()

    @property
    def factory(self) -> ModelFactory:
        return self.models or default_factory()

    def chat(
        self,
        model: str | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        label: str | None = None,
        tools: ToolSet | None = None,
        answer_format: AnswerFormat | None = None,
    ) -> Runnable:
        """A chat model for `model` (else this run's model, else the deployment default), billed to this run and
        checked against its budget; offered `tools` and asked for `answer_format` when given (`ModelFactory.chat`)."""
        return self.factory.chat(
            model or self.model,
            temperature=temperature,
            max_tokens=max_tokens,
            timeout=timeout,
            ledger=self.ledger,
            label=label,
            budget=self.budget,
            tools=tools,
            answer_format=answer_format,
        )

    def structured(
        self,
        schema: type[SchemaT],
        model: str | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float | None = None,
        label: str | None = None,
    ) -> Runnable:
        """A model answering with an instance of `schema`, billed to this run and checked against its budget."""
        return self.factory.structured(
            schema,
            model or self.model,
            temperature=temperature,
            max_tokens=max_tokens,
            timeout=timeout,
            ledger=self.ledger,
            label=label,
            budget=self.budget,
        )

    def model_id(self, model: str | None = None) -> str:
        """The model id a call with `model` would use."""
        return model or self.model or self.factory.default_model
