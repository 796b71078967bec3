"""One way to ask a model for a structured answer: retried on what may pass next time, else a fallback.

Every node that asks for a structured answer (an opponent, a verdict, a stance, a synthesis, memory
notes) goes through `ask_structured`. Retries are the node's own retry policy (`structured_retry`, on
`is_transient` failures and unreadable answers), so a retried attempt is a LangGraph attempt like any
other; the helper only decides, on a failure, whether to let it propagate (to be retried, or to fail
the run) or to answer with the caller's fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable
from langgraph.types import RetryPolicy

from parley.llm.budget import BudgetExceeded
from parley.llm.failures import MODEL_RETRY, UNREADABLE_ANSWER, is_model_failure, is_transient

T = TypeVar("T")


def is_unreadable(exc: BaseException) -> bool:
    """True for a structured answer that could not be read: bad JSON, a value out of range, cut off at the cap."""
    return isinstance(exc, UNREADABLE_ANSWER)


def is_unusable(exc: BaseException) -> bool:
    """True for an unreadable answer or a failed model call: either way there is no answer to use."""
    return is_unreadable(exc) or is_model_failure(exc)


def node_attempt(runtime: Any, default: int = 1) -> int:
    """Which attempt of the current node this is (1 for the first; `default` outside a graph)."""
    info = getattr(runtime, "execution_info", None)
    return info.node_attempt if info is not None else default


def structured_retry(attempts: int = 2) -> RetryPolicy:
    """The retry policy of a node asking for a structured answer: `attempts` in all, on a transient failure
    (`is_transient`) or an unreadable answer."""
    return RetryPolicy(
        max_attempts=attempts, initial_interval=MODEL_RETRY.initial_interval,
        retry_on=lambda exc: is_transient(exc) or is_unreadable(exc),
    )


async def ask_structured(
    model: Runnable,
    prompt: Sequence[BaseMessage],
    *,
    fallback: Callable[[BaseException], T] | None = None,
    fallback_on: Callable[[BaseException], bool] = is_unreadable,
    attempt: int = 1,
    attempts: int = 1,
) -> Any:
    """Ask `model` (a structured runnable, e.g. `RunContext.structured`) for its answer to `prompt`.

    A failure that `fallback_on` accepts gives `fallback(exc)`, but only on the last of `attempts`
    (`attempt` is the node's, see `node_attempt`): before it, the failure propagates so that the node's
    retry policy asks once more. A call the run's budget refused (`BudgetExceeded`) gives the fallback at once:
    asking again would be refused again, and the run ends well on a fallback (a stance unknown, a synthesis
    from the positions) rather than failing. Any other failure, or any failure without a `fallback`, propagates.
    """
    try:
        return await model.ainvoke(list(prompt))
    except BudgetExceeded as exc:
        if fallback is None:
            raise
        return fallback(exc)
    except Exception as exc:
        if fallback is None or not fallback_on(exc) or attempt < attempts:
            raise
        return fallback(exc)
