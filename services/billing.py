"""What a run costs its workspace, for every mode in one place: plan it, reserve it before the run, settle it
when the run ends.

Two purses:

- **credit** (USD): a chat completion reserves what its calls may cost before any model is called (every call it may
  make, retries and repairs included, each at its model's price with the prompt it will read and its output cap,
  at most its budget's `maxCost`; 402 when the balance cannot cover it) and is settled to the actual cost however it
  ends, so nothing beyond what was used is ever charged (`credit_reservation`, `reserve_credit`);
- the **token allowance**: a round-table question reserves the tokens of a minimum debate and is settled to the
  tokens used (`reserve_allowance`); a workflow run needs an allowance not used up and takes its tokens when it
  ends (`require_allowance`). A workspace without an allowance is unlimited.

A duel is charged neither; every run records its usage rows (one per model) when it ends. The rows, the credit and the
allowance count every call the run's models were paid for, whatever became of its answer (`llm.usage.CallRecorder`).

What was reserved for a run is its `Bill`, kept in the run's input (`input["bill"]`), so whichever worker ends the
run (the one that started it, or one that took it over) settles the same reservation: `settle`, which the run
engine's modes call (given to the engine as its `settle`: `runs/` knows no billing rules).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from parley.llm.budget import BudgetLimits, CallEstimate
from parley.llm.usage import UsageLedger
from parley.services.errors import CannotStart, PaymentRequired
from parley.store import workspaces as ws_store
from parley.store.usage import record_usage


@dataclass(frozen=True)
class Bill:
    """What a run is charged when it ends, and what was reserved for it.

    usage: the `mode` of its usage rows; request_id: their `requestId` (the run's id when None).
    credit: USD reserved from the credit, settled to the actual cost (None: not charged in credit).
    allowance: tokens reserved from the allowance, settled to the tokens used (None: none reserved).
    takes_allowance: the tokens used are taken from the allowance at the end (none reserved before).
    """

    usage: str
    request_id: str | None = None
    credit: float | None = None
    allowance: int | None = None
    takes_allowance: bool = False

    def dump(self) -> dict[str, Any]:
        """The bill as the run's input keeps it."""
        return asdict(self)


# --- plan -----------------------------------------------------------------------------------


def credit_reservation(calls: list[CallEstimate], limits: BudgetLimits | None = None) -> float:
    """USD to reserve for a run that may make `calls` (each its own model's estimate: its prompt, the answers it
    reads included, and its output cap, at its model's price): what they cost together, at most the run's
    `maxCost` (its budget refuses any call past that, `llm.budget.BudgetGuard`). Unpriced models cost 0."""
    total = sum(call.spend.cost for call in calls)
    if limits is not None and limits.max_cost is not None:
        total = min(total, limits.max_cost)
    return total


# --- reserve --------------------------------------------------------------------------------


async def reserve_credit(db: AsyncDatabase, workspace: str, amount: float, *, what: str, calls: int) -> float:
    """Reserve `amount` USD (what the `calls` model calls of `what` may cost, `credit_reservation`) from the
    workspace's credit; return what was reserved (0 for a free request).

    Raises:
        PaymentRequired: the balance cannot cover it (`insufficient_credits`).
    """
    if amount <= 0:
        return 0.0
    if await ws_store.reserve_credit(db, workspace, amount):
        return amount
    balance = (await ws_store.get_workspace(db, workspace)).get("creditUsd", 0.0)
    raise PaymentRequired(
        f"Insufficient credits: {what} reserves ${amount:.6f} (what its {calls} model calls may cost at most) and "
        f"workspace '{workspace}' has ${balance:.6f}. "
        f"Add credit with `parley workspaces credit {workspace} --add USD`.",
        code="insufficient_credits",
    )


async def reserve_allowance(db: AsyncDatabase, workspace: str, tokens: int, *, what: str) -> int | None:
    """Reserve `tokens` (the minimum of `what`) from the workspace's allowance; return them, or None when the
    allowance is unlimited (nothing reserved).

    Raises:
        CannotStart: the allowance cannot cover them (the round-table contract answers 500).
    """
    reserved = await ws_store.reserve_allowance(db, workspace, tokens)
    if reserved is False:
        left = (await ws_store.get_workspace(db, workspace)).get("allowanceTokens") or 0
        raise CannotStart(
            f"Insufficient token allowance: the workspace has {left} tokens left and {what} needs about "
            f"{tokens}. Raise it with `parley workspaces allowance {workspace} --set N`.")
    return tokens if reserved else None


async def require_allowance(db: AsyncDatabase, workspace: str) -> None:
    """Refuse a run whose tokens the allowance takes at the end when it is used up.

    Raises:
        PaymentRequired: the allowance is 0 (`allowance_exhausted`).
    """
    if (await ws_store.get_workspace(db, workspace)).get("allowanceTokens") == 0:
        raise PaymentRequired("The workspace's token allowance is used up", code="allowance_exhausted")


@contextlib.asynccontextmanager
async def released_on_failure(db: AsyncDatabase, workspace: str, bill: Bill) -> AsyncIterator[None]:
    """Give `bill`'s reservation back if the block fails: wrap everything between reserving and handing the bill to
    the run that settles it, so that no failure in between (a database refusal, a cancelled request) keeps any."""
    async with ws_store.released_on_failure(db, workspace, credit=bill.credit or 0.0, tokens=bill.allowance or 0):
        yield


# --- settle ---------------------------------------------------------------------------------


def bill_of(record: dict[str, Any]) -> Bill:
    """The run's bill; for a run started before runs carried one (resumed after an upgrade), what its mode
    reserved then: a panel's credit and a round table's allowance in `reserved`."""
    given = record["input"].get("bill")
    if given is not None:
        return Bill(**given)
    kind, reserved = record["kind"], record["input"].get("reserved")
    if kind == "panel":
        mode = record["input"]["plan"]["mode"]
        return Bill(usage="chat" if mode == "single" else mode, request_id=record["input"]["completion"]["id"],
                    credit=reserved or 0.0)
    return Bill(usage=kind, allowance=reserved if kind == "roundtable" else None, takes_allowance=kind == "workflow")


async def settle(db: AsyncDatabase, record: dict[str, Any], ledger: UsageLedger) -> int | None:
    """Bill the run `record` for what `ledger` recorded, however it ended: settle the credit reserved to the actual
    cost, record one usage row per model, settle (or take) the allowance; return the allowance left (None:
    unlimited, or not charged)."""
    bill = bill_of(record)
    workspace = record["workspace"]
    allowance = None  # the write that tells what is left of the allowance, if any
    if bill.allowance is not None:
        allowance = ws_store.settle_allowance(db, workspace, reserved=bill.allowance, actual=ledger.total_tokens)
    elif bill.takes_allowance and ledger.total_tokens:
        allowance = ws_store.consume_allowance(db, workspace, ledger.total_tokens)
    writes = [record_usage(db, workspace=workspace, user=record["user"], request_id=bill.request_id or record["_id"],
                           mode=bill.usage, ledger=ledger)]
    if bill.credit is not None and (bill.credit > 0 or ledger.total_cost > 0):
        writes.append(ws_store.settle_credit(db, workspace, reserved=bill.credit, actual=ledger.total_cost))
    # Each its own write, none waiting for another: the run's end (and its client) waits for the slowest only.
    left, *_ = await asyncio.gather(allowance or _nothing(), *writes)
    return left


async def _nothing() -> None:
    return None
