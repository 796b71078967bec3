"""Tell a chat app's own housekeeping (a conversation's title, its tags, follow-up questions, search queries, an
autocompletion, an emoji) from a person's question, so that Parley answers it with one cheap call, not a debate.

Two signs are read, within `core.limits`' bounds and with plain substring checks (no regular expression at all):

- the request names its task: `metadata.task`, with Open WebUI's task names (`backend/open_webui/constants.py`,
  `TASKS`);
- the prompt is a known app's default template, told by a few stable phrases of it (never its whole text, so that a
  reworded line in a new version still matches): Open WebUI's (`backend/open_webui/config.py`,
  `DEFAULT_*_PROMPT_TEMPLATE`) and LibreChat's (`@librechat/agents` `src/utils/title.ts`, which LibreChat's agents
  and custom endpoints title with; its older `api/app/clients/prompts/titlePrompts.js` and `OpenAIClient.titleConvo`).

A template an administrator rewrote is not recognised: docs/chat-apps.md says how to point such an app's tasks at a
plain model instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Any, Literal, get_args

from parley.core.limits import HOUSEKEEPING_SCAN_CHARS, HOUSEKEEPING_TASK_MAX_CHARS

Task = Literal["title", "tags", "follow_ups", "queries", "autocomplete", "emoji", "image_prompt", "tool_selection",
               "other"]
# Every task `housekeeping` may name: a conversation's title, its tags, follow-up questions to suggest, search or
# retrieval queries, the rest of a sentence being typed, an emoji for a message, a prompt for an image model, the
# tools to call for a question (Open WebUI's prompt-based tool calling, done by its task model), and `other`: a task
# the request named in Open WebUI's form (`<name>_generation`) that Parley does not know yet.
TASKS: tuple[str, ...] = get_args(Task)

OPEN_WEBUI, LIBRECHAT = "open-webui", "librechat"


@dataclass(frozen=True)
class Housekeeping:
    """A chat app's own request, not a person's question.

    task: one of `TASKS`. detected_by: `metadata` (the request's `metadata.task` named it) or `prompt` (a known app's
    default template). app: `open-webui` or `librechat` when the prompt is one of that app's templates, else None.
    """

    task: Task
    detected_by: Literal["metadata", "prompt"]
    app: str | None

    def meta(self) -> dict[str, str | None]:
        """The label an answer carries in `_meta.housekeeping`."""
        return {"task": self.task, "detectedBy": self.detected_by, "app": self.app}


# Open WebUI's task names (`TASKS` in backend/open_webui/constants.py) → Parley's. Its mixture of agents
# (`moa_response_generation`) is not housekeeping: it writes the answer itself from several models' answers.
_OPEN_WEBUI_TASKS: dict[str, Task] = {
    "title_generation": "title",
    "tags_generation": "tags",
    "follow_up_generation": "follow_ups",
    "query_generation": "queries",
    "autocomplete_generation": "autocomplete",
    "emoji_generation": "emoji",
    "image_prompt_generation": "image_prompt",
    "function_calling": "tool_selection",
}
_ANSWER_TASKS = frozenset({"moa_response_generation"})
_ANSWER = "answer"  # what `_named_task` returns for a task that is an answer

# Open WebUI's default templates since 0.5 open with a `### Task:` line and quote the chat inside `<chat_history>`
# (`DEFAULT_TITLE_…`, `TAGS_…`, `FOLLOW_UP_…`, `QUERY_…`, `AUTOCOMPLETE_…`, `IMAGE_PROMPT_GENERATION_PROMPT_TEMPLATE`);
# the words of the task line say which, looked for in this order (the first that is there wins). A `### Task:` line
# with none of them is no housekeeping: Open WebUI's RAG template opens the same way, and it asks for the answer.
_TASK_HEADER = "### task:"
_TASK_LINE_CHARS = 500
_OPEN_WEBUI_TASK_LINE: tuple[tuple[str, Task], ...] = (
    ("autocompletion", "autocomplete"),      # "You are an autocompletion system."
    ("image generation", "image_prompt"),    # "Generate a detailed prompt for am image generation task"
    ("follow-up", "follow_ups"),             # "Suggest 3-5 relevant follow-up questions"
    ("tags", "tags"),                        # "Generate 1-3 broad tags categorizing the main themes"
    ("search queries", "queries"),           # "... the necessity of generating search queries"
    ("title", "title"),                      # "Generate a concise title summarizing the chat history."
)

# The other templates: every phrase of a row (lower case) must be there.
_TEMPLATES: tuple[tuple[tuple[str, ...], Task, str], ...] = (
    # Open WebUI 0.3-0.4's title template ("Create a concise, 3-5 word title with an emoji as a title for the chat
    # history, ...").
    (("as a title for the chat history", "<chat_history>"), "title", OPEN_WEBUI),
    # DEFAULT_EMOJI_GENERATION_PROMPT_TEMPLATE: the message follows in a fence.
    (("likely facial expression through a fitting emoji", "message: ```"), "emoji", OPEN_WEBUI),
    # DEFAULT_TOOLS_FUNCTION_CALLING_PROMPT_TEMPLATE, the system message of its tool selection.
    (("available tools:", "return the correct tool(s) from the list of available tools"), "tool_selection",
     OPEN_WEBUI),
    # @librechat/agents' completion title prompt (custom endpoints' default `titleMethod`), and LibreChat's older
    # `Please generate ${titleInstruction} … ||>Title:`.
    (("5-word-or-less title for the conversation", "only return the title itself"), "title", LIBRECHAT),
    (("5-word-or-less title for the conversation", "||>title:"), "title", LIBRECHAT),
    # @librechat/agents' structured title prompt (`titleMethod: structured` or `functions`).
    (("analyze this conversation and provide:", "concise title in the detected language"), "title", LIBRECHAT),
    # LibreChat's older `createTitlePrompt` (a system message).
    (("write a concise title for this conversation in the given language", "title in 5 words or less"), "title",
     LIBRECHAT),
)


def housekeeping(messages: list[dict], metadata: Any = None) -> Housekeeping | None:
    """Say whether a chat completion is a chat app's own housekeeping, and which, or None for a person's request.

    `metadata.task` decides first: an Open WebUI task name gives its task (`title_generation` → `title`, ...;
    `function_calling` → `tool_selection`), another name of that form (`<name>_generation`) gives `other`, and
    `moa_response_generation` (an answer written from several models' answers) is never housekeeping. Any other
    value (OpenAI's `metadata` holds a client's own tags) says nothing. Then the prompt: the last user message and
    the first system (or developer) message, each read only up to `HOUSEKEEPING_SCAN_CHARS`, are looked for a known
    app's default template. A question that merely mentions a title or tags is no template.

    Args:
        messages: OpenAI-style `[{role, content}]`, content a string or a list of parts (only `text` parts read).
        metadata: the request body's `metadata` as sent, of any type; only an object with a string `task` counts.

    Returns:
        The task, how it was told and the app when the prompt names it; None when nothing says housekeeping. Never
        raises, whatever the types of its arguments.

    >>> housekeeping([{"role": "user", "content": "What is a good title for my novel?"}]) is None
    True
    >>> housekeeping([{"role": "user", "content": "Hi"}], {"task": "title_generation"}).meta()
    {'task': 'title', 'detectedBy': 'metadata', 'app': None}
    """
    named = _named_task(metadata)
    if named == _ANSWER:
        return None
    found = _template_of(messages)
    if named is not None:
        return Housekeeping(named, "metadata", found[1] if found else None)
    if found is not None:
        return Housekeeping(found[0], "prompt", found[1])
    return None


def _named_task(metadata: Any) -> Task | str | None:
    """The task `metadata.task` names, `_ANSWER` for a task that writes the answer, None when it names none."""
    if not isinstance(metadata, dict):
        return None
    name = metadata.get("task")
    if not isinstance(name, str) or len(name) > HOUSEKEEPING_TASK_MAX_CHARS:
        return None
    name = name.strip().lower()
    if name in _ANSWER_TASKS:
        return _ANSWER
    if name in _OPEN_WEBUI_TASKS:
        return _OPEN_WEBUI_TASKS[name]
    stem = name.removesuffix("_generation")
    if stem != name and stem and stem.replace("_", "").isascii() and stem.replace("_", "").isalpha():
        return "other"
    return None


def _template_of(messages: Any) -> tuple[Task, str] | None:
    """The task and app of the known template in the last user message, else in the first system message."""
    if not isinstance(messages, (list, tuple)):
        return None
    user = next((m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), None)
    system = next((m for m in messages if isinstance(m, dict) and m.get("role") in ("system", "developer")), None)
    for message in (user, system):
        if message is not None and (found := _template(_text(message.get("content")))) is not None:
            return found
    return None


def _text(content: Any) -> str:
    """The first `HOUSEKEEPING_SCAN_CHARS` characters of a message's text, in lower case: a string, or the `text`
    parts of a list of parts (at most as many parts as characters are looked at)."""
    limit = HOUSEKEEPING_SCAN_CHARS
    if isinstance(content, str):
        return content[:limit].lower()
    if not isinstance(content, list):
        return ""
    pieces: list[str] = []
    size = 0
    for part in islice(content, limit):
        if size >= limit:
            break
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            piece = part["text"][: limit - size]
            pieces.append(piece)
            size += len(piece) + 1
    return "\n".join(pieces)[:limit].lower()


def _template(text: str) -> tuple[Task, str] | None:
    """The task and app of the known default template `text` (lower case) is, or None."""
    header = text.find(_TASK_HEADER)
    if header != -1 and "<chat_history>" in text:
        start = header + len(_TASK_HEADER)
        end = text.find("###", start, start + _TASK_LINE_CHARS)
        line = text[start:end if end != -1 else start + _TASK_LINE_CHARS]
        task = next((task for word, task in _OPEN_WEBUI_TASK_LINE if word in line), None)
        if task is not None:
            return task, OPEN_WEBUI
    for phrases, task, app in _TEMPLATES:
        if all(phrase in text for phrase in phrases):
            return task, app
    return None
