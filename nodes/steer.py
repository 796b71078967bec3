"""The `boundary` capability: where a running debate takes in what a person sent it, waits for them, or stops for
its budget before its synthesis.

Every mode's graph wires one boundary node where a step ends: the duel after each turn, the round table and the
multi-agent debate after each round, a workflow at its `await` nodes. At a boundary the node

1. takes in the inputs delivered to the run (`nodes.inbox.Steering`) that the state does not list as consumed, at
   most `MAX_INPUTS_PER_BOUNDARY` of them (the rest at the next boundary), in the order they were stored: each
   message becomes a turn of the person (`human_turn`: the one `chunk`, then a `human` event) that every agent
   sees from the next turn on;
2. decides whether the debate goes on: `end` sends it to its synthesis or verdict (`stopped_by: "user"`), and
   so does a budget that the next step (estimated from the last one) and the reserve for the synthesis would
   pass (`stopped_by: "budget"`, `llm.budget`);
3. waits (LangGraph `interrupt()`) when the run was started with `await` at this boundary or a `pause` is
   pending, until `continue`, `guide` (a message, then continue) or `end` comes; the run engine stores the
   run `waiting` meanwhile and resumes it with `Command(resume=input)` on whichever worker receives the answer;
4. writes what it consumed into the state (`SteerState`), so that the checkpoint holds it exactly once.

Nothing is sent before the wait: a resumed node runs again from its start, and the input that resumed it is
delivered to the inbox before the run goes on, so the node sees it there (or as `interrupt()`'s value).

Node events: `human` per message, `resumed` when a wait ends, `stopping` when the debate goes to its synthesis
early; the engine adds `waiting` when the run stops to wait.

A graph run with no steering and no budget in its context (an eval, a test) passes its boundaries untouched.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, TypeVar

from langgraph.runtime import Runtime
from langgraph.types import interrupt
from typing_extensions import TypedDict

from parley.core.limits import MAX_INPUTS_PER_BOUNDARY
from parley.llm.budget import CallEstimate, Spend
from parley.nodes.capability import mark
from parley.nodes.context import RunContext
from parley.nodes.events import event_writer
from parley.nodes.inbox import RELEASES
from parley.nodes.speak import Speaker, chunk_event

C = TypeVar("C", bound=RunContext)

# The next step is expected to cost (and reserve) what the last one did, and this much more: prompts grow as a
# debate goes on (round 1 reads round 0's positions).
NEXT_STEP_MARGIN = 1.5
HUMAN_ID = "human"  # the speaker id of a person's turns, in every mode


class SteerState(TypedDict, total=False):
    """The state keys a boundary writes; each graph that wires one adds them to its state."""

    human: Annotated[list[dict[str, Any]], operator.add]  # the person's messages taken in, in order
    consumed: Annotated[list[str], operator.add]  # the ids of every input taken in
    stopped_by: str  # why the debate went to its synthesis early: user, budget, unanimous
    passed: int  # the position of the last boundary passed after a wait
    mark: dict[str, Any]  # what the run had spent at the last boundary (`Spend.dump()`)


def human_speaker(user: str | None) -> Speaker:
    """The speaker of a person's turn."""
    return {"id": HUMAN_ID, "name": user or "user"}


def human_turn(given: dict[str, Any], *, round: int | None, position: int) -> dict[str, Any]:
    """Say a person's message as a turn: the one `chunk` event, then the `human` event; return the message.

    `position` is where the turn stands among the debate's own turns (the number said before it), `round` the
    round whose turns see it first.
    """
    write = event_writer()
    speaker = human_speaker(given.get("user"))
    content = str(given["content"])
    write(chunk_event(speaker, content, round=round))
    message = {"id": given["id"], "speaker": speaker, "content": content, "round": round, "position": position,
               "at": given.get("at"), "timestamp": given.get("timestamp") or int(time.time() * 1000)}
    write({"event": "human", **message})
    return message


def guidance_lines(messages: Sequence[dict[str, Any]], *, limit: int = 12, chars: int = 400) -> str:
    """A person's messages as prompt lines, in the order they were sent: the newest `limit`, each cut to `chars` (a
    prompt stays bounded however much is sent)."""
    return "\n".join(f"- {m['speaker']['name']}: {m['content'][:chars]}" for m in list(messages)[-limit:])


def next_step_fits(ctx: RunContext, state: dict[str, Any], reserve: Sequence[CallEstimate]) -> bool:
    """Whether the run's budget holds one more step and the reserve for the synthesis or verdict. The next step is
    expected to cost what the last one spent, and to reserve what the last one's calls reserved before they were
    made (the check each call passes, `llm.budget.Budget.admit`), both with a margin for prompts that grow."""
    budget = ctx.budget
    if budget is None or not budget.limits:
        return True
    mark = state.get("mark") or {}
    spent = (budget.spent() - Spend.load(mark)).scaled(NEXT_STEP_MARGIN)
    reserved = (budget.reserved - Spend.load(mark.get("reserved"))).scaled(NEXT_STEP_MARGIN)
    step = Spend(max(spent.tokens, reserved.tokens), max(spent.cost, reserved.cost), spent.seconds)
    final = Spend(sum(c.spend.tokens for c in reserve), sum(c.spend.cost for c in reserve), spent.seconds)
    return budget.fits(step + final)


def taken_in(pending: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The inputs a boundary takes in of those pending, in order: up to `MAX_INPUTS_PER_BOUNDARY` messages (the
    others at the next boundary), with the first later action that lets the run go on or ends it, so that a person's
    answer is never held behind a queue of messages."""
    taken, messages = [], 0
    for row in pending:
        if row.get("content"):
            if messages == MAX_INPUTS_PER_BOUNDARY:
                break
            messages += 1
        taken.append(row)
    if not any(row.get("action") in RELEASES for row in taken):
        taken += [row for row in pending[len(taken):] if row.get("action") in RELEASES][:1]
    return taken


def boundary(
    *,
    at: str,
    position: Callable[[Any], int],
    more: Callable[[Any, C], bool],
    round: Callable[[Any], int | None] = lambda state: None,
    reserve: Callable[[Any, C], Sequence[CallEstimate]] | None = None,
    always: bool = False,
    context: type[C] = RunContext,
    reads: type | None = None,
    name: str = "steer",
    doc: str | None = None,
) -> Callable[[Any, Runtime], Awaitable[dict[str, Any]]]:
    """Build the boundary node of a graph: where a person's input is taken in, the run waits, or the debate stops.

    At each pass it takes in what was sent to the run (`RunContext.steering`) and its state has not consumed, goes
    to the synthesis on `end` or when the budget (`RunContext.budget`) holds no more steps, and waits (LangGraph's
    `interrupt()`) where the run asked to; see the module's docstring. A run with neither steering nor budget
    passes straight through.

    Args:
        at: which boundary this is (`after_turn`, `after_round`, or a workflow node's id): the run waits here
            by itself when it was started with `await` equal to it.
        position: where the debate is (a duel's turns so far, a table's round): a boundary passed after a wait
            is not waited at again when its node runs again.
        more: whether another step follows (no wait and no early stop at the last boundary).
        round: the round a person's message taken in here is first seen in (for its events).
        reserve: the calls the synthesis or verdict will make, estimated (`ModelFactory.estimate`): kept free
            when the budget decides whether one more step fits.
        always: wait here at every pass (a workflow's `await` node), not only when the run's `await` names `at`.
        context, reads, name, doc: the run context class, the node's input schema, name and docstring.

    Returns:
        The async node `(state, runtime) -> update`: what it consumed (`SteerState`), and `stopped_by` when the
        debate stops early.

    Example:
        >>> import asyncio, parley
        >>> steer = parley.boundary(at="after_round", position=lambda state: state["round"],
        ...                         more=lambda state, ctx: state["round"] < 3)
        >>> asyncio.run(steer({"round": 1}, None))  # nobody steers this run and it has no budget
        {}

        In a graph, after each round (the round table's wiring, shortened):

        ```python
        builder.add_node("steer", steer)
        builder.add_edge("measure_convergence", "steer")
        builder.add_conditional_edges("steer", after_round, ["open_round", "synthesize"])
        ```
    """

    async def node(state: Any, runtime: Runtime) -> dict[str, Any]:
        ctx = context.of(runtime)
        steering = ctx.steering
        if steering is None and ctx.budget is None:
            return {}
        here = position(state)
        pending = taken_in(steering.pending(state.get("consumed") or [])) if steering else []
        goes_on = more(state, ctx) and not state.get("stopped_by")
        stop = None
        if goes_on and any(p.get("action") == "end" for p in pending):
            stop = "user"
        elif goes_on and not next_step_fits(ctx, state, reserve(state, ctx) if reserve else ()):
            stop = "budget"
        # A budget that holds no more steps ends the debate without waiting; an `end` is an answer to a wait.
        waits = (goes_on and stop != "budget" and steering is not None and state.get("passed") != here
                 and (always or steering.await_at == at or any(p.get("action") == "pause" for p in pending)))
        released = next((p for p in pending if p.get("action") in RELEASES), None)
        if waits and released is None:
            answer = interrupt({"at": at, "position": here, "round": round(state)})
            if isinstance(answer, dict) and answer.get("id"):
                if answer["id"] not in {p["id"] for p in pending}:
                    pending.append(answer)
                released = answer
            if released is not None and released.get("action") == "end":
                stop = "user"
        update: dict[str, Any] = {"consumed": [p["id"] for p in pending]}
        if ctx.budget is not None:
            update["mark"] = {**ctx.budget.spent().dump(), "reserved": ctx.budget.reserved.dump()}
        heard = [human_turn(p, round=round(state), position=here) for p in pending if p.get("content")]
        if heard:
            update["human"] = heard
        write = event_writer()
        if waits:
            update["passed"] = here
            by = released or {}
            write({"event": "resumed", "at": at, "position": here, "round": round(state), "action": by.get("action"),
                   "input": by.get("id"), "user": by.get("user"), "inputs": update["consumed"]})
        if stop is not None:
            update["stopped_by"] = stop
            figures = ctx.budget.figures() if ctx.budget is not None else {}
            write({"event": "stopping", "by": stop, "at": at, "position": here, "round": round(state),
                   "inputs": update["consumed"], **figures})
        return update

    node.__name__ = node.__qualname__ = name
    node.__doc__ = doc or "Take in what a person sent, wait for them if asked, or stop for the budget."
    node.__annotations__ = {"state": reads or dict, "runtime": Runtime, "return": dict}
    return mark(node, "boundary")
