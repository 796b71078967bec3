"""`parley debate`: run a duel in-process (no HTTP, no database) and stream it in the terminal; with `--steer`, you
add your own messages, or end it, after every turn (docs/steering.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import typer
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from rich.markup import escape
from rich.table import Table

from parley.cli.common import (
    MAX_COST,
    MAX_SECONDS,
    MAX_TOKENS,
    ask_at_boundary,
    budget_fields,
    console,
    fail,
    model_factory,
    show_stopped,
)
from parley.core import clock
from parley.core.limits import DEFAULT_DUEL_ROUNDS, MAX_DUEL_ROUNDS, MIN_DUEL_ROUNDS
from parley.core.settings import get_settings
from parley.graphs.duel import DuelContext, build_duel_graph, graph, minimum_calls
from parley.llm.budget import Budget, BudgetLimits, InvalidBudget
from parley.llm.failures import ModelError, failure_message
from parley.nodes.inbox import Steering
from parley.services import steering
from parley.services.errors import ServiceError

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
    """Debate TOPIC: your persona agent against an opponent chosen for it, then a judge's verdict."""
    settings = get_settings()
    model_id = model or settings.default_model
    profile = {"name": name, "bio": bio, "softMemory": {"traits": trait or [], "interests": interest or []}}
    try:
        limits = BudgetLimits.parse(budget_fields(max_tokens, max_cost, max_seconds))
    except InvalidBudget as exc:
        raise fail(str(exc), code=2) from exc
    with model_factory([model_id]) as factory:
        context = DuelContext(models=factory, model=model_id, rounds=rounds,
                              steering=Steering(await_at="after_turn") if steer else None)
        try:
            if limits:
                inputs = {"topic": topic, "user_profile": profile, "rounds": rounds}
                steering.require_minimum(limits, steering.spend_of(minimum_calls(inputs, context)),
                                         what="one round of this duel and its verdict")
                context.budget = Budget(limits, context.ledger)
            result = asyncio.run(stream_debate(topic, profile, context))
        except ServiceError as exc:
            raise fail(exc.message, code=2) from exc
        except ModelError as exc:
            raise fail(failure_message(exc)) from exc
        except openai.OpenAIError as exc:
            raise fail(failure_message(exc, model="the model call failed: {detail}")) from exc
    show_synthesis(result)
    show_stopped(result.get("stopped_by"), context.budget.figures() if context.budget else None)
    ledger = context.ledger
    console.print(f"[dim]{model_id}: {len(ledger.records)} calls, {ledger.total_tokens} tokens, "
                  f"${ledger.total_cost:.6f}[/]")


async def stream_debate(topic: str, profile: dict, context: DuelContext) -> dict:
    """Run the duel graph, printing turns as they stream; return its final state. With the context's steering, the
    graph (checkpointed in memory) stops after every turn and the person at the terminal answers
    (`ask_at_boundary`), which resumes it (`Command(resume=...)`)."""
    state: dict = {"topic": topic, "user_profile": profile, "messages": [], "verdicts": [], "human": []}
    steered = context.steering is not None
    compiled = build_duel_graph().compile(checkpointer=InMemorySaver()) if steered else graph
    config = {"configurable": {"thread_id": "parley-debate"}}
    shown: dict[str, Any] = {"round": 0, "speaking": None}
    inputs: Any = {"topic": topic, "user_profile": profile, "rounds": context.rounds}
    while True:
        waiting = None
        async for mode, payload in compiled.astream(inputs, config, context=context,
                                                    stream_mode=["custom", "updates"]):
            if mode == "updates" and "__interrupt__" in payload:
                waiting = payload["__interrupt__"][0].value
            elif mode == "updates":
                show_update(payload, state, topic, profile)
            else:
                show_event(payload, shown)
        if waiting is None:
            return state
        reply = await asyncio.to_thread(ask_at_boundary, f"after turn {waiting['position']}")
        given = {"id": f"in_{len(context.steering.inbox)}", "user": profile["name"],
                 "at": clock.iso(clock.now()), **reply}
        context.steering.deliver([given])
        inputs = Command(resume=given)


def show_update(payload: dict, state: dict, topic: str, profile: dict) -> None:
    """Fold one step's update into `state`; announce the opponent once chosen."""
    for node, update in payload.items():
        for key, value in (update or {}).items():
            state[key] = state.get(key, []) + value if key in ("messages", "verdicts", "human", "consumed") else value
        if node == "select_opponent":
            opponent = update["opponent_profile"]
            console.print(f"[bold]{topic}[/]")
            console.print(f"{profile['name']} vs [bold magenta]{opponent['name']}[/], {opponent.get('title', '')}")
            console.print(f"[dim]{opponent.get('stance', '')}[/]")


def show_event(payload: dict, shown: dict[str, Any]) -> None:
    """Print one of the graph's events: a turn as it streams, a person's message, the judging."""
    kind = payload.get("event")
    if kind == "start" and shown["speaking"] != payload["role"]:
        shown["speaking"] = payload["role"]
        if payload["round"] != shown["round"]:
            shown["round"] = payload["round"]
            console.rule(f"Round {shown['round']} of {payload['rounds']}")
        console.print(f"[{COLOURS[payload['role']]}]{payload['name']}:[/] ", end="")
    elif kind == "chunk" and payload["speaker"]["id"] != "human":
        console.print(payload["content"], end="", markup=False, highlight=False)
    elif kind == "message":
        shown["speaking"] = None
        console.print()
    elif kind == "human":
        console.print(f"[bold green]{escape(payload['speaker']['name'])} (you):[/] {escape(payload['content'])}")
    elif kind == "synthesizing":
        console.rule("Judging (twice, with the speakers' order swapped)")


def show_synthesis(state: dict) -> None:
    """Print the verdict as a table."""
    synthesis = state["synthesis"]
    names = {"user": state["user_profile"]["name"], "opponent": state["opponent_profile"]["name"], "tie": "tie"}
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
                         for v in sorted(state.get("verdicts", []), key=lambda v: v["order"] != "as_debated"))
    if verdicts:
        table.add_row("Judgements", verdicts)
    console.print(table)
