"""Panel mode's nodes: choose panelists of distinct families, ask them in parallel, then arbitrate or assemble.

The nodes read the panel's state keys (`messages`, `models`, `panel_size`, `arbitrators`, ...) and the
per-run `PanelContext`; `graphs/panel.py` wires them, and any other graph may reuse them.
With `allow_same_family`, seats that distinct families cannot fill go to the listed models again
(self-consistency sampling), each seat with a unique label and each resample at its own temperature.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, convert_to_messages
from langgraph.errors import NodeError
from langgraph.runtime import Runtime
from langgraph.types import Command

from core.limits import DEFAULT_MIN_SUCCESSES, DEFAULT_PANEL_SIZE, MAX_PANEL_SIZE, MIN_PANEL_SIZE
from llm.client import off_loop
from llm.failures import MODEL_RETRY, classify_failure, describe_failure, is_transient
from llm.families import model_family
from llm.providers import DEFAULT_PROVIDER, split_model_id
from llm.tokens import approx_text_tokens, approx_tokens, clip_text
from llm.usage import monotonic_ms, usage_from_message
from nodes.context import RunContext
from nodes.events import emit, event_writer
from nodes.prompts import panel as prompts
from nodes.speak import Turn, TurnInterrupted, chunk_event, say

# The raw panel's wire format (seed contract): each answer under its model's name, separated by rules.
PANEL_BLOCK = "**{model}**\n\n{answer}"
PANEL_SEPARATOR = "\n\n---\n\n"
PANEL_SPEAKER = {"id": "panel", "name": "panel"}  # who "speaks" the assembled raw panel's blocks

ANSWER_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:MAX_PANEL_SIZE]  # one per panelist

# Resampled seats: a model's samples spread around the caller's temperature (this one when the caller
# set none) in steps of this size, so a model asked twice answers twice, not once in duplicate.
SAMPLE_TEMPERATURE = 0.7
SAMPLE_TEMPERATURE_STEP = 0.15

# However small the arbitrator's context window, each answer keeps at least this much of its text.
MIN_ANSWER_TOKENS = 48


@dataclass(kw_only=True)
class PanelContext(RunContext):
    """Per-run knobs of a panel: how long one panelist or arbitrator call may take.

    `None` means the deployment's `PARLEY_REQUEST_TIMEOUT`. The limit applies to each model call
    (and each retry of it) on its own, so one slow panelist never holds up another's budget.
    """

    panelist_timeout: float | None = None
    arbitrator_timeout: float | None = None


def panel_context(runtime: Runtime | None) -> PanelContext:
    """The run's PanelContext; a plain RunContext (a designer workflow's) is widened (see `RunContext.of`)."""
    return PanelContext.of(runtime)


# --- errors ---------------------------------------------------------------------------------


class PanelError(Exception):
    """A panel run cannot produce an answer."""


class TooFewFamiliesError(PanelError, ValueError):
    """The fallback list has fewer distinct model families than the panel needs (a bad request, not an outage)."""

    def __init__(self, models: Sequence[str], needed: int) -> None:
        self.models, self.needed = list(models), needed
        self.families = {m: model_family(m) for m in self.models}
        distinct = len(set(self.families.values()))
        listed = ", ".join(f"{m} (family {f})" for m, f in self.families.items()) or "no models"
        super().__init__(
            f"A panel of {needed} needs {needed} models of distinct families, but the fallback list has "
            f"{distinct} distinct famil{'y' if distinct == 1 else 'ies'}: {listed}"
        )


class TooFewPanelistsError(PanelError):
    """Fewer panelists answered than the run requires; `panelists` says how each one fared."""

    def __init__(self, panelists: Sequence[dict[str, Any]], needed: int) -> None:
        self.panelists, self.needed = list(panelists), needed
        answered = sum(1 for p in self.panelists if p["success"])
        fates = "; ".join(
            f"{p['model']}: answered" if p["success"] else f"{p['model']}: {p['error']} ({p.get('detail', '')})"
            for p in self.panelists
        )
        super().__init__(
            f"Only {answered} of {len(self.panelists)} panelists answered ({needed} needed). {fates}"
        )


class AllModelsFailedError(PanelError):
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


class _PanelPrompts:
    """The LangChain prompt of the last few panels' conversations, by the identity of the `messages` list every
    panelist of one panel is sent (`ask_panelists`): converted once, and the same message objects, so the model
    layer converts their request once too. An entry holds its list, so its id cannot be reused while kept."""

    SIZE = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, str | None], tuple[Sequence[dict[str, Any]], list[BaseMessage]]] = (
            OrderedDict()
        )

    def prompt(self, messages: Sequence[dict[str, Any]], system_prompt: str | None) -> list[BaseMessage]:
        key = (id(messages), system_prompt)
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            entry = (messages, to_messages(messages, system_prompt))
            with self._lock:
                self._entries[key] = entry
                while len(self._entries) > self.SIZE:
                    self._entries.popitem(last=False)
        return list(entry[1])


_PANEL_PROMPTS = _PanelPrompts()


def caller_instructions(messages: Sequence[dict[str, Any]], system_prompt: str | None) -> str:
    """Everything the caller told the models to do: the configured system prompt and any system messages."""
    parts = [system_prompt] if system_prompt else []
    parts += [content_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")]
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


def redact_names(text: str, models: Sequence[str]) -> str:
    """Replace the panel's model ids and names in `text`, so an answer that names its author stays anonymous."""
    names: set[str] = set()
    for model in models:
        _, name = split_model_id(model)
        names |= {model, name, name.rsplit("/", 1)[-1]}
    for name in sorted((n for n in names if len(n) >= 3), key=len, reverse=True):
        text = re.sub(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", prompts.REDACTED_NAME, text, flags=re.IGNORECASE)
    return text


def arbitration_messages(
    messages: Sequence[dict[str, Any]],
    answers: Sequence[dict[str, str]],
    *,
    system_prompt: str | None = None,
    arbitrator_prompt: str | None = None,
    prompt_budget: int | None = None,
) -> list[BaseMessage]:
    """The arbitrator's prompt: its instructions, the caller's, the conversation and the answers as Answer A, B, C.

    With a `prompt_budget` (tokens, from the arbitrator's context window), answers share what the rest
    of the prompt leaves: short ones keep all of theirs, long ones are cut to an equal share of the
    remainder, so every answer reaches the arbitrator rather than the context guard dropping the first
    ones whole.
    """
    instructions = (
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
        return [SystemMessage(instructions), HumanMessage(prompts.ARBITRATION_REQUEST.format(
            conversation=conversation, answers=blocks))]

    if prompt_budget is not None and texts:
        room = prompt_budget - approx_tokens(prompt([""] * len(texts)))
        shares = fair_shares([approx_text_tokens(t) for t in texts], room)
        texts = [clip_text(t, max(MIN_ANSWER_TOKENS, share), prompts.ANSWER_CUT) for t, share in zip(texts, shares)]
    return prompt(texts)


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


# --- choosing the panel ---------------------------------------------------------------------


def pick_panelists(
    models: Sequence[str], size: int = DEFAULT_PANEL_SIZE, *, allow_same_family: bool = False
) -> list[str]:
    """Pick `size` models of distinct families from a fallback list, keeping the list's order.

    A first pass also insists on distinct providers (different vendors tend to differ more than two
    families of one vendor); a second pass fills the remaining seats with any unseen family.
    With `allow_same_family`, seats still empty then go to listed models not seated yet (another model
    of a seated family), and after that to the seated models again, in panel order: the same model
    sampled once more. A model may therefore appear more than once (see `panel_seats`).

    Raises:
        ValueError: `size` is outside 2-7.
        TooFewFamiliesError: the list has fewer than `size` distinct families (and `allow_same_family`
            is off), or it is empty.

    >>> pick_panelists(["openai:gpt-5", "openai:o3", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"])
    ['openai:gpt-5', 'anthropic:claude-sonnet-4-5', 'google:gemini-2.5-pro']
    >>> pick_panelists(["local:smollm2"], allow_same_family=True)
    ['local:smollm2', 'local:smollm2', 'local:smollm2']
    """
    if not MIN_PANEL_SIZE <= size <= MAX_PANEL_SIZE:
        raise ValueError(f"panel size must be between {MIN_PANEL_SIZE} and {MAX_PANEL_SIZE}, not {size}")
    candidates = list(dict.fromkeys(m.strip() for m in models if m and m.strip()))
    picked: list[str] = []
    families: set[str] = set()
    providers: set[str] = set()
    for distinct_providers in (True, False):
        for model in candidates:
            provider = split_model_id(model)[0] or DEFAULT_PROVIDER
            if len(picked) == size or model in picked or model_family(model) in families:
                continue
            if distinct_providers and provider in providers:
                continue
            picked.append(model)
            families.add(model_family(model))
            providers.add(provider)
    if allow_same_family and candidates:
        picked += [m for m in candidates if m not in picked][: size - len(picked)]
        picked.sort(key=candidates.index)
        seated = list(picked)
        while len(picked) < size:
            picked.append(seated[(len(picked) - len(seated)) % len(seated)])
        return picked
    if len(picked) < size:
        raise TooFewFamiliesError(candidates, size)
    return sorted(picked, key=candidates.index)


class Seat(TypedDict):
    """One seat of a panel: the model asked, the unique name it goes by, and its sampling temperature."""

    model: str  # the model called and priced
    label: str  # unique in the panel: `model` for its first seat, `model #2`, `model #3` for resamples
    temperature: float | None  # the caller's, except for a model seated more than once


def sample_temperatures(count: int, base: float | None, ceiling: float | None = None) -> list[float]:
    """`count` distinct temperatures around `base`: base, base + step, base - step, base + 2 step, ...

    Values outside 0..max(1, base) (and above the provider's `ceiling`, which would flatten them) are
    skipped, so a base at either end spreads one way.

    >>> sample_temperatures(3, None)
    [0.7, 0.85, 0.55]
    >>> sample_temperatures(3, 1.0, ceiling=1.0)
    [1.0, 0.85, 0.7]
    """
    top = max(1.0, base or 0.0)
    if ceiling is not None:
        top = min(top, ceiling)
    start = min(SAMPLE_TEMPERATURE if base is None else base, top)
    steps = [start] + [start + sign * k * SAMPLE_TEMPERATURE_STEP for k in range(1, MAX_PANEL_SIZE) for sign in (1, -1)]
    spread = [round(float(t), 2) for t in steps if 0.0 <= round(t, 4) <= top]
    return [spread[i % len(spread)] for i in range(count)]


def panel_seats(
    chosen: Sequence[str], temperature: float | None = None, ceilings: dict[str, float | None] | None = None
) -> list[Seat]:
    """Seat the chosen models: unique labels, and distinct temperatures for a model seated more than once.

    >>> [s["label"] for s in panel_seats(["local:smollm2"] * 3)]
    ['local:smollm2', 'local:smollm2 #2', 'local:smollm2 #3']
    """
    counts = {m: chosen.count(m) for m in chosen}
    temperatures = {
        m: sample_temperatures(n, temperature, (ceilings or {}).get(m)) for m, n in counts.items() if n > 1
    }
    seen: dict[str, int] = {}
    seats: list[Seat] = []
    for model in chosen:
        seen[model] = sample = seen.get(model, 0) + 1
        seats.append(Seat(
            model=model,
            label=model if sample == 1 else f"{model} #{sample}",
            temperature=temperatures[model][sample - 1] if model in temperatures else temperature,
        ))
    return seats


def mixes_families(models: Sequence[str]) -> bool:
    """True when two seats share a family: resampled, or filled with another model of a seated family."""
    return len({model_family(m) for m in models}) < len(models)


async def choose_panelists(state: dict[str, Any], runtime: Runtime[PanelContext]) -> dict[str, Any]:
    """Choose the panel: N models of distinct families from the fallback list (the debate preset's by default).

    `allow_same_family` unset follows the preset when the list is the preset's, and is off otherwise.
    """
    ctx = panel_context(runtime)
    settings = ctx.factory.settings
    size = state.get("panel_size") or DEFAULT_PANEL_SIZE
    needed = state.get("min_successes", DEFAULT_MIN_SUCCESSES)
    if needed > size:
        raise ValueError(f"min_successes ({needed}) cannot exceed the panel size ({size})")
    models, allow = state.get("models"), state.get("allow_same_family")
    if not models:
        models = settings.debate_models
        allow = settings.debate_allow_same_family if allow is None else allow
    chosen = pick_panelists(models, size, allow_same_family=bool(allow))
    ceilings = {m: ctx.factory.provider(m).max_temperature for m in chosen}
    seats = panel_seats(chosen, state.get("temperature"), ceilings)
    emit({"event": "panelists", "models": [s["label"] for s in seats]})
    return {"chosen": seats, "same_family": mixes_families(chosen)}


# --- the panelists --------------------------------------------------------------------------


class PanelistTask(TypedDict):
    """What one panelist branch receives through `Send`."""

    index: int
    model: str  # called and priced
    label: NotRequired[str]  # what the panelist goes by in results; `model` when absent
    messages: list[dict[str, Any]]
    system_prompt: NotRequired[str | None]
    temperature: NotRequired[float | None]
    max_tokens: NotRequired[int | None]
    sent_ms: float  # when the fan-out happened, so latency includes retries


def public_panelist(result: dict[str, Any]) -> dict[str, Any]:
    """A panelist's result in the contract's shape: model (its seat's label), tokens, cost, latencyMs, success, error?

    The label is the model id, with " #2", " #3" on a model's resamples, so every seat stays distinct.
    """
    out = {key: result[key] for key in ("model", "tokens", "cost", "latencyMs", "success")}
    if not result["success"]:
        out["error"] = result["error"]
    return out


async def panelist(task: PanelistTask, runtime: Runtime[PanelContext]) -> dict[str, Any]:
    """Ask one panelist and record its answer, tokens, cost and latency.

    Failures propagate, so the node's retry policy can act; the graph's error handler for this node
    (`panelist_failed`) then records the failure instead of letting it sink the parallel step.
    """
    ctx = panel_context(runtime)
    model = task["model"]
    label = task.get("label") or model
    chat = ctx.chat(
        model,
        temperature=task.get("temperature"),
        max_tokens=task.get("max_tokens"),
        timeout=ctx.panelist_timeout,
        label=f"panelist:{label}",
    )
    prompt = await off_loop(len(task["messages"]), _PANEL_PROMPTS.prompt, task["messages"], task.get("system_prompt"))
    reply = await chat.ainvoke(prompt)
    answer = content_text(reply.content).strip()
    if not answer:
        raise EmptyAnswerError(f"{label} answered with no text")
    input_tokens, output_tokens = usage_from_message(reply)
    result = {
        "index": task["index"],
        "model": label,
        "model_id": model,
        "success": True,
        "answer": answer,
        "tokens": input_tokens + output_tokens,
        "cost": ctx.factory.price(model).cost(input_tokens, output_tokens),
        "latencyMs": round(monotonic_ms() - task["sent_ms"]),
    }
    emit({"event": "panelist", "index": task["index"], **public_panelist(result), "answer": answer})
    return {"panelist_results": [result]}


def panelist_failed(*, then: str):
    """Build the error handler of the panelist node: it records the failure and carries on to `then`.

    LangGraph drops a whole parallel step when one branch raises; routing the exhausted failure here
    keeps the siblings' answers. The explicit `goto` matters: a handler's writes do not fire the failed
    node's outgoing edge, so without it a panel where every branch failed would just stop.
    """

    async def record_failure(task: PanelistTask, error: NodeError) -> Command:
        """Record why a panelist failed and go on with the others' answers."""
        result = {
            "index": task["index"],
            "model": task.get("label") or task["model"],
            "model_id": task["model"],
            "success": False,
            "answer": None,
            "tokens": 0,
            "cost": 0.0,
            "latencyMs": round(monotonic_ms() - task["sent_ms"]),
            "error": classify_failure(error.error),
            "detail": describe_failure(error.error),
        }
        emit({"event": "panelist", "index": task["index"], "detail": result["detail"],
                             **public_panelist(result)})
        return Command(goto=then, update={"panelist_results": [result]})

    return record_failure


async def tally(state: dict[str, Any]) -> dict[str, Any]:
    """Put the panelists' results in panel order and insist on enough answers."""
    results = sorted(state.get("panelist_results") or [], key=lambda r: r["index"])
    needed = state.get("min_successes", DEFAULT_MIN_SUCCESSES)
    answered = [r for r in results if r["success"]]
    if len(answered) < max(needed, 1):
        raise TooFewPanelistsError(results, needed)
    return {
        "panelists": [public_panelist(r) for r in results],
        "answers": [{"model": r["model"], "model_id": r["model_id"], "answer": r["answer"]} for r in answered],
    }


# --- answering ------------------------------------------------------------------------------


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


async def arbitrate(state: dict[str, Any], runtime: Runtime[PanelContext]) -> dict[str, Any]:
    """Have the first arbitrator candidate that answers synthesize the best answer from the anonymised panel."""
    ctx = panel_context(runtime)
    candidates = state.get("arbitrators") or [ctx.factory.settings.arbitrator_model]
    # One prompt serves every candidate, so it fits the smallest window among them.
    budgets = [ctx.factory.prompt_budget(m, state.get("max_tokens")) for m in candidates]
    prompt = arbitration_messages(
        state["messages"],
        state["answers"],
        system_prompt=state.get("system_prompt"),
        arbitrator_prompt=state.get("arbitrator_prompt"),
        prompt_budget=min((b for b in budgets if b is not None), default=None),
    )
    answer, model, failures = await stream_first_answer(
        ctx, candidates, prompt, role="arbitrator", temperature=state.get("temperature"),
        max_tokens=state.get("max_tokens"), timeout=ctx.arbitrator_timeout,
    )
    return {"answer": answer, "arbitrator": model, "attempts": failures}


async def assemble_panel(state: dict[str, Any]) -> dict[str, Any]:
    """Label each answer with its model and join them in panel order, streaming one block at a time."""
    writer = event_writer()
    blocks = []
    for i, item in enumerate(state["answers"]):
        block = PANEL_BLOCK.format(model=item["model"], answer=item["answer"])
        writer(chunk_event(PANEL_SPEAKER, (PANEL_SEPARATOR if i else "") + block))
        blocks.append(block)
    return {"answer": PANEL_SEPARATOR.join(blocks), "arbitrator": None}


async def answer_with_fallback(state: dict[str, Any], runtime: Runtime[PanelContext]) -> dict[str, Any]:
    """Answer with the first model of the fallback list that succeeds (no panel)."""
    ctx = panel_context(runtime)
    models = state.get("models") or [ctx.model_id()]
    prompt = await off_loop(len(state["messages"]), to_messages, state["messages"], state.get("system_prompt"))
    answer, model, failures = await stream_first_answer(
        ctx, models, prompt, role="model",
        temperature=state.get("temperature"), max_tokens=state.get("max_tokens"), timeout=ctx.panelist_timeout,
    )
    return {"answer": answer, "model_used": model, "attempts": failures}
