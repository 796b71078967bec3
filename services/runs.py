"""Every mode's runs, the same way: list those a key may see, read one, cancel one (`/v1/runs` and the MCP tools).

Who sees and stops which run is `services.access`'s rule; what a key may not see is not found.
"""

from __future__ import annotations

from typing import Any, Literal

from parley.core import clock
from parley.runs import RunEngine, RunNotFound
from parley.services import access
from parley.services.access import Principal
from parley.services.errors import Conflict, Forbidden, InvalidRequest, NotFound
from parley.store import runs as store

Kind = Literal["duel", "panel", "roundtable", "workflow"]
Status = Literal["queued", "running", "waiting", "completed", "failed", "cancelled"]


def public_run(record: dict, *, detail: bool = False) -> dict[str, Any]:
    """The client's view of a run (with `detail`, its input and result too)."""
    view = {
        "id": record["_id"], "kind": record["kind"], "status": record["status"], "title": record.get("title"),
        "user": record["user"], "createdAt": clock.iso(record["createdAt"]),
        "startedAt": clock.iso(record.get("startedAt")), "finishedAt": clock.iso(record.get("finishedAt")),
        "worker": record.get("worker"),
        "leaseUntil": clock.iso(record.get("leaseUntil")), "heartbeatAt": clock.iso(record.get("heartbeatAt")),
        "claims": record.get("claims", 1), "cancelRequested": bool(record.get("cancelRequested")),
        "usage": record.get("usage"), "ref": record.get("ref") or {}, "error": record.get("error"),
        "waiting": record.get("waiting"), "stoppedBy": record.get("stoppedBy"), "budget": record.get("budget"),
        "inputs": record.get("inputs", 0),
    }
    if detail:
        view.update(input=record.get("input"), result=record.get("result"))
    return view


async def visible_run(engine: RunEngine, principal: Principal, run_id: str, *, write: bool = False) -> dict:
    """The run `run_id` as stored, if the key may see it (and, with `write`, stop it).

    Raises:
        NotFound: `run_not_found`: no such run in the key's workspace, or one it may not see.
        Forbidden: (`write`) the key is read-only, lacks the kind's scope, or is neither the run's owner's nor an
            admin key (`not_run_owner`).
    """
    try:
        record = await engine.get(run_id, workspace=principal.workspace)
    except RunNotFound:
        record = None
    if record is None or not access.may_see(principal, record):
        raise NotFound(f"No run '{run_id}' in this workspace", code="run_not_found")
    if write:
        access.check_scope(principal, access.RULES[record["kind"]].scope, write=True)
        if not access.may_cancel(principal, record):
            raise Forbidden("Only the user who started this run, or an admin key, may steer or stop it",
                            code="not_run_owner")
    return record


async def list_runs(engine: RunEngine, principal: Principal, *, kind: Kind | None = None,
                    status: Status | None = None, limit: int = 20, cursor: str | None = None) -> dict[str, Any]:
    """One page of the runs of the key's workspace that it may see, newest first: `{data, nextCursor}`.

    Raises:
        InvalidRequest: `cursor` is not one this list gave.
    """
    visible = access.visible_runs(principal, [kind] if kind else list(access.RULES))
    try:
        rows, next_cursor = await store.list_runs(engine.db, visible=visible, status=status, limit=limit,
                                                  cursor=cursor)
    except ValueError as exc:
        raise InvalidRequest(f"cursor: {exc}") from exc
    return {"data": [public_run(r) for r in rows], "nextCursor": next_cursor}


async def cancel_run(engine: RunEngine, principal: Principal, run_id: str) -> dict[str, Any]:
    """Ask for the run to stop (`RunEngine.cancel`); return its view with `cancelRequested` set.

    Raises:
        NotFound, Forbidden: as `visible_run` with `write`.
        Conflict: `run_finished`: the run has already ended (or had finished and was being stored); `run` is its
            view.
    """
    record = await visible_run(engine, principal, run_id, write=True)
    if record["status"] not in store.FINISHED:
        record, accepted = await engine.cancel(run_id)
        if accepted:
            return public_run(record)
    # It ended, or had finished its work and its end was being stored when the request came.
    status = record["status"] if record["status"] in store.FINISHED else record.get("concluding")
    raise Conflict(f"Run '{run_id}' has already ended ({status})", code="run_finished", run=public_run(record))
