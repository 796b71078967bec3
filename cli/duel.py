"""`parley debate`: run a duel in-process (no HTTP, no database) and stream it in the terminal."""

from __future__ import annotations

import asyncio

import openai
import typer
from rich.table import Table

from cli.common import console, fail, model_factory
from core.limits import DEFAULT_DUEL_ROUNDS, MAX_DUEL_ROUNDS, MIN_DUEL_ROUNDS
from core.settings import get_settings
from graphs.duel import DuelContext, graph
from llm.failures import ModelError, failure_message

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
) -> None:
    """Debate TOPIC: your persona agent against an opponent chosen for it, then a judge's verdict."""
    settings = get_settings()
    model_id = model or settings.default_model
    profile = {"name": name, "bio": bio, "softMemory": {"traits": trait or [], "interests": interest or []}}
    with model_factory([model_id]) as factory:
        context = DuelContext(models=factory, model=model_id, rounds=rounds)
        try:
            result = asyncio.run(stream_debate(topic, profile, context))
        except ModelError as exc:
            raise fail(failure_message(exc)) from exc
        except openai.OpenAIError as exc:
            raise fail(failure_message(exc, model="the model call failed: {detail}")) from exc
    show_synthesis(result)
    ledger = context.ledger
    console.print(f"[dim]{model_id}: {len(ledger.records)} calls, {ledger.total_tokens} tokens, "
                  f"${ledger.total_cost:.6f}[/]")


async def stream_debate(topic: str, profile: dict, context: DuelContext) -> dict:
    """Run the duel graph, printing turns as they stream; return its final state."""
    state: dict = {"topic": topic, "user_profile": profile, "messages": [], "verdicts": []}
    round_shown = 0
    speaking = None
    inputs = {"topic": topic, "user_profile": profile, "rounds": context.rounds}
    async for mode, payload in graph.astream(inputs, context=context, stream_mode=["custom", "updates"]):
        if mode == "updates":
            for node, update in payload.items():
                for key, value in (update or {}).items():
                    if key in ("messages", "verdicts"):
                        state[key] = state[key] + value
                    else:
                        state[key] = value
                if node == "select_opponent":
                    opponent = update["opponent_profile"]
                    console.print(f"[bold]{topic}[/]")
                    title = opponent.get("title", "")
                    console.print(f"{profile['name']} vs [bold magenta]{opponent['name']}[/], {title}")
                    console.print(f"[dim]{opponent.get('stance', '')}[/]")
            continue
        kind = payload.get("event")
        if kind == "start" and speaking != payload["role"]:
            speaking = payload["role"]
            if payload["round"] != round_shown:
                round_shown = payload["round"]
                console.rule(f"Round {round_shown} of {payload['rounds']}")
            console.print(f"[{COLOURS[payload['role']]}]{payload['name']}:[/] ", end="")
        elif kind == "chunk":
            console.print(payload["content"], end="", markup=False, highlight=False)
        elif kind == "message":
            speaking = None
            console.print()
        elif kind == "synthesizing":
            console.rule("Judging (twice, with the speakers' order swapped)")
    return state


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
