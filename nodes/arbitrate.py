"""The `arbitrate` node: the first candidate of a fallback chain that answers writes the best answer from several
anonymised ones.

    builder.add_node("arbitrate", arbitrate(candidates=lambda state, ctx: state.get("arbitrators") or [...],
                                            timeout=lambda ctx: ctx.arbitrator_timeout, context=PanelContext))

The answers (`{model, model_id?, answer}`) reach the arbitrator as Answer A, B, C, with their authors'
model names redacted, each cut to a fair share of the smallest candidate window; the candidates are
asked in turn (`stream_first_answer`) until one answers. Also here: the fallback chain itself, which a
plain "first model of a list that answers" node uses too, and the message helpers both share.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, convert_to_messages
from langgraph.runtime import Runtime

from core.limits import MAX_PANEL_SIZE
from llm.failures import MODEL_RETRY, classify_failure, describe_failure, is_transient
from llm.providers import split_model_id
from llm.tokens import approx_text_tokens, approx_tokens, clip_text
from nodes.anonymise import Anonymiser
from nodes.capability import mark
from nodes.context import RunContext
from nodes.events import event_writer
from nodes.prompts import arbitrate as prompts
from nodes.speak import Turn, TurnInterrupted, say

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


# --- message helpers ------------------------------------------------------------------------


def content_text(content: Any) -> str:
    """The text of an OpenAI-style content (a string, or a list of parts of which the text ones count)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def to_messages(messages: Sequence[dict[str, Any]], system_prompt: str | None = None) -> list[BaseMessage]:
    """Turn OpenAI-style `{role, content}` dicts into LangChain messages, `system_prompt` first."""
    converted = convert_to_messages([dict(m) for m in messages])
    return ([SystemMessage(system_prompt)] if system_prompt else []) + converted


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
) -> list[BaseMessage]:
    """The arbitrator's prompt: its instructions, the caller's, the conversation and the answers as Answer A, B, C.

    `instructions` and `request` (a template with `{conversation}` and `{answers}`) replace the arbitrator's own
    system prompt and closing request, for the roles that read answers the same way but choose among them (a
    judge, a reviewer: `nodes.prompts.decide`).

    With a `prompt_budget` (tokens, from the arbitrator's context window), answers share what the rest
    of the prompt leaves: short ones keep all of theirs, long ones are cut to an equal share of the
    remainder, so every answer reaches the arbitrator rather than the context guard dropping the first
    ones whole.
    """
    instructions = instructions or (
        arbitrator_prompt.strip() + prompts.CUSTOM_ARBITRATOR_SUFFIX if arbitrator_prompt else prompts.ARBITRATOR_SYSTEM
    )
    caller = caller_instructions(messages, system_prompt)
    if caller:
        instructions += "\n\n" + prompts.CALLER_INSTRUCTIONS.format(system_prompt=caller)
    conversation = "\n\n".join(
        prompts.CONVERSATION_TURN.format(role=m.get("role", "user"), content=content_text(m.get("content")))
        for m in messages
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
) -> tuple[str, str, list[dict[str, Any]]]:
    """Stream an answer from the first candidate that gives one; each failure hands over to the next, except a
    transient one before any token was sent, after which the same candidate is asked once more (`MODEL_RETRY`).

    Tokens go out as `chunk` events, each candidate speaking as itself (`nodes.speak.say`);
    `{"event": "answering"}` announces each candidate and `{"event": "fallback"}` each failure (with
    `partial: true` when some of its tokens already went out, which a streaming caller cannot take back).

    Returns:
        The answer, the model that gave it, and the failed attempts before it.

    Raises:
        AllModelsFailedError: every candidate failed.
    """
    writer = event_writer()
    failures: list[dict[str, Any]] = []
    for model in dict.fromkeys(candidates):
        writer({"event": "answering", "role": role, "model": model})
        for attempt in range(1, MODEL_RETRY.max_attempts + 1):
            turn: Turn | None = None
            try:
                chat = ctx.chat(model, temperature=temperature, max_tokens=max_tokens, timeout=timeout,
                                label=f"{role}:{model}")
                turn = await say(chat, messages, speaker={"id": model, "name": model})
                if not turn.text.strip():
                    raise EmptyAnswerError(f"{model} answered with no text")
            # Any failure of one candidate is the next one's cue; the cause is kept and reported if all fail.
            except Exception as exc:  # noqa: BLE001
                partial = isinstance(exc, TurnInterrupted) or bool(turn and turn.text)
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
            return turn.text, model, failures
    raise AllModelsFailedError(role, failures)


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
    role: str = "arbitrator",
):
    """Build an arbitration node: the anonymised `answers` to the conversation `messages`, synthesized into one.

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
        role: the name its calls and events go by.
    """
    read_messages, read_answers = _reader(messages), _reader(answers)

    async def arbitrate_answers(state: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
        """Have the first arbitrator candidate that answers synthesize the best answer from the anonymised ones."""
        ctx = context.of(runtime)
        chain = list(candidates(state, ctx))
        # One prompt serves every candidate, so it fits the smallest window among them.
        budgets = [ctx.factory.prompt_budget(m, state.get(max_tokens_key)) for m in chain]
        prompt = arbitration_messages(
            read_messages(state),
            read_answers(state),
            system_prompt=state.get(system_prompt_key),
            arbitrator_prompt=state.get(instructions_key),
            prompt_budget=min((b for b in budgets if b is not None), default=None),
        )
        answer, model, failures = await stream_first_answer(
            ctx, chain, prompt, role=role, temperature=state.get(temperature_key),
            max_tokens=state.get(max_tokens_key), timeout=timeout(ctx),
        )
        return {answer_key: answer, model_key: model, attempts_key: failures}

    arbitrate_answers.__name__ = "arbitrate"
    return mark(arbitrate_answers, "arbitrate")
