"""The per-run context every Parley graph takes (`context_schema=`): which models to call, where usage goes, the
run's budget (checked before every model call) and its steering (what a person sent it).

Nodes read it through `Runtime[...]`, so a test or a designer workflow swaps the model factory or
picks per-node models without touching node code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Self, TypeVar

from langchain_core.caches import BaseCache
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
    """Say which models a run calls and collect what they cost: the context every Parley graph takes.

    Pass it as `graph.ainvoke(..., context=...)`; each mode's context (`DuelContext`, `PanelContext`,
    `RoundTableContext`, ...) extends it with its own knobs, and a mode given a plain `RunContext` (a node of your
    graph, a nested mode) reads it widened, keeping these fields (`RunContext.of`).

    Args:
        models: the model factory (endpoint, provider table, prices); None: the process-wide one built from the
            environment.
        model: the run's default model (`provider:model`); None: the factory's (`OPENAI_MODEL`).
        ledger: where the usage of every model call of the run lands.
        budget: what the run may spend, checked before every model call; None: no limit.
        steering: what a person sent the run (`nodes.steer`); None: nobody steers it.
        tools: where the speakers' granted tools come from; None: no speaker has tools.
        streamed: whether answers are read as they are written (False: an answer offered no tools is asked whole).
        reasoning: the reasoning effort of each seat, by its label (an agent, a panelist) or its model id, a label's
            first; `"*"` for every other call (`ModelFactory.chat`'s `reasoning_effort`). Empty: none is asked.
        response_cache: answers of earlier identical calls (LangChain's `BaseCache`, `store.response_cache`): a call
            at temperature 0 is answered from it when it holds one. None: every call goes to its model.

    Example:
        >>> import parley
        >>> context = parley.RunContext(model="openai:gpt-4o-mini")
        >>> context.model_id(), context.ledger.total_tokens
        ('openai:gpt-4o-mini', 0)

        Run a graph with it, then read its usage (docs/python.md, own_endpoint.py and usage.py):

        ```python
        context = parley.RunContext(models=parley.ModelFactory(settings))
        out = await graph.ainvoke(inputs, context=context)
        context.ledger.total_tokens, context.ledger.total_cost, context.ledger.by_model()
        ```
    """

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
    # The reasoning effort of each seat, by label or model id (a label's first; "*": every other call).
    reasoning: dict[str, str] = field(default_factory=dict)
    # Answers of earlier identical calls at temperature 0 (the request's opt-in); None: every call goes to its model.
    response_cache: BaseCache | None = None

    @classmethod
    def of(cls, runtime: Any) -> Self:
        """This run's context as `cls`: the caller's own; a plain RunContext widened (keeping its models, model,
        ledger, budget, steering, tools, `streamed`, reasoning and response cache, with this mode's default knobs); or
        fresh defaults when the caller passed none."""
        ctx = getattr(runtime, "context", None)
        if isinstance(ctx, cls):
            return ctx
        if isinstance(ctx, RunContext):
            return cls(**ctx.carried(), budget=ctx.budget, steering=ctx.steering, tools=ctx.tools,
                       streamed=ctx.streamed)
        return cls()

    def carried(self) -> dict[str, Any]:
        """What a run's nested mode keeps of this context (`cls(**ctx.carried(), <its knobs>)`): the models and
        default model, the ledger, the reasoning efforts and the response cache."""
        return {"models": self.models, "model": self.model, "ledger": self.ledger, "reasoning": self.reasoning,
                "response_cache": self.response_cache}

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
        seat: str | None = None,
    ) -> Runnable:
        """A chat model for `model` (else this run's model, else the deployment default), billed to this run and
        checked against its budget; offered `tools` and asked for `answer_format` when given (`ModelFactory.chat`);
        asked for the reasoning effort of `seat` (a speaker's id), else of `label`, else of the model (`reasoning`)."""
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
            reasoning_effort=self.reasoning_effort(model, seat, label),
            cache=self.response_cache,
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
            reasoning_effort=self.reasoning_effort(model, label),
            cache=self.response_cache,
        )

    def reasoning_effort(self, model: str | None = None, *seats: str | None) -> str | None:
        """The reasoning effort a call to `model` by `seats` (a speaker's id, a label: the first found wins) asks for
        (`reasoning`): a seat's, else the model's, else `"*"`'s when the model takes one; None: none is asked."""
        if not self.reasoning:
            return None
        model_id = self.model_id(model)
        for key in (*seats, model_id):
            if key is not None and key in self.reasoning:
                return self.reasoning[key]
        if "*" in self.reasoning and self.factory.reasoning_problem(model_id, self.reasoning["*"]) is None:
            return self.reasoning["*"]
        return None

    def model_id(self, model: str | None = None) -> str:
        """The model id a call with `model` would use."""
        return model or self.model or self.factory.default_model
