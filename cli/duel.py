"""`parley debate`: run a duel through the run engine, as `POST /api/debate` does (stored, and listed in History), and
stream its events in the terminal; with `--steer`, you add your own messages, or end it, after every turn
(docs/steering.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from parley.cli.common import (
    MAX_COST,
    MAX_SECONDS,
    MAX_TOKENS,
    ask_at_boundary,
    budget_fields,
    check_model_options,
    console,
    database_uri,
    fail,
    model_factory,
    show_stopped,
)
from parley.cli.runs import RunFailed, WireEvent, failure_of, follow_run, principal, run_here
from parley.core.limits import DEFAULT_DUEL_ROUNDS, MAX_DUEL_ROUNDS, MIN_DUEL_ROUNDS
from parley.core.settings import get_settings
from parley.services import duel as service
from parley.services.backend import Backend
from parley.services.errors import ServiceError
from parley.store import debates as debate_store

COLOURS = {"user": "bold cyan", "opponent": "bold magenta"}


def register(app: typer.Typer) -> None:
    """Add `debate` to the `parley` command."""
    app.command("debate")(debate)


def debate(
    topic: str = typer.Argument(..., help="The question to debate."),
    name: str = typer.Option("You", "--name", help="Your name; your persona agent argues as you."),
    bio: str = typer.Option(None, "--bio", help="A line about you, which shapes your agent's arguments."),
    rounds: int = typer.Option(DEFAULT_DUEL_ROUNDS, "--rounds", min=MIN_DUEL_ROUNDS, max=MAX_DUEL_ROUNDS,
                               help="Rounds; each is one turn per side."),
    trait: list[str] = typer.Option(None, "--trait", help="A personality trait (repeatable)."),
    interest: list[str] = typer.Option(None, "--interest", help="An interest (repeatable)."),
    model: str = typer.Option(None, "--model", help="Model id (`provider:model`); the default model when omitted."),
    steer: bool = typer.Option(False, "--steer", help="After every turn, wait for you: a message for the next "
                                                      "turns, Enter to go on, or /end for the verdict."),
    max_tokens: int = MAX_TOKENS,
    max_cost: float = MAX_COST,
    max_seconds: float = MAX_SECONDS,
) -> None:
    """Debate TOPIC: your persona agent against an opponent chosen for it, then a judge's verdict.

    The debate is stored for user `local` in workspace `default`, as one the API started (History lists it).
    """
    settings = get_settings()
    check_model_options("--model", model)
    model_id = model or settings.default_model
    profile = {"name": name, "bio": bio, "softMemory": {"traits": trait or [], "interests": interest or []}}
    try:
        request = service.check_debate_request({
            "topic": topic, "userProfile": profile, "rounds": rounds, "await": "after_turn" if steer else None,
            **budget_fields(max_tokens, max_cost, max_seconds)})
    except ServiceError as exc:
        raise fail(exc.message, code=2) from exc
    request = dataclasses.replace(request, model=model_id)

    async def run(backend: Backend) -> tuple[dict, dict, dict]:
        debate = await service.start_duel(backend.runs, principal().caller, request)
        # Your messages are sent as `name`, the persona's (the API sends them as the key's user).
        events = follow_run(backend.runs, debate["_id"], user=name, ask=ask_at_boundary if steer else None)
        done = await render_duel(events, rounds)
        stored = await debate_store.get_debate(backend.db, debate_id=debate["_id"])
        return done, stored, await backend.runs.get(debate["_id"])

    with database_uri() as uri, model_factory([model_id]) as factory:
        try:
            done, stored, record = run_here(uri, factory, run)
        except ServiceError as exc:  # refused before it started: a budget too small for one round
            raise fail(exc.message, code=2) from exc
        except RunFailed as exc:
            raise fail(str(exc)) from exc
    show_synthesis(stored)
    show_stopped(done.get("stoppedBy"), record.get("budget"))
    usage = record.get("usage") or {}
    console.print(f"[dim]{model_id}: {usage.get('calls', 0)} calls, {usage.get('totalTokens', 0)} tokens, "
                  f"${usage.get('costUsd', 0):.6f}; debate {record['_id']}[/]", soft_wrap=True)


async def render_duel(events: AsyncIterator[WireEvent], rounds: int) -> dict[str, Any]:
    """Print a duel's wire events as they come (the opponent, each round's turns as they stream, a person's messages,
    the judging); return the `done` payload.

    Raises:
        RunFailed: the duel ended with `error` or `cancelled`, or without `done`.
    """
    said, shown_round, speaking = 0, 0, None  # turns said; the round shown; the side whose turn is printing
    async for event, data in events:
        if event == "init":
            opponent = data["opponentProfile"]
            console.print(f"[bold]{escape(data['topic'])}[/]")
            console.print(f"{escape(data['userProfile']['name'])} vs [bold magenta]{escape(opponent['name'])}[/], "
                          f"{escape(opponent.get('title', ''))}")
            console.print(f"[dim]{escape(opponent.get('stance', ''))}[/]")
        elif event == "start" and speaking != data["role"]:
            speaking = data["role"]
            if said // 2 + 1 != shown_round:  # a round is one turn per side
                shown_round = said // 2 + 1
                console.rule(f"Round {shown_round} of {rounds}")
            console.print(f"[{COLOURS[data['role']]}]{escape(data['name'])}:[/] ", end="")
        elif event == "chunk":
            console.print(data["content"], end="", markup=False, highlight=False)
        elif event == "message":
            said, speaking = said + 1, None
            console.print()
        elif event == "human":
            console.print(f"[bold green]{escape(data['name'])} (you):[/] {escape(data['content'])}")
        elif event == "synthesizing":
            console.rule("Judging (twice, with the speakers' order swapped)")
        elif event == "done":
            return data
        elif (failure := failure_of(event, data)) is not None:
            if speaking:
                console.print()  # the error line goes under the turn it cut short
            raise failure
    raise RunFailed("the debate ended without a result")


def show_synthesis(debate: dict) -> None:
    """Print a stored debate's verdict as a table."""
    synthesis = debate["synthesis"]
    names = {"user": debate["userProfile"]["name"], "opponent": debate["opponentProfile"]["name"], "tie": "tie"}
    table = Table(title="Synthesis", show_header=False, expand=True)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row("Winner", names.get(synthesis["winner"], synthesis["winner"]))
    table.add_row("Why", synthesis["winnerReason"])
    table.add_row("Conclusion", synthesis["conclusion"])
    table.add_row("Consensus", "\n".join(f"• {item}" for item in synthesis["consensus"]) or "—")
    table.add_row("Disagreements", "\n".join(f"• {item}" for item in synthesis["disagreements"]) or "—")
    table.add_row("Recommendations", "\n".join(f"• {item}" for item in synthesis["recommendations"]) or "—")
    verdicts = ", ".join(f"{v['order'].replace('_', ' ')} → {names.get(v['winner'], v['winner'])}"
                         for v in sorted(debate.get("verdicts") or [], key=lambda v: v["order"] != "as_debated"))
    if verdicts:
        table.add_row("Judgements", verdicts)
    console.print(table)
