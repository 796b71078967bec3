"""The fan-out: one task per branch, all sent at once on LangGraph's `Send`, gathered in task order.

    spread = FanOut("panelist", results_key="panelist_results", min_successes=2, tolerate=is_model_failure,
                    failure=record_failure)
    builder.add_node("panelist", panelist, **spread.node_options(then="tally", retry=MODEL_RETRY))
    builder.add_conditional_edges("choose_panelists", spread.dispatch(panel_tasks), ["panelist"])
    ...
    answered = spread.gather(state, too_few=TooFewPanelistsError)  # in `tally`

A branch's failure that `tolerate` accepts (once its retry policy gave up) is recorded through
`failure(task, exc)` as a result of its own, so its siblings' answers are kept; any other failure
fails the step. `timeout` caps each branch attempt's wall clock (LangGraph raises `NodeTimeoutError`,
a "timeout" failure); `min_successes` is how many branches must succeed for `gather` to go on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.errors import NodeError
from langgraph.types import Command, RetryPolicy, Send

from parley.nodes.capability import mark

Task = Mapping[str, Any]


class TooFewSuccessesError(RuntimeError):
    """Fewer branches of a fan-out succeeded than it needs; `results` holds every branch's result."""

    def __init__(self, results: Sequence[Mapping[str, Any]], needed: int) -> None:
        self.results, self.needed = list(results), needed
        answered = sum(1 for r in self.results if r.get("success", True))
        super().__init__(f"Only {answered} of {len(self.results)} branches succeeded ({needed} needed)")


@dataclass(frozen=True, kw_only=True)
class FanOut:
    """Run one branch node per task, all at once (LangGraph's `Send`), and gather their results in task order.

    Each branch writes one result (a dict with the task's `index_key`) to the list `results_key`; `dispatch` is the
    router that sends the tasks, `node_options` the branch node's `add_node` keywords (retry, timeout, and the error
    handler recording a tolerated failure), and `gather` the results in task order, once enough succeeded.

    Args:
        node: the branch node's name, or a function giving it for each task.
        results_key: the state key (a list with `operator.add`) each branch writes its one result to;
            `gather` reads it.
        timeout: wall-clock seconds of each branch attempt (None: none beyond the model calls' own).
        min_successes: branches that must succeed; None means all of them.
        tolerate: the failure classes recorded rather than fatal (e.g. `is_model_failure`); None: none.
        failure: the result recorded for a tolerated failure, from the task and the exception.
        index_key: the task key giving a branch's place, by which `gather` orders results.
        success_key: the result key saying whether a branch succeeded (a result without it succeeded).

    Raises:
        ValueError: a fan-out that tolerates failures without `failure` and `results_key` to record them, or a
            negative `min_successes`.

    Example:
        >>> import parley
        >>> advice = parley.FanOut(node="adviser", results_key="advice")
        >>> [send.node for send in advice.send([{"index": 0, "role": "cfo"}, {"index": 1, "role": "cto"}])]
        ['adviser', 'adviser']
        >>> advice.gather({"advice": [{"index": 1, "answer": "Wait."}, {"index": 0, "answer": "Go."}]})
        [{'index': 0, 'answer': 'Go.'}, {'index': 1, 'answer': 'Wait.'}]

        In a graph (docs/python.md, council.py), with `ask_everyone(state)` returning the tasks (add
        `**advice.node_options(then=..., retry=...)` to the branch node for a retry policy or a timeout):

        ```python
        builder.add_node("adviser", adviser)
        builder.add_conditional_edges(START, advice.dispatch(ask_everyone), ["adviser"])
        ```
    """

    node: str | Callable[[Task], str]
    results_key: str | None = None
    timeout: float | None = None
    min_successes: int | None = None
    tolerate: Callable[[BaseException], bool] | None = None
    failure: Callable[[Task, BaseException], Mapping[str, Any]] | None = None
    index_key: str = "index"
    success_key: str = "success"

    def __post_init__(self) -> None:
        if self.tolerate is not None and (self.failure is None or self.results_key is None):
            raise ValueError("a fan-out that tolerates failures needs `failure` and `results_key` to record them")
        if self.min_successes is not None and self.min_successes < 0:
            raise ValueError(f"min_successes cannot be negative, not {self.min_successes}")

    def node_of(self, task: Task) -> str:
        return self.node(task) if callable(self.node) else self.node

    def send(self, tasks: Iterable[Task]) -> list[Send]:
        """One `Send` per task, to its branch node."""
        return [Send(self.node_of(task), task) for task in tasks]

    def dispatch(self, tasks: Callable[..., Iterable[Task]], *, name: str | None = None,
                 doc: str | None = None) -> Callable[..., list[Send]]:
        """The routing function (for `add_conditional_edges`) sending the tasks `tasks(state, ...)` returns, named
        `name` (else after `tasks`)."""

        def fan_out(state: Any, *args: Any, **kwargs: Any) -> list[Send]:
            return self.send(tasks(state, *args, **kwargs))

        # Its signature is `tasks`' (LangGraph passes `runtime`, `config` ... by the parameters it sees).
        functools.update_wrapper(fan_out, tasks)
        fan_out.__name__ = fan_out.__qualname__ = name or getattr(tasks, "__name__", "fan_out")
        fan_out.__doc__ = doc or tasks.__doc__
        return mark(fan_out, "fan_out")

    def node_options(self, *, then: str | None = None, retry: RetryPolicy | None = None) -> dict[str, Any]:
        """`add_node` keywords of the branch node: its retry policy, its timeout and, when failures are
        tolerated, the error handler that records one and goes on to `then` (the node after the branches)."""
        options: dict[str, Any] = {}
        if retry is not None:
            options["retry_policy"] = retry
        if self.timeout is not None:
            options["timeout"] = self.timeout
        if self.tolerate is not None:
            if then is None:
                raise ValueError("a fan-out that tolerates failures needs `then`, the node after its branches")
            options["error_handler"] = self.failed(then=then)
        return options

    def failed(self, *, then: str) -> Callable[[Any, NodeError], Any]:
        """The branch node's error handler: record a tolerated failure and go on to `then`; raise any other.

        LangGraph drops a whole parallel step when one branch raises; routing the exhausted failure here
        keeps the siblings' answers. The explicit `goto` matters: a handler's writes do not fire the failed
        node's outgoing edge, so without it a fan-out where every branch failed would just stop.
        """
        tolerate, failure, key = self.tolerate, self.failure, self.results_key

        async def record_failure(task: Any, error: NodeError) -> Command:
            """Record why a branch failed and go on with the others' results."""
            if tolerate is None or failure is None or not tolerate(error.error):
                raise error.error
            return Command(goto=then, update={key: [dict(failure(task, error.error))]})

        return record_failure

    def gather(
        self,
        state: Mapping[str, Any],
        *,
        needed: int | None = None,
        too_few: Callable[[list[dict[str, Any]], int], BaseException] = TooFewSuccessesError,
    ) -> list[dict[str, Any]]:
        """Every branch's result in task order; raises `too_few(results, needed)` when fewer than `needed`
        (this fan-out's `min_successes`, at least 1; every result when None) succeeded."""
        if self.results_key is None:
            raise ValueError("gather needs the fan-out's results_key")
        results = sorted(state.get(self.results_key) or [], key=lambda r: r[self.index_key])
        needed = self.min_successes if needed is None else needed
        succeeded = sum(1 for r in results if r.get(self.success_key, True))
        if needed is None:
            if succeeded < len(results) or not results:
                raise too_few(results, len(results))
        elif succeeded < max(needed, 1):
            raise too_few(results, needed)
        return results
