"""Tools an agent calls during its turn: what a speaker was granted (`Toolbox`), how one call runs (bounded, its
failure a result the model reads), Parley's built-in read-only tools, and the events a call and its result are.

A `speak` node given grants (`nodes.speak`) asks the run's `ToolAccess` (`RunContext.tools`, set by the run's mode)
for the speaker's `Toolbox`, offers its tools to the model, and runs the calls the model makes; each call goes out
as one whole `tool_call` event when it starts and one `tool_result` event when it ends:

    {"event": "tool_call", "speaker": {...}, "round": 1 | None, "index": 0, "id": "call_…", "name": "get_weather",
     "arguments": "{\"city\": \"Paris\"}"}
    {"event": "tool_result", "speaker": {...}, "round": 1 | None, "index": 0, "id": "call_…", "name": "get_weather",
     "content": "Sunny, 21 degrees.", "isError": false}

A grant names a tool `server/tool` (an MCP server the workspace's admin registered, one of its allowed tools),
`server/*` (every allowed tool of the server), or a built-in one: `parley/search_documents` (the speaking agent's
own documents, `nodes.retrieval`) and `parley/earlier_syntheses` (the conclusions of the conversation's earlier
questions).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import anyio

from parley.core.limits import MAX_TOOL_CALLS_PER_TURN, MAX_TOOL_RESULT_CHARS, TOOL_CALL_TIMEOUT_SECONDS
from parley.llm.mcp import ServerUnreachable, ToolOutput
from parley.llm.tools import ToolSet
from parley.nodes.retrieval import retrieve
from parley.nodes.text import clip

TOOL_EVENTS = ("tool_call", "tool_result")
BUILTIN_SERVER = "parley"
SEARCH_DOCUMENTS = "search_documents"
EARLIER_SYNTHESES = "earlier_syntheses"
# The built-in tools, by grant, with who may be granted each (a kind of subject, `services.tools`).
BUILTINS: dict[str, tuple[str, ...]] = {
    f"{BUILTIN_SERVER}/{SEARCH_DOCUMENTS}": ("agent",),
    f"{BUILTIN_SERVER}/{EARLIER_SYNTHESES}": ("agent",),
}


@dataclass(frozen=True)
class AgentTool:
    """One tool a speaker may call: its name as the model sees it, description, JSON Schema of its arguments, the
    grant it came from, and how to run it (`run(arguments)`, which may raise: the toolbox turns it into a result)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    grant: str
    run: Callable[[dict[str, Any]], Awaitable[ToolOutput]]

    def openai(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.name, "parameters": dict(self.parameters or {"type": "object"})}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolRun:
    """One call a speaker made during its turn and what it answered (`is_error`: the tool failed, timed out, was
    unknown or over the turn's limit; the model read `result` all the same)."""

    id: str
    name: str
    arguments: str
    result: str
    is_error: bool = False

    def dump(self) -> dict[str, Any]:
        """As a transcript keeps it (`metadata.toolCalls`)."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments, "result": self.result,
                "isError": self.is_error}


def tool_result_event(speaker: Mapping[str, str], index: int, run: ToolRun, *,
                      round: int | None = None) -> dict[str, Any]:
    """The `tool_result` event of call `index` of `speaker`'s turn."""
    return {"event": "tool_result", "speaker": {"id": speaker["id"], "name": speaker["name"]}, "round": round,
            "index": index, "id": run.id, "name": run.name, "content": run.result, "isError": run.is_error}


class Toolbox:
    """The tools one speaker may call in one turn, and the turn's bounds: at most `max_calls` calls, each within
    `timeout` seconds, each result cut to `max_chars` characters (an MCP server's answer is read only up to
    `MAX_TOOL_ANSWER_BYTES` before that, `llm.mcp`: past it, the call is an error result)."""

    def __init__(self, tools: Sequence[AgentTool], *, max_calls: int = MAX_TOOL_CALLS_PER_TURN,
                 timeout: float = TOOL_CALL_TIMEOUT_SECONDS, max_chars: int = MAX_TOOL_RESULT_CHARS) -> None:
        self.tools = tuple(_unique_names(tools))
        self.by_name = {t.name: t for t in self.tools}
        self.max_calls, self.timeout, self.max_chars = max_calls, timeout, max_chars

    def __bool__(self) -> bool:
        return bool(self.tools)

    def toolset(self, *, final: bool = False) -> ToolSet:
        """The tools as offered to the model; `final`: shown but not to be called (the turn's calls are spent)."""
        return ToolSet(tuple(t.openai() for t in self.tools), "none" if final else None)

    def refused(self, call: Mapping[str, Any]) -> ToolRun:
        """A call past the turn's limit, answered without running it."""
        function = call["function"]
        return ToolRun(call["id"], function["name"], function["arguments"],
                       f"Not run: a turn may call at most {self.max_calls} tools. Answer with what you have.", True)

    async def run(self, call: Mapping[str, Any]) -> ToolRun:
        """Run one call (OpenAI's shape, `{id, function: {name, arguments}}`); never raises: an unknown tool, bad
        arguments, a failure or a timeout is an error result the model reads."""
        function = call["function"]
        name, arguments = function["name"], function["arguments"] or ""

        def answer(text: str, error: bool = False) -> ToolRun:
            return ToolRun(call["id"], name, arguments, clip(text, self.max_chars) if text else text, error)

        tool = self.by_name.get(name)
        if tool is None:
            return answer(f"There is no tool named {name!r}; the tools are: {', '.join(self.by_name)}.", True)
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except RecursionError:  # nested past Python's own limit, which raises no ValueError
            return answer("The arguments nest too deep to be read; send a flat JSON object.", True)
        except ValueError as exc:
            return answer(f"The arguments are not valid JSON ({exc}); send a JSON object.", True)
        if not isinstance(parsed, dict):
            return answer("The arguments must be a JSON object.", True)
        try:
            with anyio.fail_after(self.timeout):
                output = await tool.run(parsed)
        except TimeoutError:
            return answer(f"The tool did not answer within {self.timeout:g} seconds.", True)
        except ServerUnreachable as exc:
            return answer(str(exc), True)
        except Exception as exc:  # a tool's failure is the model's to read, never the run's
            return answer(f"The tool failed: {type(exc).__name__}: {str(exc)[:300]}", True)
        return answer(output.text or "(no output)", output.is_error)


def _unique_names(tools: Sequence[AgentTool]) -> list[AgentTool]:
    """The tools with names the model can tell apart: a name a second server also has is prefixed with its
    server (`weather_get_forecast`), and a tool granted twice is offered once."""
    seen: dict[str, AgentTool] = {}
    out = []
    for tool in tools:
        if tool.name in seen:
            if seen[tool.name].grant == tool.grant:
                continue
            tool = replace(tool, name=f"{tool.grant.split('/', 1)[0]}_{tool.name}"[:64])
        seen[tool.name] = tool
        out.append(tool)
    return out


class ToolAccess(Protocol):
    """Where a run finds its speakers' tools (`RunContext.tools`, set by the run's mode: `runs/tools.py`)."""

    async def toolbox(self, grants: Sequence[str], *, agent_id: str | None = None) -> Toolbox | None:
        """The tools of `grants` for one turn (`agent_id`: the speaking agent, for its documents); None when none
        of them can be offered."""
        ...


# --- the built-in tools ---------------------------------------------------------------------


def search_documents(load: Callable[[], Awaitable[list[dict[str, Any]]]], *, k: int = 3) -> AgentTool:
    """`parley/search_documents`: the passages of the agent's documents (`load()`, each `{title, text}`) best
    matching a query, by the round table's own retrieval."""

    async def run(arguments: dict[str, Any]) -> ToolOutput:
        query = str(arguments.get("query") or "").strip()
        if not query:
            return ToolOutput("Send a query: the words to look for.", True)
        passages = retrieve(query, await load(), k=min(int(arguments.get("limit") or k), 8))
        if not passages:
            return ToolOutput(f"Nothing in your documents matches {query!r}.")
        return ToolOutput("\n\n".join(f"[{p.title}]\n{p.text}" for p in passages))

    return AgentTool(
        name=SEARCH_DOCUMENTS, grant=f"{BUILTIN_SERVER}/{SEARCH_DOCUMENTS}", run=run,
        description="Search your own documents; returns the passages that best match the query, with their titles.",
        parameters={"type": "object", "properties": {
            "query": {"type": "string", "description": "The words to look for."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 8, "description": "How many passages (default 3)."},
        }, "required": ["query"]})


def earlier_syntheses(load: Callable[[], Awaitable[list[dict[str, Any]]]]) -> AgentTool:
    """`parley/earlier_syntheses`: the conclusions the table reached on the conversation's earlier questions
    (`load()`, oldest first, each `{question, summary, recommendedAction, confidenceLevel}`)."""

    async def run(arguments: dict[str, Any]) -> ToolOutput:
        found = await load()
        last = int(arguments.get("last") or 0)
        if last > 0:
            found = found[-last:]
        if not found:
            return ToolOutput("This conversation has no earlier conclusion.")
        return ToolOutput("\n\n".join(
            f"Q: {s['question']}\nConclusion: {s.get('summary', '')}\nRecommended: {s.get('recommendedAction', '')}"
            f" (confidence {s.get('confidenceLevel', 'unknown')})" for s in found))

    return AgentTool(
        name=EARLIER_SYNTHESES, grant=f"{BUILTIN_SERVER}/{EARLIER_SYNTHESES}", run=run,
        description="The conclusions your table reached on this conversation's earlier questions, oldest first.",
        parameters={"type": "object", "properties": {
            "last": {"type": "integer", "minimum": 1, "description": "Only the most recent N (default: all)."},
        }})
