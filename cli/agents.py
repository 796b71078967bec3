"""`parley agents`: a workspace's round-table agents, their documents and memories, in this process.

Like `parley keys`, it works on the database directly (no server, no key) and refuses what the HTTP
API refuses, with the same words: the rules live in `store.agents`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table

from parley.cli.common import CLI_WORKSPACE, console, fail, with_db
from parley.core.settings import get_settings
from parley.llm.factory import ModelFactory
from parley.llm.failures import ModelError
from parley.llm.providers import split_model_id
from parley.services.errors import describe_validation
from parley.store import agents as store
from parley.store.agents import AgentCreate, AgentUpdate, DocumentCreate, DocumentRefused

app = typer.Typer(help="Round-table agents of a workspace: list, add, edit, documents, memories.",
                  no_args_is_help=True)

WORKSPACE_HELP = "Workspace (`default` is the workspace of the first key `parley serve` prints)."
AGENT_HELP = "The agent's id, or its name."


class Refused(Exception):
    """A request the CLI turns down; the message says why."""


def _check_model(model: str | None) -> None:
    """Refuse a model this deployment cannot reach, as `POST /v1/agents` does. The embedded model is
    always accepted: the commands that debate start it when they need it."""
    if model is None or split_model_id(model)[0] == "local":
        return
    try:
        ModelFactory(get_settings()).resolve(model)
    except ModelError as exc:
        raise Refused(f"model: {exc}") from exc


async def find_agent(db, workspace: str, ref: str) -> dict[str, Any]:
    """The workspace's agent with id `ref`, else the one named `ref` (case-insensitive)."""
    agent = await store.get_agent(db, workspace=workspace, agent_id=ref)
    if agent is not None:
        return agent
    named = [a for a in await store.list_agents(db, workspace=workspace) if a["name"].lower() == ref.lower()]
    if len(named) == 1:
        return named[0]
    if named:
        raise Refused(f"{len(named)} agents are called '{ref}' in workspace '{workspace}'; use the id")
    raise Refused(f"no agent '{ref}' in workspace '{workspace}' (see `parley agents list --workspace {workspace}`)")


def _run(fn) -> Any:
    """Run `fn(db)`, turning a refusal or a validation error into a clean exit 2."""
    try:
        return with_db(fn)
    except Refused as exc:
        raise fail(str(exc), code=2) from None
    except ValidationError as exc:
        raise fail(describe_validation(exc.errors()), code=2) from None


def _agents_table(agents: list[dict], documents: dict[str, int], memories: dict[str, int]) -> Table:
    table = Table("id", "name", "role", "model", "documents", "memories", title="Agents, in seating order")
    for agent in agents:
        name = agent["name"] + (" [dim](devil's advocate)[/]" if agent.get("isDevilsAdvocate") else "")
        table.add_row(agent["_id"], name, escape(agent.get("role") or ""), agent.get("model") or "[dim]default[/]",
                      str(documents.get(agent["_id"], 0)), str(memories.get(agent["_id"], 0)))
    return table


@app.command("list")
def list_agents(workspace: str = typer.Option(CLI_WORKSPACE, help=WORKSPACE_HELP)) -> None:
    """List the workspace's agents in creation order (the first five sit at the table)."""

    async def read(db):
        agents = await store.list_agents(db, workspace=workspace)
        ids = [a["_id"] for a in agents]
        documents, memories = {}, {}
        for doc in await store.list_documents(db, agent_ids=ids):
            documents[doc["agentId"]] = documents.get(doc["agentId"], 0) + 1
        for memory in await store.list_memories(db, agent_ids=ids):
            memories[memory["agentId"]] = memories.get(memory["agentId"], 0) + 1
        return agents, documents, memories

    agents, documents, memories = _run(read)
    if not agents:
        console.print(f"No agents in workspace '{workspace}'. Add one with `parley agents add NAME --role ROLE`.")
        return
    console.print(_agents_table(agents, documents, memories))


@app.command("add")
def add(
    name: str = typer.Argument(..., help="How the agent is called at the table."),
    role: str = typer.Option("", help="Its expertise or function, e.g. 'Head of sales'."),
    persona: str = typer.Option("", help="Instructions: priorities, tone, what it argues from."),
    model: str = typer.Option(None, help="`provider:model`; the deployment's default when omitted."),
    workspace: str = typer.Option(CLI_WORKSPACE, help=WORKSPACE_HELP),
) -> None:
    """Add an agent at the end of the seating order; its id is printed last."""

    async def create(db):
        fields = AgentCreate(name=name, role=role, persona=persona, model=model)
        _check_model(fields.model)
        return await store.create_agent(db, workspace=workspace, **fields.model_dump())

    agent = _run(create)
    console.print(f"Added {escape(agent['name'])} to workspace '{workspace}'.")
    print(agent["_id"])


@app.command("edit")
def edit(
    agent: str = typer.Argument(..., help=AGENT_HELP),
    name: str = typer.Option(None, help="New name."),
    role: str = typer.Option(None, help="New role ('' empties it)."),
    persona: str = typer.Option(None, help="New persona instructions ('' empties them)."),
    model: str = typer.Option(None, help="New model (`provider:model`)."),
    default_model: bool = typer.Option(False, "--default-model", help="Use the deployment's default model again."),
    workspace: str = typer.Option(CLI_WORKSPACE, help=WORKSPACE_HELP),
) -> None:
    """Change an agent's name, role, persona or model."""
    if model is not None and default_model:
        raise fail("give --model or --default-model, not both", code=2)
    given = {"name": name, "role": role, "persona": persona, "model": model}
    given = {k: v for k, v in given.items() if v is not None}
    if default_model:
        given["model"] = None
    if not given:
        raise fail("nothing to change: give --name, --role, --persona, --model or --default-model", code=2)

    async def update(db):
        changes = AgentUpdate(**given).changes()
        _check_model(changes.get("model"))
        found = await find_agent(db, workspace, agent)
        return await store.update_agent(db, workspace=workspace, agent_id=found["_id"], changes=changes)

    console.print(_agents_table([_run(update)], {}, {}))


@app.command("documents")
def documents(
    agent: str = typer.Argument(..., help=AGENT_HELP),
    text: str = typer.Option(None, help="Add a document with this text."),
    file: Path = typer.Option(None, exists=True, dir_okay=False, readable=True,
                              help="Add a document with this file's text (UTF-8)."),
    title: str = typer.Option(None, help="The added document's title; the file's name by default."),
    workspace: str = typer.Option(CLI_WORKSPACE, help=WORKSPACE_HELP),
) -> None:
    """List an agent's documents; with --text or --file, add one first (at most 100,000 characters)."""
    if text is not None and file is not None:
        raise fail("give --text or --file, not both", code=2)
    if text is None and file is None and title is not None:
        raise fail("--title goes with --text or --file", code=2)
    if file is not None:
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise fail(f"{file} is not UTF-8 text", code=2) from None
    if text is not None and title is None:
        if file is None:
            raise fail("--text needs a --title", code=2)
        title = file.name

    async def run(db):
        found = await find_agent(db, workspace, agent)
        added = None
        if text is not None:
            document = DocumentCreate(title=title, text=text)
            try:
                await store.check_document_room(db, agent_id=found["_id"], text=document.text)
            except DocumentRefused as exc:
                raise Refused(str(exc)) from exc
            added = await store.add_document(db, workspace=workspace, agent_id=found["_id"], title=document.title,
                                             text=document.text)
        return found, added, await store.list_documents(db, agent_ids=[found["_id"]])

    found, added, docs = _run(run)
    if added is not None:
        console.print(f"Added [bold]{escape(added['title'])}[/] ({len(added['text'])} characters) to "
                      f"{escape(found['name'])}.")
    if not docs:
        console.print(f"{escape(found['name'])} has no documents. Add one with --text or --file.")
        return
    table = Table("id", "title", "characters", "added", title=f"Documents of {escape(found['name'])}")
    for doc in docs:
        public = store.public_document(doc)
        table.add_row(public["id"], escape(public["title"]), str(public["chars"]), public["createdAt"] or "")
    console.print(table)


@app.command("memories")
def memories(
    agent: str = typer.Argument(..., help=AGENT_HELP),
    forget: bool = typer.Option(False, "--forget", help="Forget them all."),
    workspace: str = typer.Option(CLI_WORKSPACE, help=WORKSPACE_HELP),
) -> None:
    """List what an agent remembers from earlier debates, newest first; --forget clears it."""

    async def run(db):
        found = await find_agent(db, workspace, agent)
        if forget:
            return found, await store.delete_memories(db, agent_id=found["_id"]), []
        return found, 0, list(reversed(await store.list_memories(db, agent_ids=[found["_id"]])))

    found, forgotten, notes = _run(run)
    if forget:
        console.print(f"{escape(found['name'])} forgot {forgotten} memories.")
        return
    if not notes:
        console.print(f"{escape(found['name'])} remembers nothing yet.")
        return
    table = Table("when", "note", "conversation", title=f"What {escape(found['name'])} remembers")
    for note in notes:
        public = store.public_memory(note)
        table.add_row(public["createdAt"] or "", escape(public["content"]), public["conversationId"] or "")
    console.print(table)
