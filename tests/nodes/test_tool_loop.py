"""The tool loop of a `speak` node (`nodes.speak`, `nodes.tools`) on the scripted model server, with tools that are
plain Python functions: the calls run, the results go back, the text goes on; a slow or failing tool is a result;
the turn's calls are bounded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from parley.llm.mcp import ToolOutput
from parley.nodes.context import RunContext
from parley.nodes.speak import Turn, speak
from parley.nodes.tools import AgentTool, Toolbox, search_documents
from tests.nodes.test_speak import ADA, ask, context, run  # noqa: F401  (the fixture too)


class Access:
    """A `ToolAccess` over fixed tools, recording what each turn asked for."""

    def __init__(self, tools: Sequence[AgentTool], **bounds: Any) -> None:
        self.tools, self.bounds, self.asked = list(tools), bounds, []

    async def toolbox(self, grants, *, agent_id=None):
        self.asked.append((list(grants), agent_id))
        chosen = [t for t in self.tools if t.grant in grants]
        return Toolbox(chosen, **self.bounds) if chosen else None


def tool(name: str, run, description: str = "") -> AgentTool:
    return AgentTool(name=name, description=description, grant=f"local/{name}", run=run,
                     parameters={"type": "object", "properties": {"city": {"type": "string"}}})


async def forecast(arguments: dict) -> ToolOutput:
    return ToolOutput(f"Rain in {arguments['city']}.")


async def never(arguments: dict) -> ToolOutput:
    await asyncio.Event().wait()  # answers never: only the per-call time limit ends it
    raise AssertionError("unreachable")


async def broken(arguments: dict) -> ToolOutput:
    raise ConnectionError("the backend is down")


def node_keeping(seen: dict, grants=("local/forecast",)):
    def keep(turn: Turn, state: dict, ctx: RunContext) -> dict:
        seen["turn"] = turn
        return {"answer": turn.text}

    return speak(name="turn", prompt=ask, speaker=ADA, writes=keep, round=2, grants=list(grants))


async def test_the_model_calls_a_tool_reads_its_result_and_goes_on_in_the_same_turn(llm, context):
    context.tools = Access([tool("forecast", forecast, "Tomorrow's weather.")])
    llm.script(with_tools=True, match="Rain in Oslo.", reply="So bring an umbrella.")
    llm.script(with_tools=True, reply="Checking.", tool_calls=[{"name": "forecast", "arguments": {"city": "Oslo"},
                                                                "id": "c1"}], times=1)
    seen: dict[str, Turn] = {}
    events, state = await run(node_keeping(seen), context)

    assert state["answer"] == "Checking. So bring an umbrella."  # the text goes on where it stopped
    kinds = [e["event"] for e in events]
    assert kinds.index("tool_call") < kinds.index("tool_result") and kinds.count("tool_call") == 1
    call = next(e for e in events if e["event"] == "tool_call")
    assert call == {"event": "tool_call", "speaker": ADA, "round": 2, "index": 0, "id": "c1", "name": "forecast",
                    "arguments": json.dumps({"city": "Oslo"})}
    result = next(e for e in events if e["event"] == "tool_result")
    assert result == {"event": "tool_result", "speaker": ADA, "round": 2, "index": 0, "id": "c1", "name": "forecast",
                      "content": "Rain in Oslo.", "isError": False}
    assert "".join(e["content"] for e in events if e["event"] == "chunk") == state["answer"]
    turn = seen["turn"]
    assert turn.tool_calls == () and [r.dump() for r in turn.tool_runs] == [
        {"id": "c1", "name": "forecast", "arguments": json.dumps({"city": "Oslo"}), "result": "Rain in Oslo.",
         "isError": False}]
    first, second = llm.requests
    assert [t["function"] for t in first["tools"]] == [{"name": "forecast", "description": "Tomorrow's weather.",
                                                        "parameters": tool("x", None).parameters}]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert second["messages"][2]["content"] == "Checking." and second["messages"][3]["tool_call_id"] == "c1"
    assert context.tools.asked == [(["local/forecast"], "ada")]
    assert sum(r.tool_calls for r in context.ledger.records) == 1  # counted in usage


async def test_a_tool_that_does_not_answer_in_time_or_fails_is_a_result_the_model_reads(llm, context):
    context.tools = Access([tool("slow", never), tool("broken", broken)], timeout=0.2)
    llm.script(with_tools=True, match="seconds", reply="Neither tool helped.")
    llm.script(with_tools=True, tool_calls=[{"name": "slow", "arguments": {}, "id": "s"},
                                            {"name": "broken", "arguments": "{not json", "id": "b"},
                                            {"name": "broken", "arguments": {}, "id": "b2"}], times=1)
    seen: dict[str, Turn] = {}
    _, state = await run(node_keeping(seen, grants=["local/slow", "local/broken"]), context)
    runs = {r.id: r for r in seen["turn"].tool_runs}
    assert runs["s"].is_error and runs["s"].result == "The tool did not answer within 0.2 seconds."
    assert runs["b"].is_error and runs["b"].result.startswith("The arguments are not valid JSON")
    assert runs["b2"].is_error and runs["b2"].result == "The tool failed: ConnectionError: the backend is down"
    assert state["answer"] == "Neither tool helped."
    tools = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["s", "b", "b2"]


async def test_a_turn_stops_calling_at_its_limit_and_answers_without_tools(llm, context):
    context.tools = Access([tool("forecast", forecast)], max_calls=2)
    llm.script(with_tools=True, tool_calls=[{"name": "forecast", "arguments": {"city": "Rome"}}])  # calls forever
    seen: dict[str, Turn] = {}
    _, state = await run(node_keeping(seen), context)
    runs = seen["turn"].tool_runs
    assert len(runs) == 2 and not any(r.is_error for r in runs)
    assert [r.get("tool_choice") for r in llm.requests] == [None, None, "none"]  # the third answer may call none
    assert state["answer"] == ""  # the scripted model kept calling; what it said is the turn


async def test_a_speaker_with_no_tool_it_can_use_is_asked_without_tools(llm, context):
    context.tools = Access([tool("forecast", forecast)])
    _, state = await run(node_keeping({}, grants=["local/elsewhere"]), context)
    assert state["answer"] and "tools" not in llm.requests[0]
    context.tools = None  # a run without a ToolAccess: grants change nothing
    _, state = await run(node_keeping({}), context)
    assert "tools" not in llm.requests[1]


async def test_search_documents_reads_the_agents_documents_by_retrieval():
    async def documents() -> list[dict]:
        return [{"title": "Lyon lease", "text": "The Lyon office lease costs 42,000 euros a year."},
                {"title": "Brand guide", "text": "Our colours are teal and sand."}]

    box = Toolbox([search_documents(documents)])
    found = await box.run({"id": "c", "function": {"name": "search_documents",
                                                   "arguments": json.dumps({"query": "lease cost"})}})
    assert found.result == "[Lyon lease]\nThe Lyon office lease costs 42,000 euros a year." and not found.is_error
    nothing = await box.run({"id": "c", "function": {"name": "search_documents",
                                                     "arguments": json.dumps({"query": "parking"})}})
    assert nothing.result == "Nothing in your documents matches 'parking'."
    empty = await box.run({"id": "c", "function": {"name": "search_documents", "arguments": "{}"}})
    assert empty.is_error


def test_a_name_two_servers_share_is_told_apart():
    first = AgentTool(name="search", description="", parameters={}, grant="wiki/search", run=forecast)
    second = AgentTool(name="search", description="", parameters={}, grant="docs/search", run=forecast)
    assert [t.name for t in Toolbox([first, second, first]).tools] == ["search", "docs_search"]
