"""The `arbitrate` node: the first candidate of a fallback chain that answers writes the best answer from several
anonymised ones.

    builder.add_node("arbitrate", arbitrate(candidates=lambda state, ctx: state.get("arbitrators") or [...],
                                            timeout=lambda ctx: ctx.arbitrator_timeout, context=PanelContext))

The answers (`{model, model_id?, answer}`) reach the arbitrator as Answer A, B, C, with their authors'
model names redacted, each cut to a fair share of the smallest candidate window; the candidates are
asked in turn (`stream_first_answer`) until one answers. Also here: the fallback chain itself, which a
plain "first model of a list that answers" node uses too, and the message helpers both share.

Two settings of the state reach the answering model: `tools` (a `ToolSet.dump()`: the arbitrator may answer
with tool calls, written to `tool_calls`) and `response_format` (OpenAI's: the answer must be that JSON, after
one repair at most).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, convert_to_messages
from langchain_core.runnables import Runnable
from langgraph.runtime import Runtime

from parley.core.limits import MAX_PANEL_SIZE
from parley.llm.failures import MODEL_RETRY, classify_failure, describe_failure, is_transient
from parley.llm.formats import AnswerFormat
from parley.llm.providers import split_model_id
from parley.llm.tokens import approx_text_tokens, approx_tokens, clip_text
from parley.llm.tools import ToolSet
from parley.nodes.anonymise import Anonymiser
from parley.nodes.capability import mark
from parley.nodes.context import RunContext
from parley.nodes.events import event_writer
from parley.nodes.prompts import arbitrate as prompts
from parley.nodes.speak import Turn, TurnInterrupted, say, send_turn

ANSWER_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:MAX_PANEL_SIZE]  # one per answer, up to the largest panel

# However small the arbitrator's context window, each answer keeps at least this much of its text.
MIN_ANSWER_TOKENS = 48


# --- errors ---------------------------------------------------------------------------------


class AnswerError(Exception):
    """A run cannot produce an answer (the panel's errors are these too: `graphs.panel.steps.PanelError`)."""


class AllModelsFailedError(AnswerError):
    """Every candidate for one role (the arbitrator, or a router's fallback list) failed; `attempts` says why."""

    def __init__(self, role: str, attempts: Sequence[dict[str, Any]]) -> None:
        self.role, self.attempts = role, list(attempts)
        fates = "; ".join(f"{a['model']}: {a['error']} ({a['detail']})" for a in self.attempts)
        who = "arbitrator candidate" if role == "arbitrator" else "model in the fallback list"
        super().__init__(f"Every {who} failed. {fates or 'No candidates were given.'}")


class EmptyAnswerError(RuntimeError):
    """A model answered with no text at all."""


class InvalidStructuredAnswerError(AnswerError):
    """The answer is not the JSON the request's `response_format` asks for, even after one repair."""

    def __init__(self, model: str, problem: str, answer: str) -> None:
        self.model, self.problem, self.answer = model, problem, answer
        super().__init__(f"{model}'s answer is not the JSON the response_format asks for, even after one repair: "
                         f"{problem}")


# --- message helpers ------------------------------------------------------------------------


def content_text(content: Any) -> str:
    """The text of an OpenAI-style content (a string, or a list of parts of which the text ones count)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def to_messages(messages: Sequence[dict[str, Any]], system_prompt: str | None = None) -> list[BaseMessage]:
    """Turn OpenAI-style `{role, content}` dicts (an assistant's `tool_calls` and `tool` messages included) into
    LangChain messages, `system_prompt` first."""
    converted = convert_to_messages([dict(m) for m in messages])
    return ([SystemMessage(system_prompt)] if system_prompt else []) + converted


def has_tool_messages(messages: Sequence[dict[str, Any]]) -> bool:
    """Whether a conversation holds tool calls or their results."""
    return any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


def without_tools(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as a model offered no tools reads it: each tool call a line of its assistant's text, each
    result a user message naming its call (`prompts.TOOL_CALL_TEXT`, `prompts.TOOL_RESULT_TEXT`)."""
    if not has_tool_messages(messages):
        return list(messages)
    names: dict[str, str] = {}
    plain: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id", "")
            plain.append({"role": "user", "content": prompts.TOOL_RESULT_TEXT.format(
                id=call_id, name=names.get(call_id, "tool"), content=content_text(message.get("content")))})
        elif calls := message.get("tool_calls"):
            lines = [content_text(message.get("content")).strip()]
            for call in calls:
                function = call.get("function") or {}
                names[call.get("id", "")] = function.get("name", "tool")
                lines.append(prompts.TOOL_CALL_TEXT.format(id=call.get("id", ""), name=function.get("name", "tool"),
                                                           arguments=function.get("arguments", "")))
            plain.append({k: v for k, v in message.items() if k != "tool_calls"} | {
                "content": "\n".join(line for line in lines if line)})
        else:
            plain.append(dict(message))
    return plain


def caller_instructions(messages: Sequence[dict[str, Any]], system_prompt: str | None) -> str:
    """Everything the caller told the models to do: the configured system prompt and any system messages."""
    parts = [system_prompt] if system_prompt else []
    parts += [content_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")]
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


def model_names(models: Sequence[str]) -> list[str]:
    """Every way an answer may name one of `models`: the id, the bare name, and its last path part."""
    names: list[str] = []
    for model in models:
        _, name = split_model_id(model)
        names += [model, name, name.rsplit("/", 1)[-1]]
    return names


def redact_names(text: str, models: Sequence[str]) -> str:
    """Replace the panel's model ids and names in `text`, so an answer that names its author stays anonymous."""
    return Anonymiser.redacting(model_names(models), prompts.REDACTED_NAME).hide(text)


def fair_shares(sizes: Sequence[int], room: int) -> list[int]:
    """Split `room` among items of `sizes`: the smallest take what they need, the rest split what is left equally.

    >>> fair_shares([100, 900, 900], 1000)
    [100, 450, 450]
    """
    shares = [0] * len(sizes)
    left = max(0, room)
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    for taken, i in enumerate(order):
        shares[i] = min(sizes[i], left // (len(sizes) - taken))
        left -= shares[i]
    return shares


def arbitration_messages(
    messages: Sequence[dict[str, Any]],
    answers: Sequence[Mapping[str, Any]],
    *,
    system_prompt: str | None = None,
    arbitrator_prompt: str | None = None,
    prompt_budget: int | None = None,
    instructions: str | None = None,
    request: str | None = None,
    tools: ToolSet | None = None,
    answer_format: AnswerFormat | None = None,
    criteria: str | None = None,
) -> list[BaseMessage]:
    """The arbitrator's prompt: its instructions, the caller's, the conversation and the answers as Answer A, B, C.

    `instructions` and `request` (a template with `{conversation}` and `{answers}`) replace the arbitrator's own
    system prompt and closing request, for the roles that read answers the same way but choose among them (a
    judge, a reviewer: `nodes.prompts.decide`).

    With a `prompt_budget` (tokens, from the arbitrator's context window), answers share what the rest
    of the prompt leaves: short ones keep all of theirs, long ones are cut to an equal share of the
    remainder, so every answer reaches the arbitrator rather than the context guard dropping the first
    ones whole. Tool calls and results in the conversation read as text (`without_tools`); with `tools` it
    is told it may call them, with `answer_format` which JSON to answer in, with `criteria` what to weigh.
    """
    instructions = instructions or (
        arbitrator_prompt.strip() + prompts.CUSTOM_ARBITRATOR_SUFFIX if arbitrator_prompt else prompts.ARBITRATOR_SYSTEM
    )
    caller = caller_instructions(messages, system_prompt)
    if caller:
        instructions += "\n\n" + prompts.CALLER_INSTRUCTIONS.format(system_prompt=caller)
    if criteria and criteria.strip():
        instructions += "\n\n" + prompts.CRITERIA.format(criteria=criteria.strip())
    if tools is not None and tools.may_call:
        instructions += "\n\n" + prompts.ARBITRATOR_TOOLS
    if answer_format is not None:
        instructions += "\n\n" + prompts.ARBITRATOR_FORMAT.format(schema=answer_format.schema_text())
    conversation = "\n\n".join(
        prompts.CONVERSATION_TURN.format(role=m.get("role", "user"), content=content_text(m.get("content")))
        for m in without_tools(messages)
        if m.get("role") not in ("system", "developer")
    )
    names = [name for a in answers for name in (a["model"], a.get("model_id")) if name]
    texts = [redact_names(a["answer"], names) for a in answers]

    def prompt(texts: Sequence[str]) -> list[BaseMessage]:
        blocks = "\n\n".join(
            prompts.ANSWER_BLOCK.format(letter=ANSWER_LETTERS[i], answer=text) for i, text in enumerate(texts)
        )
        return [SystemMessage(instructions), HumanMessage((request or prompts.ARBITRATION_REQUEST).format(
            conversation=conversation, answers=blocks))]

    if prompt_budget is not None and texts:
        room = prompt_budget - approx_tokens(prompt([""] * len(texts)))
        shares = fair_shares([approx_text_tokens(t) for t in texts], room)
        texts = [clip_text(t, max(MIN_ANSWER_TOKENS, share), prompts.ANSWER_CUT) for t, share in zip(texts, shares)]
    return prompt(texts)


# --- the fallback chain ---------------------------------------------------------------------


async def stream_first_answer(
    ctx: RunContext,
    candidates: Sequence[str],
    messages: list[BaseMessage],
    *,
    role: str,
    temperature: float | None = None,
    max_tokens: int | None = None,
    timeout: float | None = None,
    tools: ToolSet | None = None,
    answer_format: AnswerFormat | None = None,
) -> tuple[Turn, str, list[dict[str, Any]]]:
    """Stream an answer from the first candidate that gives one; each failure hands over to the next, except a
    transient one before any token was sent, after which the same candidate is asked once more (`MODEL_RETRY`).

    Tokens go out as `chunk` events, each candidate speaking as itself (`nodes.speak.say`), and the pieces of
    its tool calls as `tool_call` events when it is offered `tools` (an answer no one reads as it is written, see
    `RunContext.streamed`, is asked for whole and sent as one chunk); `{"event": "answering"}` announces each
    candidate and `{"event": "fallback"}` each failure (with `partial: true` when some of its tokens already
    went out, which a streaming caller cannot take back). With an `answer_format` the answer is held until it
    is known to be that JSON (or to call tools), after one repair at most (`conform`), then sent whole.

    Returns:
        The answer (its text and tool calls), the model that gave it, and the failed attempts before it.

    Raises:
        AllModelsFailedError: every candidate failed.
        InvalidStructuredAnswerError: the answer is not the JSON asked for, even after its repair.
    """
    writer = event_writer()
    failures: list[dict[str, Any]] = []
    for model in dict.fromkeys(candidates):
        writer({"event": "answering", "role": role, "model": model})
        for attempt in range(1, MODEL_RETRY.max_attempts + 1):
            turn: Turn | None = None
            try:
                chat = ctx.chat(model, temperature=temperature, max_tokens=max_tokens, timeout=timeout,
                                label=f"{role}:{model}", tools=tools, answer_format=answer_format)
                turn = await say(chat, messages, speaker={"id": model, "name": model}, hold=answer_format is not None,
                                 whole=not ctx.streamed and tools is None)
                if not turn.text.strip() and not turn.tool_calls:
                    raise EmptyAnswerError(f"{model} answered with no text")
                if answer_format is not None:
                    turn = await conform(chat, messages, turn, answer_format)
                    send_turn(turn)
            except InvalidStructuredAnswerError:
                raise  # the answer came, in the wrong shape: the request fails rather than ask everyone in turn
            # Any failure of one candidate is the next one's cue; the cause is kept and reported if all fail.
            except Exception as exc:  # noqa: BLE001
                # Some of it went out: the tokens of a turn that was not held (a held one sends nothing until checked).
                partial = isinstance(exc, TurnInterrupted) or bool(turn and turn.text and answer_format is None)
                cause = exc.__cause__ if isinstance(exc, TurnInterrupted) and exc.__cause__ else exc
                if not partial and attempt < MODEL_RETRY.max_attempts and is_transient(cause):
                    # Nothing of it was sent (a pooled connection the server had closed, say): ask it again.
                    await asyncio.sleep(MODEL_RETRY.initial_interval)
                    continue
                failure = {"model": model, "role": role, "error": classify_failure(cause),
                           "detail": describe_failure(cause), "partial": partial}
                failures.append(failure)
                writer({"event": "fallback", **failure})
                break
            return turn, model, failures
    raise AllModelsFailedError(role, failures)


async def conform(chat: Runnable, messages: list[BaseMessage], turn: Turn, answer_format: AnswerFormat) -> Turn:
    """`turn` when it is an answer in `answer_format` (or calls tools), else the model's one repair of it: the model
    is shown its answer and what is wrong with it, and answers again (held, as `turn` was).

    Raises:
        InvalidStructuredAnswerError: the repaired answer does not conform either.
    """
    if turn.tool_calls or (problem := answer_format.problem(turn.text)) is None:
        return turn
    repair = [*messages, AIMessage(turn.text), HumanMessage(prompts.FORMAT_REPAIR.format(
        problem=problem, schema=answer_format.schema_text()))]
    again = await say(chat, repair, speaker=turn.speaker, round=turn.round, model=turn.model, label=turn.label,
                      hold=True)
    if again.tool_calls or (problem := answer_format.problem(again.text)) is None:
        return again
    raise InvalidStructuredAnswerError(turn.speaker["id"], problem, again.text)


def _reader(key: str | Callable[[Any], Any]) -> Callable[[Any], Any]:
    return key if callable(key) else (lambda state: state[key])


def arbitrate(
    *,
    candidates: Callable[[Mapping[str, Any], RunContext], Sequence[str]],
    timeout: Callable[[RunContext], float | None] = lambda ctx: None,
    context: type[RunContext] = RunContext,
    messages: str | Callable[[Mapping[str, Any]], Sequence[dict[str, Any]]] = "messages",
    answers: str | Callable[[Mapping[str, Any]], Sequence[Mapping[str, Any]]] = "answers",
    system_prompt_key: str = "system_prompt",
    instructions_key: str = "arbitrator_prompt",
    temperature_key: str = "temperature",
    max_tokens_key: str = "max_tokens",
    answer_key: str = "answer",
    model_key: str = "arbitrator",
    attempts_key: str = "attempts",
    tools_key: str = "tools",
    format_key: str = "response_format",
    tool_calls_key: str = "tool_calls",
    criteria_key: str = "criteria",
    role: str = "arbitrator",
):
    """Build an arbitration node: the first candidate model that answers writes one answer from several.

    The answers to the conversation `messages` reach the arbitrator anonymised (Answer A, B, C, their authors'
    model names redacted) and cut to fit the smallest candidate's window; the candidates are asked in turn, a failed
    one recorded in `attempts_key`, and the answer streams as `chunk` events.

    Args:
        candidates: the fallback chain, from the state and the run's context, asked in order.
        timeout: the time limit of one candidate's call, from the run's context (None: the deployment's).
        context: the run context class the node reads (`RunContext.of` widens a plainer one).
        messages, answers: the state keys (or functions of the state) of the conversation (OpenAI-style
            `{role, content}`) and of the answers (`{model, model_id?, answer}`), in the order shown.
        system_prompt_key, instructions_key, temperature_key, max_tokens_key: the state keys of the caller's
            instructions, a replacement of the arbitrator's own, and the sampling knobs (all optional).
        answer_key, model_key, attempts_key: where it writes the answer, the candidate that gave it, and the
            candidates' failures before it.
        tools_key, format_key: the state keys of the tools the arbitrator is offered (a `ToolSet.dump()`) and of the
            JSON its answer must be (OpenAI's `response_format`), both optional.
        tool_calls_key: where it writes the answer's tool calls (OpenAI's shape), when it was offered tools.
        criteria_key: the state key of what the caller wants the answers weighed by (optional).
        role: the name its calls and events go by.

    Returns:
        The async node `(state, runtime) -> update`, writing `answer_key`, `model_key` and `attempts_key`.

    Raises:
        AllModelsFailedError: (when the node runs) every candidate failed; the message names each and why.
        InvalidStructuredAnswerError: (when the node runs) the answer is not the JSON `format_key` asks for, even
            after one repair.

    Example:
        ```python
        # docs/python.md, council.py: the run's model arbitrates state["answers"] ({model, answer} each)
        builder.add_node("arbitrate", parley.arbitrate(candidates=lambda state, ctx: [ctx.model_id()]))
        ```
    """
    read_messages, read_answers = _reader(messages), _reader(answers)

    async def arbitrate_answers(state: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
        """Have the first arbitrator candidate that answers synthesize the best answer from the anonymised ones."""
        ctx = context.of(runtime)
        chain = list(candidates(state, ctx))
        tools, answer_format = ToolSet.load(state.get(tools_key)), AnswerFormat.load(state.get(format_key))
        # One prompt serves every candidate, so it fits the smallest window among them.
        budgets = [ctx.factory.prompt_budget(m, state.get(max_tokens_key)) for m in chain]
        prompt = arbitration_messages(
            read_messages(state),
            read_answers(state),
            system_prompt=state.get(system_prompt_key),
            arbitrator_prompt=state.get(instructions_key),
            prompt_budget=min((b for b in budgets if b is not None), default=None),
            tools=tools,
            answer_format=answer_format,
            criteria=state.get(criteria_key),
        )
        turn, model, failures = await stream_first_answer(
            ctx, chain, prompt, role=role, temperature=state.get(temperature_key),
            max_tokens=state.get(max_tokens_key), timeout=timeout(ctx), tools=tools, answer_format=answer_format,
        )
        calls = {tool_calls_key: list(turn.tool_calls)} if tools is not None else {}
        return {answer_key: turn.text, model_key: model, attempts_key: failures, **calls}

    arbitrate_answers.__name__ = "arbitrate"
    return mark(arbitrate_answers, "arbitrate")
