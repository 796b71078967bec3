"""MCP tasks as Parley runs (`api/mcp_tasks.py` speaks the protocol): a task is the run a task-augmented `tools/call`
started, under the run's id, stored in MongoDB (`store.mcp_tasks`), so that any worker answers for any task, before
and after the one that started it stops.

A task's status is its run's: `queued`/`running` → `working`, `waiting` (for a person) → `input_required`, and the
run's end as it is, except that a run someone asked to cancel is `cancelled` at once (MCP: a task is cancelled before
`tasks/cancel` answers, and stays so). Its `statusMessage` is the run's latest step (`services.progress`), what it
waits for, or why it failed. Who may see a task is who may see its run (`services.access`, through
`services.runs.visible_run` and `access.visible_runs`): another user's or workspace's task is not found.
"""

from __future__ import annotations

from typing import Any

from parley.core import clock
from parley.core.limits import MCP_TASK_MAX_TTL_MS, MCP_TASK_POLL_INTERVAL_MS, MCP_TASK_TTL_MS, MCP_TASKS_PAGE
from parley.runs import RunEngine
from parley.services import access
from parley.services import runs as run_service
from parley.services.access import Principal
from parley.services.errors import Conflict, InvalidRequest, NotFound
from parley.services.progress import progress_line
from parley.store import mcp_tasks as store
from parley.store import runs as run_store

STATUS = {"queued": "working", "running": "working", "waiting": "input_required", "completed": "completed",
          "failed": "failed", "cancelled": "cancelled"}
TERMINAL = ("completed", "failed", "cancelled")


class TaskNotFound(NotFound):
    code = "task_not_found"


def ttl_of(asked: int | None) -> int:
    """The ttl a task gets (milliseconds): the one asked for, within `MCP_TASK_MAX_TTL_MS`; `MCP_TASK_TTL_MS` when
    none is."""
    if asked is None or asked <= 0:
        return MCP_TASK_TTL_MS
    return min(asked, MCP_TASK_MAX_TTL_MS)


def status_of(run: dict) -> str:
    """The task status of the run `run`."""
    if run.get("cancelRequested") and run["status"] not in ("completed", "failed"):
        return "cancelled"
    return STATUS[run["status"]]


def waiting_message(run: dict) -> str:
    """What a task waiting for a person says: where its run waits, and how to answer."""
    where = run.get("waiting") or {}
    at = where.get("at") or where.get("node") or "a boundary"
    round_ = f", round {where['round']}" if where.get("round") is not None else ""
    return (f"The run waits for a person ({at}{round_}): answer with the tool steer_run "
            f'{{"runId": "{run["_id"]}", "action": "continue"}} (or "guide" with "content", or "end"), '
            f"or POST /v1/runs/{run['_id']}/input")


async def latest_step(engine: RunEngine, run: dict) -> tuple[str | None, int]:
    """The run's latest step as the progress notifications word it (None: none stored yet), and the number of its
    last stored event (-1: none)."""
    events = await run_store.last_events(engine.db, run_id=run["_id"])
    for event in reversed(events):
        if not event.get("void") and (line := progress_line(run["kind"], event["event"], event.get("data") or {})):
            return line, events[-1]["seq"]
    return None, events[-1]["seq"] if events else -1


async def status_message(engine: RunEngine, run: dict, *, latest: bool = True) -> str | None:
    """The task's `statusMessage`: why it stopped (failed, cancelled), what it waits for, or (`latest`) its run's
    latest step."""
    status = status_of(run)
    if status == "cancelled":
        return "The task was cancelled"
    if status == "failed":
        return (run.get("error") or {}).get("message") or "The run failed"
    if status == "input_required":
        return waiting_message(run)
    if not latest:
        return None
    line, _ = await latest_step(engine, run)
    return line or ("started" if status == "working" else status)


def view(task: dict, run: dict, message: str | None) -> dict[str, Any]:
    """The task as MCP shows it (the `Task` object's fields)."""
    updated = max(filter(None, (run.get("updatedAt"), run.get("finishedAt"), task["createdAt"])))
    return {"taskId": task["_id"], "status": status_of(run), "statusMessage": message,
            "createdAt": clock.iso(task["createdAt"]), "lastUpdatedAt": clock.iso(updated), "ttl": task["ttlMs"],
            "pollInterval": MCP_TASK_POLL_INTERVAL_MS}


async def open_task(engine: RunEngine, principal: Principal, *, run_id: str, tool: str,
                    ttl_ms: int | None) -> dict[str, Any]:
    """Store the task of a run a tool has just started; return it as MCP shows it."""
    run = await engine.get(run_id, workspace=principal.workspace)
    task = await store.create_task(engine.db, run=run, tool=tool, ttl_ms=ttl_of(ttl_ms))
    return view(task, run, "started")


async def visible_task(engine: RunEngine, principal: Principal, task_id: str) -> tuple[dict, dict]:
    """The task `task_id` and its run's record, when the key may see the run.

    Raises:
        TaskNotFound: no such task (or it has expired), or one of a run the key may not see.
    """
    task = await store.get_task(engine.db, task_id=task_id, workspace=principal.workspace)
    if task is not None:
        try:
            return task, await run_service.visible_run(engine, principal, task_id)
        except NotFound:
            pass
    raise TaskNotFound(f"Task not found: {task_id!r} (none of this key's, or it has expired)")


async def get_task(engine: RunEngine, principal: Principal, task_id: str) -> dict[str, Any]:
    """The task as `tasks/get` shows it.

    Raises:
        TaskNotFound: as `visible_task`.
    """
    task, run = await visible_task(engine, principal, task_id)
    return view(task, run, await status_message(engine, run))


async def list_tasks(engine: RunEngine, principal: Principal, cursor: str | None) -> tuple[list[dict], str | None]:
    """One page of the tasks the key may see (those of runs it may see), newest first, and the next page's cursor.

    Raises:
        InvalidRequest: `cursor` is not one this list gave.
    """
    visible = access.visible_runs(principal, list(access.RULES))
    try:
        tasks, next_cursor = await store.list_tasks(engine.db, visible=visible, limit=MCP_TASKS_PAGE, cursor=cursor)
    except ValueError as exc:
        raise InvalidRequest(f"cursor: {exc}") from exc
    runs = await store.runs_of(engine.db, [task["_id"] for task in tasks])
    return [view(task, runs[task["_id"]], await status_message(engine, runs[task["_id"]], latest=False))
            for task in tasks if task["_id"] in runs], next_cursor


async def cancel_task(engine: RunEngine, principal: Principal, task_id: str) -> dict[str, Any]:
    """Cancel the task's run (`services.runs.cancel_run`); return the task, `cancelled`.

    Raises:
        TaskNotFound: as `visible_task`.
        Conflict: `task_finished`: the task has already ended (MCP refuses to cancel a terminal task).
        Forbidden: as `cancel_run` (a read-only key, not the run's owner's nor an admin key).
    """
    task, run = await visible_task(engine, principal, task_id)
    if status_of(run) in TERMINAL:
        raise Conflict(f"Cannot cancel task: already in terminal status '{status_of(run)}'", code="task_finished")
    try:
        await run_service.cancel_run(engine, principal, task_id)
    except Conflict as exc:  # it ended meanwhile
        raise Conflict(f"Cannot cancel task: it has already ended ({exc.message})", code="task_finished") from exc
    run = await engine.get(task_id)
    return view(task, run, await status_message(engine, run))
