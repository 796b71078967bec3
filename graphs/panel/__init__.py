"""Panel mode as a LangGraph graph: one request to models of distinct families at once, then a decision
(`mode="debate"`: the arbitrator's synthesis, or another `rule`, `graphs.panel.rules`), the raw labelled answers
(`mode="panel"`), or one model with fallbacks (`mode="single"`). With `allow_same_family`, a list short of families
fills the panel by sampling its models again (N samples of one model: Self-MoA).

    choose_panelists -> panelist x N (Send) -> tally -> arbitrate | assemble_panel
                                                      | vote | review x N -> count_ranks | judge x 2 -> pick_best
    answer (mode "single")
"""

from __future__ import annotations

import operator
import uuid
from typing import Annotated, Any, Literal, Required, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import RetryPolicy, Send

from parley.core.limits import ADAPTIVE_FIRST_SEATS, DEFAULT_MIN_SUCCESSES, DEFAULT_PANEL_SIZE
from parley.graphs.panel.rules import (
    DEFAULT_RULE,
    JUDGES,
    REVIEWS,
    after_decision,
    agree,
    arbitrate_by_rule,
    count_ranks,
    decide,
    judge_answer,
    panelist_instructions,
    pick_best,
    review_answers,
    vote,
)
from parley.graphs.panel.steps import (
    PANELISTS,
    AllModelsFailedError,
    PanelContext,
    PanelError,
    PanelistTask,
    Seat,
    TooFewFamiliesError,
    TooFewPanelistsError,
    answer_with_fallback,
    asks_the_rest,
    assemble_panel,
    choose_panelists,
    first_stage,
    panel_context,
    panelist,
    panelist_prompt,
    tally,
)
from parley.llm.failures import MODEL_RETRY
from parley.llm.formats import AnswerFormat
from parley.llm.tools import ToolSet
from parley.llm.usage import monotonic_ms
from parley.nodes.context import RunContext
from parley.nodes.judge import JUDGE_RETRY
from parley.nodes.rank import REVIEW_RETRY

__all__ = [
    "AllModelsFailedError", "PanelContext", "PanelError", "PanelInput", "PanelOutput", "PanelState",
    "TooFewFamiliesError", "TooFewPanelistsError", "build_panel_graph", "panel_node", "graph", "panel_input",
    "question_input", "unanswerable",
]

Mode = Literal["debate", "panel", "single"]
Rule = Literal["synthesis", "vote", "rank", "best-of-n", "analysis"]


class PanelInput(TypedDict, total=False):
    """What a caller passes in. Only `messages` is required."""

    messages: Required[list[dict[str, Any]]]  # OpenAI-style {role, content}
    models: list[str]  # the fallback list (`provider:model`); the debate preset's when empty
    panel_size: int  # 2-8, default 3
    # Fill seats the list's families cannot by sampling its models again (unique labels, varied temperatures).
    # None: the preset's setting when `models` is empty, else off (distinct families or TooFewFamiliesError).
    allow_same_family: bool | None
    arbitrators: list[str]  # candidates in order; the deployment's arbitrator when empty
    mode: Mode  # default "debate"
    system_prompt: str | None  # sent to every panelist, and shown to the arbitrator as the caller's instructions
    arbitrator_prompt: str | None  # replaces the arbitrator's built-in instructions
    temperature: float | None
    max_tokens: int | None
    min_successes: int  # answers needed to go on, default 2
    rule: Rule  # how a debate decides (`graphs.panel.rules`), default "synthesis"
    answer_rule: str | None  # how `vote` reads an answer: number, choice, exact (the default) or regex:<pattern>
    seed: int | None  # seeds the `rank` reviewers' orders; drawn from the conversation when None
    # The tools the answer may call (`ToolSet.dump()`): the arbitrator's, or the single model's; panelists read
    # them described and answer in prose. A raw panel's answer never calls one.
    tools: dict[str, Any] | None
    # OpenAI's `response_format`: the JSON the arbitrator's or the single model's answer must be (not a raw panel's).
    response_format: dict[str, Any] | None
    # The tools (grants, `nodes.tools`) every panelist may call while it answers, run by Parley through the run's
    # `ToolAccess` (a stored router's `router:<id>` grant); none when empty.
    panelist_tools: list[str]
    # What the judge weighs (the arbitrator's and the judges' instructions; never shown to the panelists).
    criteria: str | None
    # "full" (every seat at once, the default) or "adaptive": the first two seats (distinct families) first, the rest
    # of the panel and the rule only when their answers disagree (`nodes.analysis.agreement` below
    # `agreement_threshold`, default `core.limits.ADAPTIVE_AGREEMENT`).
    depth: Literal["full", "adaptive"]
    agreement_threshold: float | None
    # Adaptive depth asks the rest of the panel anyway, and reports whether stopping would have answered the same.
    shadow: bool
    # Quorum grace, {k, grace}: once k panelists have answered, the others have `grace` seconds more; a seat still
    # answering then is recorded `late` (error "late") and the panel decides without it. None: every seat is awaited.
    quorum: dict[str, Any] | None


class PanelOutput(TypedDict, total=False):
    """What a run returns."""

    answer: str  # the arbitrated answer, the assembled panel, or the single model's answer (empty beside tool calls)
    tool_calls: list[dict[str, Any]]  # the answer's tool calls, OpenAI's shape (debate and single mode, with tools)
    panelists: list[dict[str, Any]]  # {model, tokens, cost, latencyMs, success, error?} in panel order;
    # `model` is the seat's label: the model id, with " #2", " #3" on a model's resamples
    same_family: bool  # two seats share a family (allow_same_family filled the panel)
    arbitrator: str | None  # the arbitrator that answered (debate mode)
    model_used: str | None  # the model that answered (single mode)
    attempts: list[dict[str, Any]]  # candidates that failed first: {model, role, error, detail, partial}
    decision: dict[str, Any]  # how a debate decided: {rule, decidedBy, model, ...} (`graphs.panel.rules`)
    # Where the answers agree and contradict, and their agreement (`nodes.analysis.analyse`): debates and raw panels.
    analysis: dict[str, Any]
    # Adaptive depth's path: {path: agreed | escalated, agreement, threshold, firstSeats, seats, shadow?}.
    adaptive: dict[str, Any]
    # Who failed on the way, answer given anyway: [{model, role, error, detail}] (panelists, arbitrators).
    failures: list[dict[str, Any]]
    # Set when the answer is less than asked: "arbitrator_failed" (the labelled answers came back instead).
    degraded: str | None


class PanelState(PanelInput, PanelOutput, total=False):
    """The whole state: inputs, outputs and the working keys between them."""

    chosen: list[Seat]
    panelist_results: Annotated[list[dict[str, Any]], operator.add]  # one per branch, in finishing order
    answers: list[dict[str, str]]  # successful answers in panel order: {model (the seat's label), model_id, answer}
    reviews: Annotated[list[dict[str, Any]], operator.add]  # rule "rank": one ranking per reviewer
    verdicts: Annotated[list[dict[str, Any]], operator.add]  # rule "best-of-n": the judge's two readings


# Rate limits and server errors get one more try; a timeout has already spent the panelist's budget.
PANELIST_RETRY = MODEL_RETRY


def unanswerable(mode: str, tools: dict[str, Any] | None, response_format: dict[str, Any] | None,
                 rule: str | None = None) -> str | None:
    """Why a request in `mode` cannot be answered as its tools or format ask (None when it can): a raw panel's
    answer (and a debate's under rule `analysis`) is every panelist's text, labelled, so it can neither be a tool
    call nor one JSON document."""
    if mode == "panel":
        what = "A raw panel (panel: true)"
    elif mode == "debate" and rule == "analysis":
        what = "A debate under rule 'analysis'"
    else:
        return None
    if AnswerFormat.load(response_format) is not None:
        return (f"{what} answers with every panelist's text, labelled, which cannot be the JSON response_format "
                "asks for; ask a debate or a single model for JSON")
    toolset = ToolSet.load(tools)
    if toolset is not None and toolset.must_call:
        return (f"{what} answers with its panelists' text and never calls a tool, so it cannot honour tool_choice "
                "'required' or a named function; ask a debate or a single model")
    return None


def route_request(state: PanelState) -> Literal["choose_panelists", "answer"]:
    mode = state.get("mode", "debate")
    if mode not in ("debate", "panel", "single"):
        raise ValueError(f"mode must be 'debate', 'panel' or 'single', not {mode!r}")
    if reason := unanswerable(mode, state.get("tools"), state.get("response_format"), state.get("rule")):
        raise ValueError(reason)
    return "answer" if mode == "single" else "choose_panelists"


def panelist_tasks(state: PanelState) -> list[PanelistTask]:
    """The request, once for every chosen panelist (one conversation, shared: see `panelist_prompt`); under adaptive
    depth, once for each of the first seats (`first_stage`)."""
    tasks = all_panelist_tasks(state)
    return tasks[:ADAPTIVE_FIRST_SEATS] if first_stage(state) else tasks


def rest_of_panel(state: PanelState) -> list[Send]:
    """Adaptive depth's escalation: the seats not asked yet, sent to the panelist branch."""
    asked = {r["index"] for r in state.get("panelist_results") or []}
    return PANELISTS.send(task for task in all_panelist_tasks(state) if task["index"] not in asked)


def all_panelist_tasks(state: PanelState) -> list[PanelistTask]:
    sent = monotonic_ms()
    # One quorum per fan-out (`steps.Quorums`): its seats share a token.
    quorum = {"id": uuid.uuid4().hex, **state["quorum"]} if state.get("quorum") else None
    # The caller's system prompt with what the rule asks of each answer (a vote's format), then what the tools and
    # the answer's format add.
    messages, system_prompt = panelist_prompt({**state, "system_prompt": panelist_instructions(state)})
    return [
        PanelistTask(
            index=i, model=seat["model"], label=seat["label"], messages=messages,
            system_prompt=system_prompt, temperature=seat["temperature"],
            max_tokens=state.get("max_tokens"), sent_ms=sent, grants=list(state.get("panelist_tools") or []),
            **({"quorum": quorum} if quorum else {}),
        )
        for i, seat in enumerate(state["chosen"])
    ]


ask_panelists = PANELISTS.dispatch(panelist_tasks, name="ask_panelists",
                                   doc="Send the request to every chosen panelist at once.")


def after_tally(
    state: PanelState,
) -> list[Send] | Literal["arbitrate", "assemble_panel", "vote", "count_ranks", "agree"]:
    """The rest of the panel when adaptive depth escalates; else the raw panel's assembly, or the debate's decision
    by its rule (`graphs.panel.rules.decide`)."""
    if asks_the_rest(state):
        return rest_of_panel(state)
    return "assemble_panel" if state.get("mode") == "panel" else decide(state)


def build_panel_graph(*, panelist_retry: RetryPolicy | None = PANELIST_RETRY) -> StateGraph:
    """Return the panel as an uncompiled `StateGraph`: one request to models of distinct families, then a decision.

    Its input is a `PanelInput` (build one with `panel_input` or `question_input`), its output a `PanelOutput`
    (`answer`, `panelists`, `arbitrator`, `decision`, ...), its knobs a `PanelContext` (per-call time limits). In
    `mode` "debate" the answers are decided by the arbitrator's synthesis or another `rule`; "panel" returns every
    answer labelled; "single" asks one model with fallbacks.

    Args:
        panelist_retry: retry policy of each panelist branch; the per-call time limit is the run
            context's `panelist_timeout`.

    Returns:
        The `StateGraph` builder, not yet compiled.

    Raises:
        ValueError: (when the graph runs) an unknown `mode`, or a raw panel asked for tools or JSON it cannot give.
        TooFewFamiliesError, TooFewPanelistsError, AllModelsFailedError: (when the graph runs) the panel cannot
            be seated, too few panelists answered, or every arbitrator failed.

    Example:
        ```python
        # docs/python.md, hello_panel.py: the router/debate preset's models, the deployment's arbitrator
        graph = parley.build_panel_graph().compile()
        out = await graph.ainvoke(parley.question_input("Monolith or microservices for a team of five?"))
        out["answer"], out["panelists"], out["arbitrator"]

        # models of your choosing, each panelist call limited to a minute
        out = await graph.ainvoke(
            parley.panel_input([{"role": "user", "content": "Explain the CAP theorem"}],
                               models=["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"],
                               arbitrators=["anthropic:claude-opus-4-5"]),
            context=parley.PanelContext(panelist_timeout=60),
        )
        ```
    """
    builder = StateGraph(PanelState, context_schema=PanelContext, input_schema=PanelInput, output_schema=PanelOutput)
    builder.add_node("choose_panelists", choose_panelists)
    builder.add_node("panelist", panelist, **PANELISTS.node_options(then="tally", retry=panelist_retry))
    builder.add_node("tally", tally)
    builder.add_node("arbitrate", arbitrate_by_rule)
    builder.add_node("assemble_panel", assemble_panel)
    builder.add_node("answer", answer_with_fallback)
    builder.add_node("vote", vote)
    builder.add_node("review", review_answers, **REVIEWS.node_options(then="count_ranks", retry=REVIEW_RETRY))
    builder.add_node("count_ranks", count_ranks)
    builder.add_node("judge", judge_answer, **JUDGES.node_options(then="pick_best", retry=JUDGE_RETRY))
    builder.add_node("pick_best", pick_best)
    builder.add_node("agree", agree)

    builder.add_conditional_edges(START, route_request, ["choose_panelists", "answer"])
    builder.add_conditional_edges("choose_panelists", ask_panelists, ["panelist"])
    builder.add_edge("panelist", "tally")
    builder.add_conditional_edges("tally", after_tally,
                                  ["arbitrate", "assemble_panel", "vote", "review", "count_ranks", "judge", "panelist",
                                   "agree"])
    builder.add_edge("review", "count_ranks")
    builder.add_edge("judge", "pick_best")
    for step in ("vote", "count_ranks", "pick_best", "agree"):
        builder.add_conditional_edges(step, after_decision, ["arbitrate", END])
    builder.add_edge("arbitrate", END)
    builder.add_edge("assemble_panel", END)
    builder.add_edge("answer", END)
    return builder


graph = build_panel_graph().compile(name="panel")


def panel_input(
    messages: list[dict[str, Any]],
    *,
    models: list[str] | None = None,
    arbitrators: list[str] | None = None,
    panel_size: int = DEFAULT_PANEL_SIZE,
    mode: Mode = "debate",
    allow_same_family: bool | None = None,
    system_prompt: str | None = None,
    arbitrator_prompt: str | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    rule: Rule = DEFAULT_RULE,
    answer_rule: str | None = None,
    seed: int | None = None,
    tools: ToolSet | None = None,
    answer_format: AnswerFormat | None = None,
    panelist_tools: list[str] | None = None,
    criteria: str | None = None,
    depth: Literal["full", "adaptive"] = "full",
    shadow: bool = False,
    agreement_threshold: float | None = None,
    quorum: dict[str, Any] | None = None,
) -> PanelInput:
    """Return the panel graph's input (a `PanelInput`) for a conversation: every field set, the defaults filled in.

    What the chat completions route, `parley ask` and the designer run the panel graph on. The answers needed to go
    on are the panel's default, never more than its seats.

    Args:
        messages: the conversation, OpenAI-style `{role, content}`.
        models: the fallback list the panelists are chosen from (`provider:model`); empty: the `router/debate`
            preset's (`PARLEY_DEBATE_MODELS`).
        arbitrators: the arbitrator candidates in order; empty: the deployment's (`PARLEY_ARBITRATOR_MODEL`).
        panel_size: the seats, 2 to 8.
        mode: "debate" (a decision), "panel" (every answer labelled) or "single" (one model with fallbacks).
        allow_same_family: fill seats the families cannot by sampling the models again (see `PanelInput`).
        system_prompt, arbitrator_prompt: the caller's instructions to every panelist; a replacement of the
            arbitrator's own.
        temperature, max_tokens: the panelists' sampling knobs.
        rule, answer_rule, seed: how a debate decides (`graphs.panel.rules`): `synthesis`, `vote` (answers read by
            `answer_rule`), `rank` (reviewers' orders seeded by `seed`) or `best-of-n`.
        tools, answer_format: what the answer may call, and the JSON it must be.
        panelist_tools: the grants the panelists may call (`nodes.tools`).
        criteria: what the arbitrator and judges weigh the answers by.
        depth, shadow, agreement_threshold: "adaptive" asks two seats first and the rest only when they disagree
            (agreement below the threshold, `core.limits.ADAPTIVE_AGREEMENT` by default); `shadow` asks the rest
            anyway and reports whether stopping would have answered the same.
        quorum: `{"k": k, "grace": seconds}`: once k panelists answered, the rest have `grace` seconds more.

    Returns:
        The input dict for `build_panel_graph().compile().ainvoke(...)`.

    Raises:
        ValueError: a raw panel asked for what it cannot answer (`unanswerable`).

    Example:
        >>> import parley
        >>> panel = parley.panel_input([{"role": "user", "content": "Explain CAP"}], panel_size=3, rule="vote")
        >>> panel["mode"], panel["rule"], panel["min_successes"]
        ('debate', 'vote', 2)
    """
    dumped = (tools.dump() if tools else None, answer_format.dump() if answer_format else None)
    if reason := unanswerable(mode, *dumped, rule):
        raise ValueError(reason)
    return {
        "messages": messages,
        "models": list(models or []),
        "allow_same_family": allow_same_family,
        "arbitrators": list(arbitrators or []),
        "panel_size": panel_size,
        "mode": mode,
        "system_prompt": system_prompt,
        "arbitrator_prompt": arbitrator_prompt,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "min_successes": min(DEFAULT_MIN_SUCCESSES, panel_size),
        "rule": rule,
        "answer_rule": answer_rule,
        "seed": seed,
        "tools": dumped[0],
        "response_format": dumped[1],
        "panelist_tools": list(panelist_tools or []),
        "criteria": criteria,
        "depth": depth,
        "shadow": shadow,
        "agreement_threshold": agreement_threshold,
        "quorum": dict(quorum) if quorum else None,
    }


def question_input(
    question: str,
    *,
    models: list[str] | None = None,
    arbitrators: list[str] | None = None,
    panel_size: int = DEFAULT_PANEL_SIZE,
    system_prompt: str | None = None,
    arbitrator_prompt: str | None = None,
    mode: str = "debate",
    allow_same_family: bool | None = None,
    default_arbitrator: str | None = None,
    rule: Rule = DEFAULT_RULE,
    answer_rule: str | None = None,
) -> PanelInput:
    """Return the panel graph's input (a `PanelInput`) for one question, in `mode` "debate" or "panel".

    What `panel_node` and the designer's `debate` and `panel` node types run the panel graph on. The arguments are
    `panel_input`'s; the arbitrators default to `default_arbitrator`, and a debate decides by `rule`
    (`graphs.panel.rules`).

    Returns:
        The input dict for `build_panel_graph().compile().ainvoke(...)`.

    Raises:
        ValueError: a `mode` other than "debate" or "panel", or an empty question.

    Example:
        >>> import parley
        >>> parley.question_input("Tabs or spaces?", mode="panel")["messages"]
        [{'role': 'user', 'content': 'Tabs or spaces?'}]
        >>> parley.question_input("  ")
        Traceback (most recent call last):
        ...
        ValueError: the debate node needs a question
    """
    if mode not in ("debate", "panel"):
        raise ValueError(f"mode must be 'debate' or 'panel', not {mode!r}")
    if question is None or not str(question).strip():
        raise ValueError(f"the {mode} node needs a question")
    return panel_input(
        [{"role": "user", "content": str(question)}], models=models,
        arbitrators=arbitrators or ([default_arbitrator] if default_arbitrator else []), panel_size=panel_size,
        mode=mode, allow_same_family=allow_same_family, system_prompt=system_prompt,
        arbitrator_prompt=arbitrator_prompt, rule=rule, answer_rule=answer_rule,
    )


def panel_node(
    *,
    models: list[str] | None = None,
    arbitrators: list[str] | None = None,
    panel_size: int = DEFAULT_PANEL_SIZE,
    system_prompt: str | None = None,
    arbitrator_prompt: str | None = None,
    input_key: str = "input",
    output_key: str = "verdict",
    mode: str = "debate",
    allow_same_family: bool | None = None,
    rule: Rule = DEFAULT_RULE,
    answer_rule: str | None = None,
):
    """Build a node that puts `state[input_key]` to a panel and writes the answer to `state[output_key]`.

    A debate decides by `rule` (`synthesis`, `vote` reading answers by `answer_rule`, `rank`, `best-of-n`:
    `graphs.panel.rules`).

    Models default to the `router/debate` preset's (`Settings.debate_models`) and the arbitrator to
    `PARLEY_ARBITRATOR_MODEL`, read when the node runs. `allow_same_family` None follows the preset when
    `models` is None (so a fresh install's one embedded model fills the panel), and is off otherwise.
    Usage lands in the calling graph's ledger; the panel's stream events (arbitrator tokens as
    `{"event": "chunk"}`, `{"event": "panelist"}` progress) reach a caller that streams with `subgraphs=True`.

    Args:
        models, arbitrators, panel_size, system_prompt, arbitrator_prompt, allow_same_family, rule, answer_rule:
            the panel's, as `question_input` takes them.
        input_key, output_key: the state keys of the question and of the answer.
        mode: "debate" (a decision) or "panel" (every answer labelled).

    Returns:
        The async node `(state, runtime) -> {output_key: answer}`.

    Raises:
        ValueError: a `mode` other than "debate" or "panel"; (when the node runs) no question in `input_key`.

    Example:
        ```python
        # docs/python.md, panel_then_table.py and stream_events.py
        builder = StateGraph(Decision, context_schema=parley.RunContext)
        builder.add_node("panel", parley.panel_node(input_key="question", output_key="verdict"))
        ```
    """
    if mode not in ("debate", "panel"):
        raise ValueError(f"mode must be 'debate' or 'panel', not {mode!r}")
    settings = dict(models=models, arbitrators=arbitrators, panel_size=panel_size, system_prompt=system_prompt,
                    arbitrator_prompt=arbitrator_prompt, mode=mode, allow_same_family=allow_same_family, rule=rule,
                    answer_rule=answer_rule)

    async def debate(state: dict[str, Any], runtime: Runtime[RunContext]) -> dict[str, Any]:
        """Put the question to the panel and store its answer."""
        ctx = panel_context(runtime)
        question = state.get(input_key)
        if question is None or not str(question).strip():
            raise ValueError(f"the {mode} node needs a question in state key {input_key!r}")
        inputs = question_input(str(question), **settings, default_arbitrator=ctx.factory.settings.arbitrator_model)
        result = await graph.ainvoke(inputs, context=ctx)
        return {output_key: result["answer"]}

    return debate
