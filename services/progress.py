"""What a run's events say to someone waiting for its answer: one line per step, for every mode.

The chat completions stream sends them as SSE comments; the MCP tools as progress notifications. A model call that
waits in its endpoint's line (`queued`: the embedded model answers one call at a time) is a step of every mode.
Streamed text (`chunk`), the terminal events and a resumed run's `retract` are not steps: they have no line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Line = Callable[[dict[str, Any]], str | None]


def plural(count: int, noun: str) -> str:
    """`1 contradiction`, `2 contradictions`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _panelist(event: dict[str, Any]) -> str:
    if event["success"]:
        return f"panelist {event['model']} answered in {event['latencyMs']} ms ({event['tokens']} tokens)"
    return f"panelist {event['model']} failed: {event['error']} ({event.get('detail', '')})"


def _speaker_turn(event: dict[str, Any]) -> str:
    return f"{event['name']} has spoken"


def _table_turn(event: dict[str, Any]) -> str:
    who = event["agentName"] + (" (devil's advocate)" if event.get("isDevilsAdvocate") else "")
    return f"round {event['roundNumber']}: {who} has spoken ({event['stance']}, confidence {event['confidence']})"


def _convergence(event: dict[str, Any]) -> str:
    reached = "converged" if event["converged"] else "not converged"
    return f"round {event['roundNumber']}: convergence {event['score']:.2f} ({reached}, threshold {event['threshold']})"


def _depth(event: dict[str, Any]) -> str:
    seats = len(event["firstSeats"])
    if event["path"] == "agreed":
        then = "asking the rest anyway (shadow)" if event.get("shadow") else "deciding on them"
        return (f"adaptive: the first {seats} seats agree ({event['agreement']:.2f} ≥ {event['threshold']:.2f}); "
                f"{then}")
    return (f"adaptive: the first {seats} seats disagree ({event['agreement']:.2f} < {event['threshold']:.2f}); "
            "asking the rest of the panel")


def _analysis(event: dict[str, Any]) -> str:
    return (f"agreement {event['agreement']:.2f}: {plural(len(event['consensus']), 'shared point')}, "
            f"{plural(len(event['contradictions']), 'contradiction')}")


def _decision(event: dict[str, Any]) -> str:
    if event.get("reason"):
        return f"rule {event['rule']}: {event['reason']}"
    if event["decidedBy"] == "none":
        return f"rule {event['rule']}: the answers, labelled"
    if event["decidedBy"] == "agreement":
        return f"the first seats agreed: {event['winner']}'s answer, as written"
    return f"rule {event['rule']}: {event['decidedBy']} chose {event.get('winner') or event.get('model')}"


def queued_line(event: dict[str, Any]) -> str:
    """A call waiting in its endpoint's line (`queued`): who it is for, the model, and its place in line."""
    who = (event.get("speaker") or {}).get("name") or "a call"
    return f"{who} waits for {event['model']} (#{event['position']} in line)"


LINES: dict[str, dict[str, Line]] = {
    "duel": {
        "init": lambda e: f"opponent: {e['opponentProfile']['name']}",
        "start": lambda e: f"{e['name']} is speaking",
        "message": _speaker_turn,
        "synthesizing": lambda e: "the judges are deciding",
        "synthesis": lambda e: f"verdict: {e.get('winner')}",
        "queued": queued_line,
    },
    "panel": {
        "panelists": lambda e: "panel: " + ", ".join(e["models"]),
        "panelist": _panelist,
        # A panelist's own calls (its router's tools); the answer's tool calls are its content, not steps.
        "tool_call": lambda e: f"panelist {e['speaker']['name']} calls {e['name']}" if e.get("speaker") else None,
        "tool_result": lambda e: "panelist {} got {}'s {}".format(
            e["speaker"]["name"], e["name"], "error" if e.get("isError") else "result") if e.get("speaker") else None,
        "answering": lambda e: f"{e['role']} {e['model']} is answering",
        "fallback": lambda e: f"{e['role']} {e['model']} failed: {e['error']} ({e['detail']}); trying the next one",
        "decision": _decision,
        "depth": _depth,
        "analysis": _analysis,
        "queued": queued_line,
    },
    "roundtable": {
        "round_start": lambda e: (f"round {e['roundNumber']} ({e['phase']}): "
                                  + ", ".join(a["agentName"] for a in e["agents"])),
        "message": _table_turn,
        "convergence": _convergence,
        "synthesis": lambda e: f"synthesis after {e['totalRounds']} rounds",
        "queued": queued_line,
    },
    "workflow": {
        "node_start": lambda e: f"node {e['node']} ({e['type']}) started"
                                + (f", attempt {e['attempt']}" if e.get("attempt", 1) > 1 else ""),
        "node_end": lambda e: f"node {e['node']} finished",
        "queued": queued_line,
    },
}


def progress_line(kind: str, event: str, data: dict[str, Any]) -> str | None:
    """The line for event `event` (payload `data`) of a run of `kind`, or None for an event that is not a step."""
    line = LINES.get(kind, {}).get(event)
    return line(data) if line else None
