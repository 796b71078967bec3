"""The callbacks that refuse a model call before it is sent (`runs.stops.StopGuard`, `llm.budget.BudgetGuard`): a
guard decides when the call starts (`on_chat_model_start`), and the client raises its refusal, or awaits what it must
wait for (`admit`, in `llm.client.BoundedChatOpenAI`, before anything is sent).

A guard once raised from its callback: LangChain's callback manager makes one coroutine per handler for a call's
start (`ahandle_event`) and awaits them in turn, so when one raised, those after it (the call recorder, tracing) were
never awaited (`RuntimeWarning: coroutine 'ahandle_event' was never awaited`) and never heard of the call; so did a
run's cancellation while its stop guard waited for its lease to be renewed. Raised
by the client, the refusal is a failed call as any other: every handler hears of its start and of its error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from langchain_core.callbacks import AsyncCallbackHandler


class CallRefused(RuntimeError):
    """A model call a guard refused before it was sent (no model was asked: not a failed call in the metrics)."""


# What the call being started in this context must pass before it is sent: (LangChain's run id of the call, the
# checks its guards deferred to the client). A guard's callback runs in place (`run_inline`), in the task that makes
# the call, before the client is asked to send it; the client awaits the checks (`admit`). Through the context, not
# the run manager: LangChain's `astream` gives the client none.
_PENDING: ContextVar[tuple[Any, list[Callable[[], Awaitable[None]]]] | None] = ContextVar("parley_call_checks",
                                                                                          default=None)


class Guard(AsyncCallbackHandler):
    """A callback that may refuse a model call, or make it wait: from its `on_chat_model_start` it `refuse`s it or
    `defer`s a check (anything it awaits, such as a lease's renewal), which the client makes before it sends the call.
    Nothing is raised or awaited at length in LangChain's dispatch: a raise, or a cancellation while a handler waits,
    would leave the coroutines of the handlers after it never awaited."""

    run_inline = True  # awaited in place: in the task that makes the call (and langchain-core makes no task per event)

    def defer(self, run_id: Any, check: Callable[[], Awaitable[None]]) -> None:
        """Have the client await `check` (which raises `CallRefused` to refuse it) before it sends the call `run_id`
        (LangChain's run id of the call)."""
        pending = _PENDING.get()
        if pending is None or pending[0] != run_id:
            _PENDING.set((run_id, [check]))
        else:
            pending[1].append(check)

    def refuse(self, run_id: Any, refusal: CallRefused) -> None:
        """Refuse the call `run_id`: the client raises `refusal` before it sends anything."""

        async def refused() -> None:
            raise refusal

        self.defer(run_id, refused)

    async def on_llm_end(self, response: Any, *, run_id: Any = None, **kwargs: Any) -> None:
        _forget(run_id)  # answered without the client (from the response cache)

    async def on_llm_error(self, error: BaseException, *, run_id: Any = None, **kwargs: Any) -> None:
        _forget(run_id)


def _forget(run_id: Any) -> None:
    pending = _PENDING.get()
    if pending is not None and pending[0] == run_id:
        _PENDING.set(None)


async def admit(run_manager: Any = None) -> None:
    """Make the checks the guards of the call the client is about to send deferred to it (`run_manager`: the call's,
    when LangChain gives the client one), in the order they were deferred.

    Raises:
        CallRefused: a guard's refusal (`runs.stops.RunStopped`, `llm.budget.BudgetExceeded`).
    """
    pending = _PENDING.get()
    if pending is None or (run_manager is not None and pending[0] != getattr(run_manager, "run_id", None)):
        return
    _PENDING.set(None)
    for check in pending[1]:
        await check()
