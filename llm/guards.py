"""The callbacks that refuse a model call before it is sent (`runs.stops.StopGuard`, `llm.budget.BudgetGuard`): a
guard decides when the call starts (`on_chat_model_start`), and the client raises its refusal (`raise_refusal`, in
`llm.client.BoundedChatOpenAI`, before anything is sent).

A guard once raised from its callback: LangChain's callback manager makes one coroutine per handler for a call's
start (`ahandle_event`) and awaits them in turn, so when one raised, those after it (the call recorder, tracing) were
never awaited (`RuntimeWarning: coroutine 'ahandle_event' was never awaited`) and never heard of the call. Raised
by the client, the refusal is a failed call as any other: every handler hears of its start and of its error.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import AsyncCallbackHandler


class CallRefused(RuntimeError):
    """A model call a guard refused before it was sent (no model was asked: not a failed call in the metrics)."""


# The refusal of the call being started in this context: (LangChain's run id of the call, the refusal). A guard's
# callback runs in place (`run_inline`), in the task that makes the call, before the client is asked to send it; the
# client takes it (LangChain's `astream` gives the client no run manager, hence the context, not the run manager).
_REFUSED: ContextVar[tuple[Any, CallRefused] | None] = ContextVar("parley_refused_call", default=None)


class Guard(AsyncCallbackHandler):
    """A callback that may refuse a model call: `refuse` from its `on_chat_model_start`, and the client raises it."""

    run_inline = True  # awaited in place: in the task that makes the call (and langchain-core makes no task per event)

    def refuse(self, run_id: Any, refusal: CallRefused) -> None:
        """Refuse the call `run_id` (LangChain's run id of the call); the first refusal of a call stands."""
        pending = _REFUSED.get()
        if pending is None or pending[0] != run_id:
            _REFUSED.set((run_id, refusal))

    async def on_llm_end(self, response: Any, *, run_id: Any = None, **kwargs: Any) -> None:
        _forget(run_id)  # answered without the client (from the response cache)

    async def on_llm_error(self, error: BaseException, *, run_id: Any = None, **kwargs: Any) -> None:
        _forget(run_id)


def _forget(run_id: Any) -> None:
    pending = _REFUSED.get()
    if pending is not None and pending[0] == run_id:
        _REFUSED.set(None)


def raise_refusal(run_manager: Any = None) -> None:
    """Raise the refusal of the call the client is about to send, when a guard refused it (`run_manager`: the call's,
    when LangChain gives the client one).

    Raises:
        CallRefused: the guard's (`runs.stops.RunStopped`, `llm.budget.BudgetExceeded`).
    """
    pending = _REFUSED.get()
    if pending is not None and (run_manager is None or pending[0] == getattr(run_manager, "run_id", None)):
        _REFUSED.set(None)
        raise pending[1]
