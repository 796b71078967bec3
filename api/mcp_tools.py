"""The tools Parley serves over MCP (`api.mcp_server`): each one's name, schemas, description and scope, and what it
does, which is what the HTTP routes do: the same service functions, the same checks, the same errors.

A tool that starts a run (`duel`, `ask_panel`, `roundtable_ask`, `run_workflow`: its `starts`) follows it to its
end, reporting each step as an MCP progress notification (`services.progress`, the lines the chat stream sends as
comments), and answers with the run's result; a call cancelled by the client cancels the run. Called as an MCP task
(`api.mcp_tasks`), it only starts the run, and the same answer is built from the run's record once it has ended,
on whichever worker `tasks/result` reaches.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from parley.core.fields import ModelId
from parley.core.limits import DEFAULT_DUEL_ROUNDS, MAX_CHAT_MESSAGES, MAX_MODEL_ID_CHARS
from parley.designer import example_files
from parley.runs.modes.roundtable import render_synthesis
from parley.services import access
from parley.services import duel as duel_service
from parley.services import panel as panel_service
from parley.services import roundtable as table_service
from parley.services import runs as run_service
from parley.services import steering
from parley.services import workflows as workflow_service
from parley.services.access import Principal
from parley.services.backend import Backend
from parley.services.duel import DebateBody
from parley.services.errors import InvalidRequest, describe_validation
from parley.services.panel import ChatCompletionRequest, ChatMessage
from parley.services.progress import progress_line
from parley.services.routers import ANSWER_RULE_HELP, RULE_HELP, RuleName
from parley.services.runs import Kind, Status
from parley.store.conversations import MAX_TITLE_CHARS, MessageCreate

@dataclass(frozen=True)
class Call:
    """One tool call: who makes it, Parley's handles, and how to tell the client about progress."""

    principal: Principal
    backend: Backend
    client_address: str
    report: Callable[[float, float | None, str], Awaitable[None]]  # (progress, total, message)
    stopping: Callable[[], bool]  # the server is shutting down: its runs are handed over, not cancelled


@dataclass(frozen=True)
class Answer:
    """What a tool answers: a text for the model to read, the structured result, and the run it is about."""

    text: str
    data: dict[str, Any]
    run_id: str | None = None


@dataclass(frozen=True)
class Started:
    """The run a tool started, and how many steps it will report (None: not known beforehand)."""

    run_id: str
    total: int | None = None


@dataclass(frozen=True)
class Starts:
    """What a tool that starts a run does: start it (`start`, given the checked arguments), and answer from the run's
    record once the run has ended (`finish`: on any worker, from what is stored)."""

    kind: str
    start: Callable[[Call, Any], Awaitable[Started]]
    finish: Callable[[Call, dict], Awaitable[Answer]]


@dataclass(frozen=True)
class Tool:
    """One MCP tool. A key sees it in `tools/list` only when `access.check_scope` lets it use `scope` (`write`:
    and it is not read-only); calling it anyway is refused with the HTTP API's 403 message. A tool either answers
    at once (`run`) or starts a run and answers once it has ended (`starts`): only those may be called as tasks."""

    name: str
    title: str
    description: str
    input: type[BaseModel]
    output: type[BaseModel]
    run: Callable[[Call, Any], Awaitable[Answer]] | Starts
    scope: str | None = None
    write: bool = False
    parse: Callable[[dict[str, Any]], Any] | None = None  # how the arguments are checked (default: `input`)

    @property
    def starts(self) -> Starts | None:
        return self.run if isinstance(self.run, Starts) else None

    def usable_by(self, principal: Principal) -> bool:
        return access.may_use(principal, self.scope, write=self.write)

    async def answer(self, call: Call, arguments: Any) -> Answer:
        """What the tool answers a plain call (its checked `arguments`): at once, or once its run has ended (each
        step reported on the way)."""
        if (starts := self.starts) is None:
            return await self.run(call, arguments)  # type: ignore[operator]
        started = await starts.start(call, arguments)
        await until_done(call, starts.kind, started.run_id, total=started.total)
        return await starts.finish(call, await call.backend.runs.get(started.run_id))

    def arguments(self, arguments: dict[str, Any]) -> Any:
        """The checked arguments.

        Raises:
            InvalidRequest: they do not fit; the message names each field at fault, as the HTTP API's do.
        """
        if self.parse is not None:
            return self.parse(arguments)
        try:
            return self.input.model_validate(arguments)
        except ValidationError as exc:
            raise InvalidRequest(describe_validation(exc.errors())) from None


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


async def until_done(call: Call, kind: str, run_id: str, *, total: int | None = None) -> None:
    """Report each step of the run as progress until it ends.

    A cancelled call cancels the run (unless the server is shutting down: then the run is handed over to resume
    elsewhere, as every run is).
    """
    step = 0
    try:
        async for batch in call.backend.runs.follow(run_id):
            for event in batch:
                if line := progress_line(kind, event.event, event.data):
                    step += 1
                    await call.report(step, total if total and step <= total else None, line)
    except anyio.get_cancelled_exc_class():
        if not call.stopping():
            with anyio.CancelScope(shield=True):
                await call.backend.runs.cancel(run_id)
        raise


# --- duel -----------------------------------------------------------------------------------


class DuelResult(BaseModel):
    runId: str = Field(description="The run (and debate) id: `get_run`, the resource `parley://runs/{runId}`.")
    topic: str
    rounds: int | None = None
    winner: str | None = Field(description="`user` (your side), `opponent` or `tie`.")
    synthesis: dict[str, Any] = Field(description="The judges' synthesis: consensus, disagreements, winner, "
                                                  "winnerReason, conclusion, recommendations.")
    verdicts: list[dict[str, Any]] = Field(description="Both judges' verdicts (as debated, and in swapped order).")
    messages: list[dict[str, Any]] = Field(description="Every turn: role, name, content, timestamp.")
    userProfile: dict[str, Any]
    opponentProfile: dict[str, Any] | None = None


def _duel_text(debate: dict[str, Any]) -> str:
    synthesis = debate["synthesis"] or {}
    names = {"user": debate["userProfile"]["name"], "opponent": (debate["opponentProfile"] or {}).get("name")}
    winner = synthesis.get("winner")
    lines = [f"Winner: {names.get(winner) or winner} ({winner})" if winner != "tie" else "Winner: none (a tie)"]
    lines += [synthesis[key] for key in ("winnerReason", "conclusion") if synthesis.get(key)]
    lines += [f"- {item}" for item in synthesis.get("recommendations") or []]
    return "\n".join(lines)


async def start_duel(call: Call, request: duel_service.DebateRequest) -> Started:
    await duel_service.admit_debate(call.backend, call.principal.caller, call.client_address)
    record = await duel_service.start_duel(call.backend.runs, call.principal.caller, request)
    rounds = record.get("rounds") or DEFAULT_DUEL_ROUNDS
    return Started(record["_id"], total=4 * rounds + 3)


async def duel_answer(call: Call, run: dict) -> Answer:
    debate = await duel_service.debate_result(call.backend.runs, call.principal, run["_id"])
    data = {"runId": debate["id"], **{key: debate[key] for key in (
        "topic", "rounds", "synthesis", "verdicts", "messages", "userProfile", "opponentProfile")},
            "winner": (debate["synthesis"] or {}).get("winner")}
    return Answer(_duel_text(debate), data, debate["id"])


# --- panel ----------------------------------------------------------------------------------


class AskPanel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str | None = Field(None, min_length=1, description="The question for the panel (or `messages`).")
    messages: list[ChatMessage] | None = Field(
        None, min_length=1, max_length=MAX_CHAT_MESSAGES,
        description="A whole conversation, as chat completions take it, instead of `question`.")
    router: str = Field("debate", min_length=1, max_length=MAX_MODEL_ID_CHARS - len("router/"),
                        description="Which panel answers: a preset (`debate`, `quality`, `budget`) or a router of the "
                                    "workspace (`GET /v1/routers`).")
    models: list[ModelId] | None = Field(None, description="The panel for this question (2-8 `provider:model` ids of "
                                                       "distinct families), replacing the router's.")
    arbitrator: ModelId | None = Field(None, description="The arbitrator (and judge) for this question.")
    criteria: str | None = Field(None, min_length=1, description="What the arbitrator weighs the answers by.")
    depth: Literal["full", "adaptive"] | None = Field(None, description="`adaptive`: two panelists first, the rest "
                                                                        "only when they disagree.")
    rule: RuleName | None = Field(None, description=RULE_HELP + " The router's rule when omitted.")
    answer_rule: str | None = Field(None, description=ANSWER_RULE_HELP)
    debate: bool | None = Field(None, description="Debate (panel, then an arbitrator) or not; the router's default "
                                                  "when omitted.")
    panel: bool | None = Field(None, description="Return every panelist's answer, labelled, without arbitration.")
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, ge=1, description="Cap on each answer's tokens.")

    @model_validator(mode="after")
    def _one_question(self) -> AskPanel:
        if (self.question is None) == (self.messages is None):
            raise ValueError("give either `question` or `messages`")
        return self

    def completion_request(self) -> ChatCompletionRequest:
        """The chat completion this asks for (checked as `POST /v1/chat/completions` checks its body)."""
        messages = ([m.model_dump(exclude_none=True) for m in self.messages] if self.messages
                    else [{"role": "user", "content": self.question}])
        body = {"model": f"router/{self.router}", "messages": messages,
                **self.model_dump(include={"rule", "answer_rule", "debate", "panel", "temperature", "max_tokens",
                                           "models", "arbitrator", "criteria", "depth"}, exclude_none=True)}
        try:
            return ChatCompletionRequest.model_validate(body)
        except ValidationError as exc:
            raise InvalidRequest(describe_validation(exc.errors())) from None


class PanelAnswer(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    runId: str = Field(description="The run's id: `get_run`, the resource `parley://runs/{runId}`.")
    answer: str = Field(description="The answer (with `panel`: each panelist's, labelled).")
    model: str = Field(description="Who answered: the arbitrator of a debate, `panel` for raw answers, or the model.")
    usage: dict[str, Any]
    meta: dict[str, Any] = Field(alias="_meta", description="The chat completion's `_meta`: cost, tokens, latency, "
                                                            "router mode, each panelist's result, the disagreement "
                                                            "map (`analysis`) and the `status`.")


async def start_panel(call: Call, question: AskPanel) -> Started:
    record = await panel_service.start_completion(call.backend, call.principal.caller, question.completion_request())
    return Started(record["_id"])


async def panel_answer(call: Call, record: dict) -> Answer:
    completion = await panel_service.completion_of(call.backend, record)
    answer = completion["choices"][0]["message"]["content"]
    data = {"runId": record["_id"], "answer": answer, "model": completion["model"], "usage": completion["usage"],
            "_meta": completion["_meta"]}
    return Answer(answer, data, record["_id"])


# --- round table ----------------------------------------------------------------------------


class TableQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, description="What the table debates.")
    conversationId: str | None = Field(None, description="A conversation of the workspace to ask in (its earlier "
                                                          "conclusions are the table's history); a new one if omitted.")
    title: str | None = Field(None, min_length=1, max_length=MAX_TITLE_CHARS,
                              description="The new conversation's title (default: the question).")


class TableAnswer(BaseModel):
    runId: str = Field(description="The run's id: `get_run`, the resource `parley://runs/{runId}`.")
    conversationId: str
    synthesis: dict[str, Any] = Field(description="The synthesis: summary, recommendedAction, consensus, riskPoints, "
                                                  "conditions.")
    totalRounds: int
    tokenUsage: dict[str, Any]


async def start_table(call: Call, asked: TableQuestion) -> Started:
    try:
        content = MessageCreate(content=asked.question).content
    except ValidationError as exc:
        raise InvalidRequest(describe_validation(exc.errors())) from None
    if asked.conversationId is None:
        _, started = await table_service.open_and_ask(
            call.backend, call.principal, title=asked.title or content[:MAX_TITLE_CHARS], content=content)
    else:
        started = await table_service.submit_message(call.backend, call.principal, asked.conversationId, content,
                                                     idempotency_key=None)
    return Started(started.run_id)


async def table_answer(call: Call, run: dict) -> Answer:
    result = await table_service.result_of(call.backend.runs, table_service.Asked(run_id=run["_id"]))
    data = {"runId": run["_id"], "conversationId": run["ref"]["conversationId"], **{
        key: result[key] for key in ("synthesis", "totalRounds", "tokenUsage")}}
    return Answer(render_synthesis(result["synthesis"]), data, run["_id"])


# --- workflows ------------------------------------------------------------------------------


Example = Literal[tuple(example_files())]  # type: ignore[valid-type]


class WorkflowRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workflowId: str | None = Field(None, description="A stored workflow of the workspace (`GET /v1/workflows`).")
    example: Example | None = Field(None, description="A bundled example workflow, by name.")
    workflow: dict[str, Any] | None = Field(None, description="A workflow document (`GET /v1/workflows/schema`).")
    input: dict[str, Any] | None = Field(None, description="Values of the workflow's declared state keys; its "
                                                           "`sampleInput` when omitted.")

    @model_validator(mode="after")
    def _one_workflow(self) -> WorkflowRun:
        if sum(value is not None for value in (self.workflowId, self.example, self.workflow)) != 1:
            raise ValueError("give exactly one of `workflowId`, `example` and `workflow`")
        return self


class WorkflowResult(BaseModel):
    runId: str = Field(description="The run's id: `get_run`, the resource `parley://runs/{runId}`.")
    workflowId: str | None
    workflowName: str
    output: dict[str, Any] | None = Field(description="The workflow's final state.")
    usage: dict[str, Any] | None


async def start_workflow(call: Call, asked: WorkflowRun) -> Started:
    document = asked.workflow
    if asked.example is not None:
        document = json.loads(example_files()[asked.example].read_text())
    run = await workflow_service.start_run(call.backend, call.principal, workflow_id=asked.workflowId,
                                           document=document, input=asked.input)
    return Started(run["_id"])


async def workflow_answer(call: Call, run: dict) -> Answer:
    ended = await workflow_service.run_to_end(call.backend, run)
    data = {"runId": ended["id"], **{key: ended[key] for key in ("workflowId", "workflowName", "output", "usage")}}
    return Answer(_dump(ended["output"]), data, ended["id"])


# --- runs -----------------------------------------------------------------------------------


class RunRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runId: str = Field(min_length=1, description="The run's id (a tool's `runId`, or from `list_runs`).")


class RunQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Kind | None = Field(None, description="Only runs of this kind.")
    status: Status | None = Field(None, description="Only runs in this status.")
    limit: int = Field(20, ge=1, le=100, description="Runs per page.")
    cursor: str | None = Field(None, description="`nextCursor` of the previous page.")


class RunView(BaseModel):
    """A run as `GET /v1/runs/{id}` shows it."""

    model_config = ConfigDict(extra="allow")

    id: str
    kind: Kind
    status: Status
    title: str | None
    user: str
    createdAt: str
    finishedAt: str | None
    usage: dict[str, Any] | None
    error: dict[str, Any] | None


class RunPage(BaseModel):
    data: list[RunView]
    nextCursor: str | None = Field(description="Give it as `cursor` for the next page; null on the last.")


async def get_run(call: Call, ref: RunRef) -> Answer:
    run = run_service.public_run(await run_service.visible_run(call.backend.runs, call.principal, ref.runId),
                                 detail=True)
    return Answer(_dump(run), run, run["id"])


async def list_runs(call: Call, query: RunQuery) -> Answer:
    page = await run_service.list_runs(call.backend.runs, call.principal, **query.model_dump())
    lines = [f"{r['id']}  {r['kind']}  {r['status']}  {r['createdAt']}  {r['title'] or ''}" for r in page["data"]]
    if page["nextCursor"]:
        lines.append(f"(more: cursor {page['nextCursor']})")
    return Answer("\n".join(lines) or "No runs.", page)


class RunSteer(steering.RunInput):
    runId: str = Field(min_length=1, description="The run's id (a tool's `runId`, a task's `taskId`, or from "
                                                 "`list_runs`).")


class Steered(BaseModel):
    input: dict[str, Any] = Field(description="The input as stored and delivered: id, user, at, content, action.")
    run: RunView


async def steer_run(call: Call, asked: RunSteer) -> Answer:
    """What `POST /v1/runs/{id}/input` does: the input reaches the run as this key's user's."""
    content, action = steering.parse_input(asked.model_dump(exclude={"runId"}, exclude_none=True))
    record = await run_service.visible_run(call.backend.runs, call.principal, asked.runId, write=True)
    given, record = await steering.send_input(call.backend.runs, record, user=call.principal.user, content=content,
                                              action=action)
    run = run_service.public_run(record)
    return Answer(f"Run {run['id']} got the input ({action or 'message'}); it is {run['status']}.",
                  {"input": given, "run": run}, run["id"])


async def cancel_run(call: Call, ref: RunRef) -> Answer:
    run = await run_service.cancel_run(call.backend.runs, call.principal, ref.runId)
    return Answer(f"Run {run['id']} is being cancelled.", run, run["id"])


TOOLS: list[Tool] = [
    Tool("duel", "Duel", "Debate a topic against an AI opponent chosen to disagree with you: the agent built from "
         "your `userProfile` and the opponent take turns for `rounds` rounds, then two judges (reading the debate in "
         "both orders) decide the winner and write a synthesis. Takes minutes with a real model; progress is "
         "reported turn by turn.", DebateBody, DuelResult, Starts("duel", start_duel, duel_answer), scope="debate",
         write=True,
         parse=duel_service.check_debate_request),
    Tool("ask_panel", "Ask a panel", "Put a question to a panel of models from different families (a router of "
         "the workspace, or the `debate` preset): each answers, then an arbitrator (or the router's decision rule) "
         "gives one answer. With `panel: true`, every panelist's answer instead.", AskPanel, PanelAnswer,
         Starts("panel", start_panel, panel_answer),
         scope="chat", write=True),
    Tool("roundtable_ask", "Ask the round table", "Put a question to the workspace's round-table agents (with their "
         "documents and memories, and a devil's advocate): they debate in rounds until their positions converge, "
         "and a synthesis gives the recommended action, consensus, risks and conditions. In a new conversation, or "
         "in `conversationId`, whose earlier conclusions they remember.", TableQuestion, TableAnswer,
         Starts("roundtable", start_table, table_answer), scope="conversations", write=True),
    Tool("run_workflow", "Run a workflow", "Run a designer workflow (stored in the workspace, a bundled example, or "
         "a document given here) on `input`, and answer with its final state.", WorkflowRun, WorkflowResult,
         Starts("workflow", start_workflow, workflow_answer), scope="workflows", write=True),
    Tool("get_run", "Get a run", "One run of any kind (duel, panel, roundtable, workflow) that this key may see: "
         "status, usage, input, result, error.", RunRef, RunView, get_run),
    Tool("list_runs", "List runs", "The runs of the workspace this key may see, newest first, of every kind or "
         "one.", RunQuery, RunPage, list_runs),
    Tool("steer_run", "Steer a run", "Send a running debate a person's input, as its user: a message every agent "
         "reads from the next turn on (`content`), or an `action`: `pause` (wait at the next boundary), `continue` "
         "(go on from a wait), `guide` (the message, then continue), `end` (straight to the synthesis or verdict). "
         "This is how a run (or task) waiting for a person (`input_required`) gets its answer.", RunSteer, Steered,
         steer_run, write=True),
    Tool("cancel_run", "Cancel a run", "Stop a run that is still going; it is stored `cancelled` with what it had "
         "done. Only the user who started it, or an admin key, may.", RunRef, RunView, cancel_run, write=True),
]
