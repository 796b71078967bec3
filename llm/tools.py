"""OpenAI function tools as Parley passes them on: a request's `tools`, `tool_choice` and `parallel_tool_calls`,
checked once where the request names them (`ToolSet.from_request`), the rules a conversation with tool calls
keeps (`check_tool_messages`), and a tool call in OpenAI's wire shape (`tool_call`).

Parley never runs a tool: the caller does, and sends the result back in a `tool` message.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from parley.core.limits import MAX_TOOL_NAME_CHARS, MAX_TOOLS
from parley.llm.formats import NAME, check_schema

CHOICES = ("auto", "none", "required")


def tool_call(name: str, arguments: str, call_id: str | None = None) -> dict[str, Any]:
    """One tool call in OpenAI's shape, `{id, type: "function", function: {name, arguments}}` (an id made up
    when the model gave none)."""
    return {"id": call_id or new_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _check_tool(tool: Any, i: int) -> str:
    where = f"tools[{i}]"
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
        raise ValueError(f"{where}: only function tools are supported ({{\"type\": \"function\", \"function\": "
                         f"{{\"name\", \"parameters\"}}}}), not {kind!r}")
    function = tool.get("function")
    if not isinstance(function, dict):
        raise ValueError(f"{where}.function must be an object with a name")
    name = function.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(f"{where}.function.name must be 1-{MAX_TOOL_NAME_CHARS} letters, digits, '_' or '-', "
                         f"not {name!r}")
    if function.get("description") is not None and not isinstance(function["description"], str):
        raise ValueError(f"{where}.function.description must be a string")
    if function.get("strict") is not None and not isinstance(function["strict"], bool):
        raise ValueError(f"{where}.function.strict must be true or false")
    if function.get("parameters") is not None:
        check_schema(function["parameters"], f"{where}.function.parameters")
    return name


@dataclass(frozen=True)
class ToolSet:
    """The function tools a model may call, which of them it must (`choice`), and whether in parallel.

    `choice` is OpenAI's `tool_choice`: "auto" (the default), "none", "required", or
    `{"type": "function", "function": {"name": ...}}`.
    """

    tools: tuple[dict[str, Any], ...]
    choice: str | dict[str, Any] | None = None
    parallel: bool | None = None

    @classmethod
    def from_request(cls, tools: Any, tool_choice: Any = None, parallel_tool_calls: Any = None) -> ToolSet | None:
        """The tools a request offers (None when it offers none).

        A `tool_choice` of "auto" or "none", or `parallel_tool_calls`, without tools changes nothing and is
        accepted; one that demands a call ("required", a named function) needs tools.

        Raises:
            ValueError: a field that is not OpenAI's shape, a tool name twice, or a choice naming no tool.
        """
        if tools is not None and not isinstance(tools, list):
            raise ValueError("tools must be a list of function tools")
        if len(tools or []) > MAX_TOOLS:
            raise ValueError(f"tools: at most {MAX_TOOLS} tools ({len(tools)} sent)")
        names = [_check_tool(tool, i) for i, tool in enumerate(tools or [])]
        if len(set(names)) < len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"tools: each name once; {', '.join(twice)} appear more than once")
        if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
            raise ValueError("parallel_tool_calls must be true or false")
        if isinstance(tool_choice, dict):
            wanted = (tool_choice.get("function") or {}).get("name") if tool_choice.get("type") == "function" else None
            if not isinstance(wanted, str):
                raise ValueError("tool_choice must be 'auto', 'none', 'required' or "
                                 "{\"type\": \"function\", \"function\": {\"name\": ...}}")
            if wanted not in names:
                raise ValueError(f"tool_choice names the function {wanted!r}, which is not among the tools "
                                 f"({', '.join(names) or 'none sent'})")
            tool_choice = {"type": "function", "function": {"name": wanted}}
        elif tool_choice is not None and tool_choice not in CHOICES:
            raise ValueError(f"tool_choice must be 'auto', 'none', 'required' or a function, not {tool_choice!r}")
        elif tool_choice == "required" and not names:
            raise ValueError("tool_choice 'required' needs tools")
        if not names:
            return None
        return cls(tuple(tools), tool_choice, parallel_tool_calls)

    @classmethod
    def load(cls, stored: dict[str, Any] | None) -> ToolSet | None:
        """The tool set of a stored `dump()` (checked when the request came in)."""
        if not stored:
            return None
        return cls(tuple(stored["tools"]), stored.get("tool_choice"), stored.get("parallel_tool_calls"))

    def dump(self) -> dict[str, Any]:
        return {"tools": list(self.tools), "tool_choice": self.choice, "parallel_tool_calls": self.parallel}

    @property
    def key(self) -> str:
        """A stable text of the set (a cache key)."""
        return json.dumps(self.dump(), sort_keys=True)

    def __hash__(self) -> int:  # its fields hold dicts: hashed by its text, so it can key a cache
        return hash(self.key)

    @property
    def names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]

    @property
    def may_call(self) -> bool:
        """Whether the model may call a tool at all (`tool_choice` is not "none")."""
        return self.choice != "none"

    @property
    def must_call(self) -> bool:
        """Whether the answer must be a tool call ("required", or a named function)."""
        return self.choice == "required" or isinstance(self.choice, dict)

    def bind_kwargs(self, *, required: bool = True) -> dict[str, Any]:
        """The keyword arguments of langchain-openai's `bind_tools` besides the tools themselves; for a server that
        takes no `tool_choice: "required"` (`required` False), the one tool by name, or `auto` among several."""
        kwargs: dict[str, Any] = {}
        if self.choice == "required" and not required:
            names = self.names
            kwargs["tool_choice"] = {"type": "function", "function": {"name": names[0]}} if len(names) == 1 else "auto"
        elif self.choice is not None:
            kwargs["tool_choice"] = self.choice
        if self.parallel is not None:
            kwargs["parallel_tool_calls"] = self.parallel
        return kwargs

    def describe(self) -> str:
        """The tools as a model given none reads them: one line each, name, description and parameters."""
        lines = []
        for tool in self.tools:
            function = tool["function"]
            parameters = json.dumps(function.get("parameters") or {}, ensure_ascii=False, separators=(",", ":"))
            about = f": {function['description']}" if function.get("description") else ""
            lines.append(f"- {function['name']}{about} (arguments: {parameters})")
        return "\n".join(lines)


def check_tool_messages(messages: Sequence[dict[str, Any]]) -> None:
    """Refuse a conversation whose tool messages do not fit its tool calls, as OpenAI's API does: each `tool`
    message answers a call of the assistant message before it, and each call is answered before the
    conversation goes on.

    `messages` are OpenAI-style dicts (`role`, `tool_calls` of an assistant, `tool_call_id` of a tool message).

    Raises:
        ValueError: naming the message at fault.
    """
    open_calls: dict[str, int] = {}  # call id → index of the assistant message that made it
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_calls:
                raise ValueError(f"messages[{i}]: a tool message must answer a tool call of the assistant message "
                                 f"before it; no call {call_id!r} is waiting for its result")
            del open_calls[call_id]
            continue
        if open_calls:
            raise _unanswered(open_calls)
        if role == "assistant":
            ids = [call["id"] for call in message.get("tool_calls") or []]
            if len(set(ids)) < len(ids):
                raise ValueError(f"messages[{i}]: each tool call needs its own id")
            open_calls = dict.fromkeys(ids, i)
    if open_calls:
        raise _unanswered(open_calls)


def _unanswered(open_calls: dict[str, int]) -> ValueError:
    return ValueError(f"messages[{min(open_calls.values())}]: an assistant message with tool_calls must be followed "
                      f"by a tool message for each call; no result for {', '.join(sorted(open_calls))}")
