"""`parley roundtable`: put a question to a workspace's agents and watch the debate in the terminal; with `--steer`,
add your own messages, or end it, after every round (docs/steering.md).

Two parts: `render_round_table` prints a round table's wire events (`round_start`, `chunk`, `message`, `queued`,
`convergence`, `synthesis`, `done`, `error`, the payloads of the conversation message SSE) as they
come, whatever produced them; `round_table_events` produces them for one question of a conversation, run through
the run engine (`cli.runs`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table

from parley import store
from parley.cli.common import (
    CLI_USER,
    CLI_WORKSPACE,
    MAX_COST,
    MAX_SECONDS,
    MAX_TOKENS,
    STOPPED,
    ask_at_boundary,
    budget_fields,
    console,
    database_uri,
    fail,
    model_factory,
)
from parley.cli.runs import RunFailed, WireEvent, failure_of, follow_run, principal, run_here
from parley.core.limits import MAX_TABLE_SEATS
from parley.core.settings import get_settings
from parley.graphs.roundtable import seat_order
from parley.nodes.text import clip
from parley.services import roundtable as service
from parley.services.backend import Backend
from parley.services.errors import ServiceError, describe_validation
from parley.services.progress import queued_line
from parley.services.roundtable import NO_AGENTS
from parley.services.steering import SteerOptions, parse_options
from parley.store import agents as agent_store
from parley.store import conversations as conv_store
from parley.store.conversations import MAX_TITLE_CHARS, ConversationCreate, MessageCreate

STANCE_STYLES = {"for": "green", "against": "red", "conditional": "yellow", "neutral": "dim"}
KEY_POINT_CHARS = 160


RoundTableFailed = RunFailed  # the round table ended with an `error` event (the message is the server's)

def register(app: typer.Typer) -> None:
    """Add `parley roundtable` to the command line."""
    app.command("roundtable")(roundtable)


# --- rendering ------------------------------------------------------------------------------


def _short(text: str, limit: int = KEY_POINT_CHARS) -> str:
    return clip(" ".join(text.split()), limit)


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _who(name: str, role: str | None) -> str:
    """`Claire (Finance)`; the role is left out when it only repeats the name (the devil's advocate's)."""
    shown = role and role.strip().lower() != name.strip().lower()
    return escape(name) + (f" [dim]({escape(role)})[/]" if shown else "")


def _stance(stance: str) -> str:
    style = STANCE_STYLES.get(stance)
    return f"[{style}]{escape(stance)}[/]" if style else escape(stance)


def _line(event: str, data: dict[str, Any]) -> str | None:
    """The line an event prints (markup), or None for events shown otherwise or not at all."""
    if event == "message":
        who = _who(data["agentName"], data.get("agentRole"))
        if data.get("isDevilsAdvocate"):
            who = f"[magenta]{who}[/]"
        return (f"  {who}: {_stance(data['stance'])} {data['confidence']:.0%} · "
                f"{escape(_short(data.get('keyPoint') or ''))}")
    if event == "convergence":
        verdict = "[green]converged, the table stops[/]" if data["converged"] else "below the threshold"
        return (f"  [bold]convergence {data['score']:.2f}[/] (threshold {data['threshold']:.2f}): {verdict}")
    if event == "human":
        return f"  [bold green]{escape(data['name'])} (you)[/]: {escape(_short(data['content']))}"
    if event == "queued":  # the embedded model answers one call at a time: the others wait, in line
        return f"  [dim]{escape(queued_line(data))}…[/]"
    if event == "stopping":
        return f"  [yellow]to the synthesis now ({escape(data['by'])}): {STOPPED.get(data['by'], data['by'])}[/]"
    return None


async def render_round_table(events: AsyncIterator[WireEvent], out: Console | None = None) -> dict[str, Any]:
    """Print a round table as its events arrive: each round, each agent's stance and key point as it
    lands, the convergence score against the threshold, then the synthesis as a table.

    Returns the `done` payload (`synthesis`, `totalRounds`, `tokenUsage` …).

    Raises:
        RoundTableFailed: the events ended with `error`, or without `done`.
    """
    out = out or console
    async for event, data in events:
        if event == "round_start":
            phase = "initial positions" if data["phase"] == "initial" else "debate"
            out.rule(f"Round {data['roundNumber']} · {phase}")
            seats = [a["agentName"] + (" (devil's advocate)" if a.get("isDevilsAdvocate")
                                       and "devil" not in a["agentName"].lower() else "")
                     for a in data.get("agents") or []]
            if seats:
                out.print(f"[dim]{escape(_names(seats))} {'speaks' if len(seats) == 1 else 'speak'}…[/]")
        elif event == "synthesis":
            out.rule("Synthesis")
            out.print(synthesis_view(data["synthesis"], data.get("totalRounds")))
        elif event == "done":
            usage = data.get("tokenUsage") or {}
            left = usage.get("remainingBalance")
            out.print(f"[dim]{usage.get('totalTokensUsed', 0)} tokens used; allowance left: "
                      f"{'unlimited' if left is None else left}[/]")
            if data.get("stoppedBy"):
                out.print(f"[yellow]Stopped early[/] ({data['stoppedBy']}): "
                          f"{STOPPED.get(data['stoppedBy'], data['stoppedBy'])}")
            return data
        elif (failure := failure_of(event, data)) is not None:
            raise failure
        elif (line := _line(event, data)) is not None:
            out.print(line, highlight=False, soft_wrap=True)
        # `chunk` events are not printed: the seats of a round speak at once, so their tokens interleave.
    raise RoundTableFailed("the round table ended without a result")


def _bullets(items: list[str] | None) -> str:
    return "\n".join(f"• {escape(item)}" for item in items or []) or "—"


def synthesis_view(synthesis: dict[str, Any], total_rounds: int | None = None) -> Group:
    """Every field of the round-table contract's synthesis, one row each, then each agent's final stance and key
    point."""
    table = Table(show_header=False, expand=True)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row("Summary", escape(synthesis.get("summary", "")))
    table.add_row("Recommended action", f"[bold]{escape(synthesis.get('recommendedAction', ''))}[/]")
    table.add_row("Conditions", _bullets(synthesis.get("conditions")))
    table.add_row("Consensus", _bullets(synthesis.get("consensus")))
    table.add_row("Risks", _bullets(synthesis.get("riskPoints")))
    table.add_row("Devil's advocate's main attack", escape(synthesis.get("devilsAdvocateMainAttack", "")))
    table.add_row("How the debate evolved", escape(synthesis.get("debateEvolution", "")))
    table.add_row("Confidence", escape(str(synthesis.get("confidenceLevel", ""))))
    table.add_row("Urgency", escape(str(synthesis.get("urgency", ""))))
    table.add_row("Debate rounds", str(synthesis.get("roundCount", total_rounds)))
    if synthesis.get("biasNotes"):
        table.add_row("Bias notes", escape(str(synthesis["biasNotes"])))
    insights = Table("agent", "final stance", "key point", "shifted", title="Agent insights", expand=True)
    for insight in synthesis.get("agentInsights") or []:
        insights.add_row(_who(insight["name"], insight.get("role")), _stance(insight.get("stance", "")),
                         escape(insight.get("keyPoint", "")), "yes" if insight.get("shifted") else "no")
    return Group(table, insights)


# --- producing the events -------------------------------------------------------------------


async def round_table_events(
    backend: Backend, *, workspace: str, user: str, question: str, conversation_id: str | None = None,
    on_conversation=None, steer: SteerOptions = SteerOptions(), ask: Callable[[str], dict[str, str]] | None = None,
) -> AsyncIterator[WireEvent]:
    """The wire events of one question put to a conversation (a new one, titled with the question,
    when `conversation_id` is None); `on_conversation(id)` is called once the debate has started. `steer`: the
    question's `await` and budget; each time the run waits, `ask(where)` (run off the loop) gives the input that
    is sent to it (`{"action", "content"?}`).

    Raises:
        ServiceError: what the conversation message route would refuse (unknown conversation, no agents,
            allowance).
    """
    # Asked through the conversation route's own service, so the CLI checks, stores and bills a question exactly
    # as the HTTP API does (without its rate limit).
    if conversation_id is None:
        title = ConversationCreate(title=question[:MAX_TITLE_CHARS]).title
        conversation_id = (await conv_store.create_conversation(backend.db, workspace=workspace, user=user,
                                                                 title=title))["_id"]
    asked = await service.submit_message(backend, principal(user, workspace), conversation_id, question,
                                         idempotency_key=None, steer=steer)
    if on_conversation is not None:
        on_conversation(conversation_id)
    async for event in follow_run(backend.runs, asked.run_id, user=user, ask=ask):
        yield event


# --- the command ----------------------------------------------------------------------------


def roundtable(
    question: str = typer.Argument(..., help="The question the agents debate: put the numbers and options in it."),
    conversation: str = typer.Option(None, help="Ask in this conversation (a follow-up); a new one by default."),
    workspace: str = typer.Option(CLI_WORKSPACE, help="Workspace whose agents sit at the table."),
    user: str = typer.Option(CLI_USER, help="Who asks (the conversation's user)."),
    steer: bool = typer.Option(False, "--steer", help="After every round, wait for you: a message for the next "
                                                      "rounds, Enter to go on, or /end for the synthesis."),
    max_tokens: int = MAX_TOKENS,
    max_cost: float = MAX_COST,
    max_seconds: float = MAX_SECONDS,
) -> None:
    """Debate QUESTION with the workspace's agents: stances and convergence live, then the synthesis.

    The first five agents of the workspace sit at the table with a devil's advocate (see `parley agents`).
    """
    settings = get_settings()
    try:
        question = MessageCreate(content=question).content
    except ValidationError as exc:
        raise fail(describe_validation(exc.errors()).replace("content", "question"), code=2) from None
    try:
        options = parse_options({"await": "after_round" if steer else None,
                                 **budget_fields(max_tokens, max_cost, max_seconds)}, boundary="after_round")
    except ServiceError as exc:
        raise fail(exc.message, code=2) from exc

    with database_uri() as uri:
        async def agents() -> list[dict]:
            client, db = store.connect(uri, settings.mongodb_db)
            try:
                return await agent_store.list_agents(db, workspace=workspace)
            finally:
                await client.close()

        regular, advocate = seat_order(asyncio.run(agents()), MAX_TABLE_SEATS)
        if not regular:  # before a conversation is created for nothing
            raise fail(f"{NO_AGENTS} Add one with `parley agents add NAME --workspace {workspace}`.")
        async def run(backend: Backend) -> dict[str, Any]:
            return await render_round_table(round_table_events(
                backend, workspace=workspace, user=user, question=question,
                conversation_id=conversation, steer=options, ask=ask_at_boundary if steer else None,
                on_conversation=lambda cid: console.print(
                    f"[bold]{escape(question)}[/]\n[dim]conversation {cid} (ask a follow-up with "
                    f"--conversation {cid})[/]", soft_wrap=True),
            ))

        # The seated agents' models, the advocate's (the default until one is made) and the synthesis's.
        models = [a.get("model") or settings.default_model for a in [*regular, advocate or {}]]
        models.append(settings.default_model)
        with model_factory(models) as factory:
            try:
                run_here(uri, factory, run)
            except ServiceError as exc:
                raise fail(exc.message) from exc
            except RoundTableFailed as exc:
                raise fail(str(exc)) from exc
