"""The panel's own steps: choose panelists of distinct families, ask them in parallel, then arbitrate or assemble.

The nodes read the panel's state keys (`messages`, `models`, `panel_size`, `arbitrators`, ...) and the
per-run `PanelContext`; `graphs/panel/` wires them (on the capability nodes `fan_out` and `arbitrate`).
With `allow_same_family`, seats that distinct families cannot fill go to the listed models again
(self-consistency sampling), each seat with a unique label and each resample at its own temperature.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime

from parley.core.limits import (
    ADAPTIVE_AGREEMENT,
    ADAPTIVE_FIRST_SEATS,
    DEFAULT_MIN_SUCCESSES,
    DEFAULT_PANEL_SIZE,
    MAX_PANEL_SIZE,
    MIN_PANEL_SIZE,
)
from parley.llm.client import off_loop
from parley.llm.failures import classify_failure, describe_failure
from parley.graphs.panel import prompts
from parley.llm.families import independent_first, model_family
from parley.llm.formats import AnswerFormat
from parley.llm.providers import DEFAULT_PROVIDER, split_model_id
from parley.llm.tools import ToolSet
from parley.llm.usage import ReportedUsage, monotonic_ms, usage_from_message, usage_record
from parley.nodes.analysis import agreement, analyse
from parley.nodes.arbitrate import (  # noqa: F401 (re-exported: the panel's callers and tests read them here)
    ANSWER_LETTERS,
    MIN_ANSWER_TOKENS,
    AllModelsFailedError,
    AnswerError,
    EmptyAnswerError,
    InvalidStructuredAnswerError,
    arbitrate,
    arbitration_messages,
    caller_instructions,
    content_text,
    fair_shares,
    redact_names,
    stream_first_answer,
    to_messages,
    without_tools,
)
from parley.nodes.context import RunContext
from parley.nodes.events import emit, event_writer, speaking
from parley.nodes.fan_out import FanOut
from parley.nodes.speak import chunk_event, say

# The raw panel's wire format (the panel contract): each answer under its model's name, separated by rules.
PANEL_BLOCK = "**{model}**\n\n{answer}"
PANEL_SEPARATOR = "\n\n---\n\n"
PANEL_SPEAKER = {"id": "panel", "name": "panel"}  # who "speaks" the assembled raw panel's blocks
PANELIST_PREFIX = "panelist:"  # a panelist's speaker id: the prefix and its index

# Resampled seats: a model's samples spread around the caller's temperature (this one when the caller
# set none) in steps of this size, so a model asked twice answers twice, not once in duplicate.
SAMPLE_TEMPERATURE = 0.7
SAMPLE_TEMPERATURE_STEP = 0.15


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


# A panel run cannot produce an answer: the base of the panel's errors, and of the arbitrator's.
PanelError = AnswerError


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


# --- message helpers ------------------------------------------------------------------------


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
        ValueError: `size` is outside 2-8.
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
    grants: NotRequired[list[str]]  # the tools it may call while it answers (`PanelInput.panelist_tools`)
    quorum: NotRequired[dict[str, Any]]  # {id, k, grace}: its fan-out's quorum (`Quorums`)


def public_panelist(result: dict[str, Any], *, proposal: bool = False) -> dict[str, Any]:
    """A panelist's result in the contract's shape: model (its seat's label), tokens (`cachedTokens` of them read from
    the prompt cache, `reasoningTokens` spent reasoning), cost, latencyMs, success, error?

    The label is the model id, with " #2", " #3" on a model's resamples, so every seat stays distinct. With
    `proposal` (a debate offered tools, whose answer may be a tool call rather than text) an answer is added as
    `proposal`: what the panelist proposed.

    A panelist that called tools (its router's grant) lists them in `toolCalls`, each `{id, name, arguments, result,
    isError}` as a debater's message does.
    """
    out = {key: result[key] for key in ("model", "tokens", "cost", "latencyMs", "success")}
    out |= {key: result.get(key, 0) for key in ("cachedTokens", "reasoningTokens")}
    if not result["success"]:
        out["error"] = result["error"]
    elif proposal:
        out["proposal"] = result["answer"]
    if result.get("toolCalls"):
        out["toolCalls"] = result["toolCalls"]
    return out


def panelist_speaker(task: PanelistTask) -> dict[str, str]:
    """Who a panelist is in the events of the tools it calls: `panelist:<index>`, named by its seat's label."""
    return {"id": f"{PANELIST_PREFIX}{task['index']}", "name": task.get("label") or task["model"]}


def is_panelist(speaker: Any) -> bool:
    """Whether `speaker` (an event's) is a panelist rather than the one who answers."""
    return isinstance(speaker, dict) and str(speaker.get("id", "")).startswith(PANELIST_PREFIX)


def panelist_prompt(state: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The conversation and system prompt every panelist is sent: tool calls and results as text (panelists are
    offered no tools and answer in prose), the tools the final answer may call and the JSON it must be, told."""
    tools, answer_format = ToolSet.load(state.get("tools")), AnswerFormat.load(state.get("response_format"))
    notes = [state.get("system_prompt")]
    if tools is not None and tools.may_call:
        notes.append(prompts.PANELIST_TOOLS.format(tools=tools.describe()))
    if answer_format is not None:
        notes.append(prompts.PANELIST_FORMAT.format(schema=answer_format.schema_text()))
    return without_tools(state["messages"]), "\n\n".join(n for n in notes if n) or None


async def panelist(task: PanelistTask, runtime: Runtime[PanelContext]) -> dict[str, Any]:
    """Ask one panelist and record its answer, tokens, cost and latency.

    A panelist granted tools (`grants`, its router's) answers through the speak node's tool loop (`say`): it may call
    them while it answers, each call and result sent as a `tool_call` / `tool_result` event of its own speaker, its
    text kept for the decision rather than streamed; its tokens are those of every call it made.

    Failures propagate, so the node's retry policy can act; the graph's error handler for this node
    (`panelist_failed`) then records the failure instead of letting it sink the parallel step.
    """
    ctx = panel_context(runtime)
    model = task["model"]
    label = task.get("label") or model
    if quorum := task.get("quorum"):  # the others may stop waiting for it (`QUORUMS`)
        answer, reported, tool_calls = await QUORUMS.race(quorum, ask_panelist(task, ctx))
    else:
        answer, reported, tool_calls = await ask_panelist(task, ctx)
    priced = usage_record(model, reported, ctx.factory.price(model))
    result = {
        "index": task["index"],
        "model": label,
        "model_id": model,
        "success": True,
        "answer": answer,
        "tokens": priced.total_tokens,
        "cachedTokens": priced.cached_tokens,
        "reasoningTokens": priced.reasoning_tokens,
        "cost": priced.cost,
        "latencyMs": round(monotonic_ms() - task["sent_ms"]),
        **({"toolCalls": tool_calls} if tool_calls else {}),
    }
    emit({"event": "panelist", "index": task["index"], **public_panelist(result), "answer": answer})
    return {"panelist_results": [result]}


async def ask_panelist(task: PanelistTask, ctx: PanelContext) -> tuple[str, ReportedUsage, list[dict[str, Any]]]:
    """One panelist's answer, the usage its calls reported, and the tools it called (`panelist`)."""
    model = task["model"]
    label = task.get("label") or model
    knobs: dict[str, Any] = {"temperature": task.get("temperature"), "max_tokens": task.get("max_tokens"),
                             "timeout": ctx.panelist_timeout, "label": f"panelist:{label}"}
    box = await ctx.tools.toolbox(task["grants"]) if task.get("grants") and ctx.tools else None
    prompt = await off_loop(len(task["messages"]), _PANEL_PROMPTS.prompt, task["messages"], task.get("system_prompt"))
    tool_calls: list[dict[str, Any]] = []
    if box is None:
        with speaking(panelist_speaker(task)):  # named should the call wait for its endpoint
            reply = await ctx.chat(model, **knobs).ainvoke(prompt)
        answer = content_text(reply.content).strip()
        reported = usage_from_message(reply)
    else:  # the speak node's tool loop, its text kept for the arbitrator, its calls and results sent as events
        first = len(ctx.ledger.records)
        turn = await say(ctx.chat(model, **knobs, tools=box.toolset()), prompt,
                         speaker=panelist_speaker(task), quiet=True, resend=True,
                         model=model, label=knobs["label"], toolbox=box,
                         spent=ctx.chat(model, **knobs, tools=box.toolset(final=True)))
        answer = turn.text.strip()
        calls = [r for r in ctx.ledger.records[first:] if r.label == knobs["label"]]
        reported = sum((ReportedUsage(r.input_tokens, r.output_tokens, r.cached_tokens, r.reasoning_tokens)
                        for r in calls), ReportedUsage())
        tool_calls = [run.dump() for run in turn.tool_runs]
    if not answer:
        raise EmptyAnswerError(f"{label} answered with no text")
    return answer, reported, tool_calls


# --- quorum grace ---------------------------------------------------------------------------


class LateAnswerError(PanelError):
    """A panelist still answering when the quorum's grace ran out: the panel decided without it (error `late`)."""


class Quorums:
    """The quorums of the panels being asked in this process, by the token their fan-out's tasks share.

    A panel asked with a quorum (`PanelInput.quorum`, `{k, grace}`) gives each of its seats' tasks the same token; the
    k-th answer starts the grace, and when it runs out every seat still answering stops (its call cancelled) and is
    recorded `late`, so the panel decides with what it has. Branches of one fan-out run on one event loop of one
    process, so a plain dict serves; a panel's entry goes once none of its seats is still answering.
    """

    def __init__(self) -> None:
        self._open: dict[str, dict[str, Any]] = {}

    def _entry(self, quorum: dict[str, Any]) -> dict[str, Any]:
        return self._open.setdefault(quorum["id"], {"answered": 0, "closed": asyncio.Event(), "asking": 0,
                                                    "timer": None})

    async def race(self, quorum: dict[str, Any], answer: Any) -> Any:
        """The awaitable `answer`'s result, unless the quorum's grace runs out first (`LateAnswerError`)."""
        entry = self._entry(quorum)
        entry["asking"] += 1
        call, closed = asyncio.ensure_future(answer), asyncio.ensure_future(entry["closed"].wait())
        try:
            await asyncio.wait({call, closed}, return_when=asyncio.FIRST_COMPLETED)
            if call.done():
                result = call.result()  # raises the call's own failure
                entry["answered"] += 1
                if entry["answered"] == quorum["k"]:
                    entry["timer"] = asyncio.get_running_loop().call_later(quorum["grace"], entry["closed"].set)
                return result
            call.cancel()
            raise LateAnswerError(f"still answering {quorum['grace']:g} s after {quorum['k']} panelists had answered")
        finally:
            closed.cancel()
            if not call.done():
                call.cancel()
            entry["asking"] -= 1
            if entry["asking"] == 0:  # every seat of the fan-out is done (a retry after this starts a quorum afresh)
                if entry["timer"] is not None:
                    entry["timer"].cancel()
                self._open.pop(quorum["id"], None)


QUORUMS = Quorums()


def candidate_failures(attempts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Candidates that failed (an arbitrator's `attempts`) as entries of `failures`: {model, role, error, detail}."""
    return [{"model": a["model"], "role": a.get("role", "arbitrator"), "error": a["error"],
             "detail": a.get("detail", "")} for a in attempts]


def panelist_failure(task: PanelistTask, exc: BaseException) -> dict[str, Any]:
    """The result of a panelist whose call failed (its retries spent), announced like an answer."""
    result = {
        "index": task["index"],
        "model": task.get("label") or task["model"],
        "model_id": task["model"],
        "success": False,
        "answer": None,
        "tokens": 0,
        "cost": 0.0,
        "latencyMs": round(monotonic_ms() - task["sent_ms"]),
        "error": "late" if isinstance(exc, LateAnswerError) else classify_failure(exc),
        "detail": str(exc) if isinstance(exc, LateAnswerError) else describe_failure(exc),
    }
    emit({"event": "panelist", "index": task["index"], "detail": result["detail"], **public_panelist(result)})
    return result


def any_failure(exc: BaseException) -> bool:
    """Every failure of a panelist is recorded: an empty answer as much as an outage."""
    return True


# The panel's fan-out: one `panelist` branch per seat, each failure recorded, at least `min_successes` answers.
PANELISTS = FanOut(node="panelist", results_key="panelist_results", tolerate=any_failure, failure=panelist_failure)


def panelist_failed(*, then: str):
    """Build the error handler of the panelist node: it records the failure and carries on to `then`
    (see `FanOut.failed`)."""
    return PANELISTS.failed(then=then)


def first_stage(state: dict[str, Any]) -> bool:
    """Whether the panel asks its first seats only, for now: adaptive depth, before it has decided to go on."""
    return (state.get("depth") == "adaptive" and "adaptive" not in state
            and len(state.get("chosen") or []) > ADAPTIVE_FIRST_SEATS)


def asks_the_rest(state: dict[str, Any]) -> bool:
    """Whether adaptive depth's first look sends the rest of the panel (to escalate, or as its shadow) and some
    seat has not answered yet."""
    report = state.get("adaptive") or {}
    going_on = report.get("path") == "escalated" or "shadow" in report
    return going_on and len(state.get("panelist_results") or []) < len(state.get("chosen") or [])


def question_of(state: dict[str, Any]) -> str:
    """The conversation's last user message, as text (what an analysis looks for blind spots in)."""
    return next((content_text(m.get("content")) for m in reversed(state.get("messages") or [])
                 if m.get("role") == "user"), "")


def first_seats_agree(state: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """Adaptive depth's first look: the agreement of the first seats' answers (`nodes.analysis.agreement`), and the
    path it takes. `agreed` stops there (unless `shadow`, which asks the rest anyway, to find out whether stopping
    would have answered the same); `escalated` asks the rest of the panel. A seat that failed escalates too."""
    threshold = state.get("agreement_threshold")
    threshold = ADAPTIVE_AGREEMENT if threshold is None else threshold
    answered = [r for r in results if r["success"]]
    score = agreement(answered[0]["answer"], answered[1]["answer"]) if len(answered) >= 2 else 0.0
    agreed = len(answered) == len(results) and score >= threshold
    report = {"path": "agreed" if agreed else "escalated", "agreement": score, "threshold": threshold,
              "firstSeats": [r["model"] for r in results], "seats": len(state["chosen"])}
    if agreed and state.get("shadow"):
        report["shadow"] = {"firstAnswer": answered[0]["answer"]}  # compared with the full panel's (`settle_shadow`)
    emit({"event": "depth", **{k: v for k, v in report.items() if k != "shadow"}, "shadow": bool(state.get("shadow"))})
    return report


async def tally(state: dict[str, Any]) -> dict[str, Any]:
    """Put the panelists' results in panel order and insist on enough answers; map where the answers agree and
    contradict (`nodes.analysis`).

    Under adaptive depth the first tally reads the first seats only and decides whether the rest are asked
    (`first_seats_agree`); when they are, the panel is tallied again with every answer.
    """
    if first_stage(state):
        results = sorted(state.get("panelist_results") or [], key=lambda r: r["index"])
        report = first_seats_agree(state, results)
        if report["path"] == "escalated" or "shadow" in report:
            return {"adaptive": report}  # the rest of the panel answers first (`after_tally`)
        update = {"adaptive": report}
    else:
        update = {}
    results = PANELISTS.gather(
        state, needed=state.get("min_successes", DEFAULT_MIN_SUCCESSES), too_few=TooFewPanelistsError
    )
    answered = [r for r in results if r["success"]]
    proposals = bool(state.get("tools")) and state.get("mode") != "panel"  # a raw panel's content holds them all
    answers = [{"model": r["model"], "model_id": r["model_id"], "answer": r["answer"]} for r in answered]
    analysis = await asyncio.to_thread(analyse, answers, question_of(state))
    emit({"event": "analysis", **analysis})
    return {
        **update,
        "panelists": [public_panelist(r, proposal=proposals) for r in results],
        "answers": answers,
        "analysis": analysis,
        "failures": [{"model": r["model"], "role": "panelist", "error": r["error"], "detail": r.get("detail", "")}
                     for r in results if not r["success"]],
    }



# --- answering ------------------------------------------------------------------------------


def _arbitrators(state: dict[str, Any], ctx: RunContext) -> list[str]:
    """The arbitrator's (and a judge's) candidates: the request's (else the deployment's), those of a family not
    on the panel first (`independent_first`)."""
    chain = state.get("arbitrators") or [ctx.factory.settings.arbitrator_model]
    return independent_first(chain, [seat["model"] for seat in state.get("chosen") or []])[0]


# The panel's arbitrator: the request's candidates (else the deployment's), each call within its time limit.
arbitrate_panel = arbitrate(candidates=_arbitrators, timeout=lambda ctx: ctx.arbitrator_timeout, context=PanelContext)


def labelled_answers(answers: Sequence[dict[str, Any]]) -> str:
    """Label each answer with its model and join them in panel order, streaming one block at a time."""
    writer = event_writer()
    blocks = []
    for i, item in enumerate(answers):
        block = PANEL_BLOCK.format(model=item["model"], answer=item["answer"])
        writer(chunk_event(PANEL_SPEAKER, (PANEL_SEPARATOR if i else "") + block))
        blocks.append(block)
    return PANEL_SEPARATOR.join(blocks)


async def assemble_panel(state: dict[str, Any]) -> dict[str, Any]:
    """The raw panel's answer: every answer labelled with its model, in panel order. A debate whose rule is
    `analysis` answers the same way, its decision saying that no one chose (the map, `analysis`, is the point)."""
    update: dict[str, Any] = {"answer": labelled_answers(state["answers"]), "arbitrator": None}
    if state.get("mode", "debate") == "debate":
        update["decision"] = {"rule": "analysis", "decidedBy": "none", "model": "panel"}
        emit({"event": "decision", **update["decision"]})
    return settle_shadow(state, update)


def settle_shadow(state: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A decided debate's update, with adaptive depth's shadow settled: whether the first seats' answer (where the
    cheap path would have stopped) agrees with the answer the whole panel gave (`nodes.analysis.agreement` at the
    same threshold)."""
    report = state.get("adaptive") or {}
    if "shadow" not in report or "answer" not in update:
        return update
    first = report["shadow"].get("firstAnswer", "")
    score = agreement(first, update["answer"])
    shadow = {"agreement": score, "sameAnswer": score >= report["threshold"]}
    return {**update, "adaptive": {**{k: v for k, v in report.items() if k != "shadow"}, "shadow": shadow}}


async def answer_with_fallback(state: dict[str, Any], runtime: Runtime[PanelContext]) -> dict[str, Any]:
    """Answer with the first model of the fallback list that succeeds (no panel), offered the request's tools and
    held to its JSON format; a model offered no tools reads the conversation's tool calls as text."""
    ctx = panel_context(runtime)
    models = state.get("models") or [ctx.model_id()]
    tools, answer_format = ToolSet.load(state.get("tools")), AnswerFormat.load(state.get("response_format"))
    messages = state["messages"] if tools is not None else without_tools(state["messages"])
    prompt = await off_loop(len(messages), to_messages, messages, state.get("system_prompt"))
    turn, model, failures = await stream_first_answer(
        ctx, models, prompt, role="model",
        temperature=state.get("temperature"), max_tokens=state.get("max_tokens"), timeout=ctx.panelist_timeout,
        tools=tools, answer_format=answer_format,
    )
    return {"answer": turn.text, "model_used": model, "attempts": failures, "tool_calls": list(turn.tool_calls)}
