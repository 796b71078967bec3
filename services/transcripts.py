"""A run's transcript as Markdown, for any mode: what was said, by whom, and how it ended (the MCP resource
`parley://runs/{id}`).

It is read from the run's stored events, as a listener replaying the run sees them (a resumed run's void turns
left out), so a run still going shows what it has said so far.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from parley.core import clock
from parley.runs import Event, RunEngine
from parley.runs.events import listener_view
from parley.runs.modes.roundtable import render_synthesis
from parley.services.access import Principal
from parley.services.runs import visible_run
from parley.store import runs as store

KIND_NAMES = {"duel": "Duel", "panel": "Panel", "roundtable": "Round table", "workflow": "Workflow"}


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in str(text).splitlines() or [""])


def _json(value: Any) -> str:
    return "```json\n" + json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n```"


def _bullets(title: str, items: Iterable[Any] | None) -> list[str]:
    items = list(items or [])
    return [f"**{title}:**", *(f"- {item}" for item in items), ""] if items else []


def _tool_calls(message: dict) -> list[str]:
    """The tools a turn called (its message's `toolCalls`), one line each: the call, then its result."""
    lines = []
    for call in message.get("toolCalls") or []:
        failed = " (failed)" if call.get("isError") else ""
        result = " ".join(str(call.get("result") or "").split())
        lines.append(f"- Called `{call['name']}({call.get('arguments') or ''})`{failed}: {result[:300]}")
    return [*lines, ""] if lines else []


def _duel(record: dict, events: list[Event]) -> list[str]:
    lines: list[str] = []
    turn, names = 0, {}
    for event in events:
        data = event.data
        if event.event == "init":
            user, opponent = data["userProfile"], data["opponentProfile"]
            names = {"user": user["name"], "opponent": opponent["name"]}
            lines += [f"**{user['name']}** (you) against **{opponent['name']}**"
                      + (f", {opponent['title'].rstrip('.')}" if opponent.get("title") else "") + ".", ""]
        elif event.event == "message":
            turn += 1
            if data["role"] == "user":
                lines += [f"## Round {(turn + 1) // 2}", ""]
            lines += [f"**{data['name']}:**", "", *_tool_calls(data), _quote(data["content"]), ""]
        elif event.event == "synthesis":
            winner = data.get("winner")
            lines += ["## Verdict", "", f"**Winner:** {names[winner]} ({winner})" if winner in names
                      else "**Winner:** none (a tie)", ""]
            if data.get("winnerReason"):
                lines += [data["winnerReason"], ""]
            if data.get("conclusion"):
                lines += [f"**Conclusion:** {data['conclusion']}", ""]
            lines += _bullets("Consensus", data.get("consensus")) + _bullets("Disagreements", data.get("disagreements"))
            lines += _bullets("Recommendations", data.get("recommendations"))
    return lines


def _roundtable(record: dict, events: list[Event]) -> list[str]:
    lines: list[str] = []
    for event in events:
        data = event.data
        if event.event == "round_start":
            lines += [f"## Round {data['roundNumber']} ({data['phase']})", ""]
        elif event.event == "message":
            who = data["agentName"] + (" (devil's advocate)" if data.get("isDevilsAdvocate") else "")
            role = f", {data['agentRole']}" if data.get("agentRole") else ""
            lines += [f"**{who}**{role}: {data['stance']}, confidence {data['confidence']}", "",
                      *_tool_calls(data), _quote(data["content"]), ""]
        elif event.event == "convergence":
            lines += [f"*Convergence {data['score']:.2f} (threshold {data['threshold']}): "
                      f"{'converged' if data['converged'] else 'not converged'}.*", ""]
        elif event.event == "synthesis":
            lines += [f"## Synthesis after {data['totalRounds']} rounds", "", render_synthesis(data["synthesis"]), ""]
    return lines


def _panel(record: dict, events: list[Event]) -> list[str]:
    lines: list[str] = []
    for event in events:
        data = event.data
        if event.event == "panelist":
            if data["success"]:
                lines += [f"### {data['model']} ({data['latencyMs']} ms, {data['tokens']} tokens)", "",
                          *_tool_calls(data), _quote(data.get("answer") or ""), ""]
            else:
                lines += [f"### {data['model']}: failed ({data['error']})", ""]
        elif event.event == "panelists":
            lines += ["## Panel", "", ", ".join(data["models"]), ""]
        elif event.event == "done":
            completion = data["completion"]
            lines += [f"## Answer ({completion['model']})", "", completion["choices"][0]["message"]["content"], ""]
    return lines


def _workflow(record: dict, events: list[Event]) -> list[str]:
    lines: list[str] = []
    if record.get("input", {}).get("initial"):
        lines += ["## Input", "", _json(record["input"]["initial"]), ""]
    for event in events:
        data = event.data
        if event.event == "node_end":
            lines += [f"## Node `{data['node']}`", "", _json(data.get("output")), ""]
        elif event.event == "done":
            lines += ["## Final state", "", _json(data.get("state")), ""]
    return lines


RENDER: dict[str, Callable[[dict, list[Event]], list[str]]] = {
    "duel": _duel, "panel": _panel, "roundtable": _roundtable, "workflow": _workflow,
}


def _ending(record: dict) -> list[str]:
    if record["status"] == "failed":
        return ["## Failed", "", (record.get("error") or {}).get("message", "The run failed."), ""]
    if record["status"] == "cancelled":
        return ["## Cancelled", "", "The run was stopped before it finished.", ""]
    if record["status"] in ("queued", "running"):
        return ["*Still running: this is what it has said so far.*", ""]
    return []


async def run_transcript(engine: RunEngine, principal: Principal, run_id: str) -> str:
    """The run's transcript as Markdown, if the key may see the run.

    Raises:
        NotFound: as `services.runs.visible_run`.
    """
    record = await visible_run(engine, principal, run_id)
    events = listener_view(await store.all_events(engine.db, run_id=run_id), after=-1)
    started = clock.iso(record["createdAt"])
    head = [f"# {record.get('title') or run_id}", "",
            f"{KIND_NAMES[record['kind']]} · {record['status']} · run `{run_id}` · started {started}", ""]
    return "\n".join(head + RENDER[record["kind"]](record, events) + _ending(record)).rstrip() + "\n"
