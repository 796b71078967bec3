"""The panel graph run in-process against the scripted model server: fan-out, failures, arbitration, modes."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import RetryPolicy

from parley.core.settings import get_settings
from parley.graphs.panel import (
    AllModelsFailedError,
    PanelContext,
    TooFewFamiliesError,
    TooFewPanelistsError,
    build_panel_graph,
    graph,
    panel_input,
    panel_node,
)
from parley.llm.factory import ModelFactory
from parley.llm.failures import is_transient
from parley.nodes.context import RunContext

PANEL = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]
QUESTION = [{"role": "user", "content": "Is a hot dog a sandwich?"}]
FAST_RETRY = RetryPolicy(max_attempts=2, initial_interval=0.01, jitter=False, retry_on=is_transient)
SMOL = "local:smollm2"
SMOL_SEATS = [SMOL, f"{SMOL} #2", f"{SMOL} #3"]


@pytest.fixture
def ctx(parley_env) -> PanelContext:
    return PanelContext(models=ModelFactory(parley_env), panelist_timeout=5)


def debate(**extra: Any) -> dict[str, Any]:
    return {"messages": QUESTION, "models": PANEL, "arbitrators": ["openai:gpt-4o"], **extra}


async def collect(state: dict[str, Any], context: PanelContext, compiled=graph) -> tuple[dict, list[dict]]:
    result, events = {}, []
    async for kind, data in compiled.astream(state, context=context, stream_mode=["custom", "values"]):
        if kind == "values":
            result = data
        else:
            events.append(data)
    return result, events


async def test_debate_fans_out_and_arbitrates(ctx, llm):
    llm.script(model="gpt-4o", reply="A hot dog is a taco.")
    result, events = await collect(debate(), ctx)
    assert result["answer"] == "A hot dog is a taco." and result["arbitrator"] == "openai:gpt-4o"
    assert [p["model"] for p in result["panelists"]] == PANEL and all(p["success"] for p in result["panelists"])
    kinds = [e["event"] for e in events]
    assert kinds[0] == "panelists" and kinds.count("panelist") == 3
    assert kinds.index("answering") > max(i for i, k in enumerate(kinds) if k == "panelist")
    assert "".join(e["content"] for e in events if e["event"] == "chunk") == "A hot dog is a taco."
    assert set(ctx.ledger.by_model()) == set(PANEL) | {"openai:gpt-4o"}
    assert sum(p["cost"] for p in result["panelists"]) < ctx.ledger.total_cost


async def test_the_callers_system_prompt_reaches_panelists_and_arbitrator(ctx, llm):
    await graph.ainvoke(debate(system_prompt="Answer in one word.", arbitrator_prompt="Prefer the shortest."),
                        context=ctx)
    panelist = next(r for r in llm.requests if r["model"] == "gpt-5")
    assert panelist["messages"][0] == {"role": "system", "content": "Answer in one word."}
    arbitration = next(r for r in llm.requests if r["model"] == "gpt-4o")["messages"][0]["content"]
    assert arbitration.startswith("Prefer the shortest.") and "Answer in one word." in arbitration


async def test_a_failing_panelist_is_recorded_not_fatal(ctx, llm):
    llm.script(model="claude-sonnet-4-5", status=401)
    result = await graph.ainvoke(debate(), context=ctx)
    assert [p["success"] for p in result["panelists"]] == [True, False, True]
    assert result["panelists"][1]["error"] == "auth" and result["answer"]


async def test_too_few_answers_raise_naming_each_model(ctx, llm):
    llm.script(model="gpt-5", status=401)
    llm.script(model="gemini-2.5-pro", status=400)
    with pytest.raises(TooFewPanelistsError) as caught:
        await graph.ainvoke(debate(), context=ctx)
    message = str(caught.value)
    assert "openai:gpt-5: auth (HTTP 401" in message and "google:gemini-2.5-pro: other (HTTP 400" in message
    assert "anthropic:claude-sonnet-4-5: answered" in message


async def test_every_panelist_failing_still_reaches_the_tally(ctx, llm):
    for model in ("gpt-5", "claude-sonnet-4-5", "gemini-2.5-pro"):
        llm.script(model=model, status=401)
    with pytest.raises(TooFewPanelistsError, match="Only 0 of 3"):
        await graph.ainvoke(debate(), context=ctx)


async def test_min_successes_is_configurable(ctx, llm):
    llm.script(model="gpt-5", status=401)
    with pytest.raises(TooFewPanelistsError, match=r"\(3 needed\)"):
        await graph.ainvoke(debate(min_successes=3), context=ctx)
    llm.script(model="claude-sonnet-4-5", status=401)
    result = await graph.ainvoke(debate(min_successes=1), context=ctx)
    assert sum(p["success"] for p in result["panelists"]) == 1


async def test_a_hanging_panelist_times_out_on_its_own(parley_env, llm):
    llm.script(model="gemini-2.5-pro", hang=True)
    # Long enough that the panelists who answer never come near it, however loaded the machine.
    context = PanelContext(models=ModelFactory(parley_env), panelist_timeout=2)
    result = await graph.ainvoke(debate(), context=context)
    assert result["panelists"][2]["success"] is False and result["panelists"][2]["error"] == "timeout"
    assert result["panelists"][0]["success"] and result["answer"]


async def test_transient_failures_are_retried(ctx, llm):
    llm.script(model="gpt-5", status=429, times=1)
    llm.script(model="claude-sonnet-4-5", status=503, times=1)
    compiled = build_panel_graph(panelist_retry=FAST_RETRY).compile()
    result = await compiled.ainvoke(debate(), context=ctx)
    assert all(p["success"] for p in result["panelists"])
    assert [r["model"] for r in llm.requests].count("gpt-5") == 2


async def test_auth_failures_are_not_retried(ctx, llm):
    llm.script(model="gpt-5", status=401)
    compiled = build_panel_graph(panelist_retry=FAST_RETRY).compile()
    await compiled.ainvoke(debate(), context=ctx)
    assert [r["model"] for r in llm.requests].count("gpt-5") == 1


async def test_arbitrator_falls_back_in_order(ctx, llm):
    llm.script(model="gpt-4o", status=500)
    llm.script(model="claude-opus-4-5", status=429)
    llm.script(model="gemini-2.5-flash", reply="Third arbitrator.")
    result, events = await collect(debate(arbitrators=["openai:gpt-4o", "anthropic:claude-opus-4-5",
                                                       "google:gemini-2.5-flash"]), ctx)
    assert result["answer"] == "Third arbitrator." and result["arbitrator"] == "google:gemini-2.5-flash"
    assert [(a["model"], a["error"]) for a in result["attempts"]] == [
        ("openai:gpt-4o", "server"), ("anthropic:claude-opus-4-5", "rate_limit")]
    assert [e["model"] for e in events if e["event"] == "answering"] == [
        "openai:gpt-4o", "anthropic:claude-opus-4-5", "google:gemini-2.5-flash"]


async def test_an_arbitrator_failing_mid_answer_is_flagged_partial(ctx, llm):
    llm.script(model="gpt-4o", reply="one two three four five", drop_after=2)
    llm.script(model="claude-opus-4-5", reply="Clean answer.")
    result, events = await collect(debate(arbitrators=["openai:gpt-4o", "anthropic:claude-opus-4-5"]), ctx)
    assert result["answer"] == "Clean answer."
    assert [e["partial"] for e in events if e["event"] == "fallback"] == [True]


async def test_all_arbitrators_failing_degrades_to_the_labelled_answers(ctx, llm):
    llm.script(model="gpt-4o", status=500)
    result = await graph.ainvoke(debate(), context=ctx)
    assert result["degraded"] == "arbitrator_failed" and result["arbitrator"] is None
    assert result["answer"].startswith("**openai:gpt-5**") and result["decision"]["decidedBy"] == "none"
    assert [(f["model"], f["role"], f["error"]) for f in result["failures"]] == [("openai:gpt-4o", "arbitrator",
                                                                               "server")]


async def test_all_arbitrators_failing_raises_when_the_answer_must_be_json(ctx, llm):
    llm.script(model="gpt-4o", status=500)
    with pytest.raises(AllModelsFailedError, match=r"openai:gpt-4o: server \(HTTP 500"):
        await graph.ainvoke({**debate(), "response_format": {"type": "json_object"}}, context=ctx)


async def test_panel_mode_assembles_labelled_blocks(ctx, llm):
    llm.script(model="gpt-5", reply="  Yes.\n")
    llm.script(model="claude-sonnet-4-5", status=401)
    llm.script(model="gemini-2.5-pro", reply="No.")
    result, events = await collect(debate(mode="panel"), ctx)
    assert result["answer"] == "**openai:gpt-5**\n\nYes.\n\n---\n\n**google:gemini-2.5-pro**\n\nNo."
    assert result["arbitrator"] is None
    assert [e["content"] for e in events if e["event"] == "chunk"] == [
        "**openai:gpt-5**\n\nYes.", "\n\n---\n\n**google:gemini-2.5-pro**\n\nNo."]
    assert "openai:gpt-4o" not in ctx.ledger.by_model()


async def test_single_mode_falls_back_down_the_list(ctx, llm):
    llm.script(model="gpt-5", status=500)
    llm.script(model="claude-sonnet-4-5", reply="Second.")
    result = await graph.ainvoke({"messages": QUESTION, "models": PANEL, "mode": "single"}, context=ctx)
    assert result["answer"] == "Second." and result["model_used"] == "anthropic:claude-sonnet-4-5"
    assert "panelists" not in result


async def test_family_shortage_and_bad_knobs_fail_before_any_call(ctx, llm):
    with pytest.raises(TooFewFamiliesError):
        await graph.ainvoke(debate(models=["openai:gpt-5", "openai:gpt-5-mini", PANEL[1]]), context=ctx)
    with pytest.raises(ValueError, match="min_successes"):
        await graph.ainvoke(debate(panel_size=2, min_successes=3), context=ctx)
    with pytest.raises(ValueError, match="mode"):
        await graph.ainvoke(debate(mode="duel"), context=ctx)
    assert llm.requests == []


async def test_defaults_come_from_settings(parley_env, llm):
    parley_env.parley_debate_models = PANEL
    parley_env.parley_arbitrator_model = "openai:gpt-4o"
    result = await graph.ainvoke({"messages": QUESTION}, context=PanelContext(models=ModelFactory(parley_env)))
    assert [p["model"] for p in result["panelists"]] == PANEL and result["arbitrator"] == "openai:gpt-4o"


class Workflow(TypedDict, total=False):
    question: str
    verdict: str


async def test_debate_node_composes_into_another_graph(parley_env, llm):
    parley_env.parley_debate_models = PANEL
    parley_env.parley_arbitrator_model = "openai:gpt-4o"
    llm.script(model="gpt-4o", reply="Verdict: no.")
    builder = StateGraph(Workflow, context_schema=RunContext)
    builder.add_node("debate", panel_node(input_key="question", output_key="verdict", system_prompt="Be fair."))
    builder.add_edge(START, "debate")
    outer = builder.compile()
    context = RunContext(models=ModelFactory(parley_env))
    chunks = []
    async for _ns, kind, data in outer.astream({"question": "Is a hot dog a sandwich?"}, context=context,
                                               stream_mode=["custom", "values"], subgraphs=True):
        if kind == "custom" and data["event"] == "chunk":
            chunks.append(data["content"])
        elif kind == "values" and not _ns:
            final = data
    assert final["verdict"] == "Verdict: no." and "".join(chunks) == "Verdict: no."
    assert set(context.ledger.by_model()) == set(PANEL) | {"openai:gpt-4o"}  # billed to the outer run
    assert next(r for r in llm.requests if r["model"] == "gpt-5")["messages"][0]["content"] == "Be fair."


async def test_debate_node_in_panel_mode_and_missing_input(parley_env, llm):
    node = panel_node(models=PANEL, mode="panel", output_key="out")
    builder = StateGraph(dict)
    builder.add_node("panel", node)
    builder.add_edge(START, "panel")
    outer = builder.compile()
    result = await outer.ainvoke({"input": "Tabs or spaces?"}, context=RunContext(models=ModelFactory(parley_env)))
    assert result["out"].startswith("**openai:gpt-5**\n\n")
    with pytest.raises(ValueError, match="'input'"):
        await outer.ainvoke({"input": "  "}, context=RunContext(models=ModelFactory(parley_env)))
    with pytest.raises(ValueError, match="mode"):
        panel_node(mode="single")


# --- a fresh install: one embedded model, the panel filled by resampling --------------------


@pytest.fixture
def embedded(parley_env, monkeypatch, llm) -> PanelContext:
    """A run context of a fresh install (no endpoint configured); the scripted server plays the embedded model."""
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    get_settings.cache_clear()
    settings = get_settings()
    assert settings.uses_embedded_model
    return PanelContext(models=ModelFactory(settings, local_base_url=llm.base_url), panelist_timeout=5)


async def test_the_preset_debates_on_the_embedded_model_alone(embedded, llm):
    llm.script(model="smollm2", match="### Answer C", reply="Verdict from the samples.")
    result, events = await collect({"messages": QUESTION}, embedded)
    assert result["answer"] == "Verdict from the samples." and result["arbitrator"] == SMOL
    assert [p["model"] for p in result["panelists"]] == SMOL_SEATS and result["same_family"] is True
    assert events[0] == {"event": "panelists", "models": SMOL_SEATS}
    panelists = [r for r in llm.requests if "### Answer" not in str(r["messages"])]
    assert len(panelists) == 3 and {r["model"] for r in llm.requests} == {"smollm2"}
    assert len({r["temperature"] for r in panelists}) == 3  # each sample at its own temperature
    assert set(embedded.ledger.by_model()) == {SMOL}  # the real id is what is priced
    assert {f"panelist:{label}" for label in SMOL_SEATS} <= set(embedded.ledger.by_label())


async def test_listed_models_keep_the_family_rule_unless_allowed(embedded, llm):
    with pytest.raises(TooFewFamiliesError):
        await graph.ainvoke({"messages": QUESTION, "models": [SMOL]}, context=embedded)
    assert llm.requests == []
    result = await graph.ainvoke({"messages": QUESTION, "models": [SMOL], "allow_same_family": True,
                                  "mode": "panel"}, context=embedded)
    headings = [block.split("\n", 1)[0] for block in result["answer"].split("\n\n---\n\n")]
    assert headings == [f"**{label}**" for label in SMOL_SEATS]


async def test_the_arbitrator_sees_every_answer_within_the_embedded_window(embedded, llm):
    # Long answers: the scripted server stops each at the embedded model's 384-token output cap.
    for i in range(3):
        llm.script(model="smollm2", match="Is a hot dog", reply=f"START-{i} " + "congestion " * 600, times=1)
    await graph.ainvoke({"messages": QUESTION}, context=embedded)
    arbitration = next(r for r in llm.requests if "### Answer" in str(r["messages"]))
    prompt = arbitration["messages"][-1]["content"]
    assert "[user]\nIs a hot dog a sandwich?" in prompt
    for letter in "ABC":
        assert f"### Answer {letter}\nSTART-" in prompt
    assert prompt.count(" [...]") == 3


async def test_debate_node_on_a_fresh_install_resamples(embedded, llm):
    final = await _one_node(panel_node(input_key="question")).ainvoke({"question": "Tabs?"}, context=embedded)
    assert final["verdict"] and len(llm.requests) == 4
    with pytest.raises(TooFewFamiliesError):  # an explicit list keeps the rule unless the node allows it
        await _one_node(panel_node(models=[SMOL], input_key="question")).ainvoke(
            {"question": "Tabs?"}, context=embedded)
    allowed = await _one_node(panel_node(models=[SMOL], allow_same_family=True, mode="panel",
                                          input_key="question")).ainvoke({"question": "Tabs?"}, context=embedded)
    assert all(f"**{label}**" in allowed["verdict"] for label in SMOL_SEATS)


def _one_node(node):
    builder = StateGraph(Workflow, context_schema=RunContext)
    builder.add_node("debate", node)
    builder.add_edge(START, "debate")
    return builder.compile()


async def test_adaptive_depth_in_python_asks_the_third_seat_only_on_disagreement(ctx, llm):
    """`panel_input(depth="adaptive")`: two seats that agree answer (2 calls, the first's answer as written); two
    that do not bring in the third and the arbitrator (4 calls), the `depth` events saying which path each took."""
    llm.script(model="gpt-5", reply="A hot dog is a sandwich.")
    llm.script(model="claude-sonnet-4-5", reply="A hot dog is a sandwich.", times=1)
    llm.script(model="claude-sonnet-4-5", reply="A hot dog is not a sandwich: it is a taco.")
    agreed, events = await collect(panel_input(QUESTION, models=PANEL, arbitrators=["openai:gpt-4o"],
                                               depth="adaptive"), ctx)
    assert agreed["adaptive"]["path"] == "agreed" and len(ctx.ledger.records) == 2
    assert agreed["answer"].startswith("A hot dog is a sandwich.") and agreed["arbitrator"] is None
    assert agreed["decision"] == {"rule": "synthesis", "decidedBy": "agreement", "agreement": 1.0,
                                  "winner": PANEL[0], "model": PANEL[0]}
    assert [e["path"] for e in events if e["event"] == "depth"] == ["agreed"]
    before = len(ctx.ledger.records)
    escalated, _ = await collect(panel_input(QUESTION, models=PANEL, arbitrators=["openai:gpt-4o"],
                                             depth="adaptive"), ctx)
    assert escalated["adaptive"]["path"] == "escalated" and len(ctx.ledger.records) - before == 4
    assert [p["model"] for p in escalated["panelists"]] == PANEL
    assert escalated["analysis"]["contradictions"]


async def test_a_raw_panel_carries_the_map_of_its_answers(ctx, llm):
    llm.script(model="gpt-5", reply="Yes.")
    llm.script(model="claude-sonnet-4-5", reply="Yes.")
    llm.script(model="gemini-2.5-pro", reply="No.")
    result, events = await collect(debate(mode="panel"), ctx)
    assert result["analysis"]["contradictions"] and result["analysis"]["agreement"] < 1
    assert [e for e in events if e["event"] == "analysis"][0]["agreement"] == result["analysis"]["agreement"]
