"""The panel's decision rules, run in-process against the scripted model server: the vote's tally and ties, the
reviewers' self-recusal and seeded orders with the Borda count, the judge's two readings, and who decides."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parley.graphs.panel import PanelContext, graph
from parley.graphs.panel.rules import check_rule
from parley.llm.factory import ModelFactory
from parley.llm.formats import AnswerFormat
from parley.llm.tools import ToolSet
from parley.nodes.arbitrate import ANSWER_LETTERS
from parley.nodes.prompts import answers as answer_prompts
from parley.nodes.rank import review_orders
from tests.graphs.test_panel_graph import collect

PANEL = ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]
NAMES = ["gpt-5", "claude-sonnet-4-5", "gemini-2.5-pro"]
ARBITRATOR = "openai:gpt-4o"  # family gpt-4o: outside the panel
QUESTION = [{"role": "user", "content": "How many legs do two spiders have?"}]


@pytest.fixture
def ctx(parley_env) -> PanelContext:
    return PanelContext(models=ModelFactory(parley_env), panelist_timeout=10)


def debate(rule: str, **extra: Any) -> dict[str, Any]:
    return {"messages": QUESTION, "models": PANEL, "arbitrators": [ARBITRATOR], "rule": rule, **extra}


def answer_panel(llm, *replies: str) -> None:
    """Each panelist's answer (the rule's own calls are scripted before these, so they match first)."""
    for name, reply in zip(NAMES, replies):
        llm.script(model=name, reply=reply)


def calls_to(llm, model: str) -> list[dict]:
    return [r for r in llm.requests if r["model"] == model]


def shown_texts(request: dict, texts: list[str]) -> list[str]:
    """The answers among `texts` a reviewer's or judge's prompt shows, in the order it shows them."""
    prompt = request["messages"][-1]["content"]
    return sorted((t for t in texts if t in prompt), key=prompt.index)


# --- vote -----------------------------------------------------------------------------------


async def test_vote_returns_the_majority_verbatim_with_the_tally(ctx, llm):
    replies = ("Two spiders: 8 + 8.\nAnswer: 16", "Each has eight legs.\nAnswer: 16", "Answer: 14")
    answer_panel(llm, *replies)
    result, events = await collect(debate("vote", answer_rule="number"), ctx)
    assert result["answer"].startswith(replies[0] + "\n\n---\n\n")  # the first answer read as the winner, verbatim
    assert "16 × 2 (openai:gpt-5, anthropic:claude-sonnet-4-5); 14 × 1 (google:gemini-2.5-pro)" in result["answer"]
    decision = result["decision"]
    assert decision["rule"] == "vote" and decision["decidedBy"] == "majority" and decision["answer"] == "16"
    assert decision["winner"] == "openai:gpt-5" and decision["model"] == "openai:gpt-5"
    assert decision["tally"] == [
        {"answer": "16", "votes": 2, "panelists": ["openai:gpt-5", "anthropic:claude-sonnet-4-5"]},
        {"answer": "14", "votes": 1, "panelists": ["google:gemini-2.5-pro"]}]
    assert calls_to(llm, "gpt-4o") == []  # a majority needs no arbitrator
    # The panelists were asked for the rule's format, so their answers can be read back.
    assert all(answer_prompts.NUMBER_FORMAT in r["messages"][0]["content"] for r in llm.requests)
    assert "".join(e["content"] for e in events if e["event"] == "chunk") == result["answer"]
    assert [e["decidedBy"] for e in events if e["event"] == "decision"] == ["majority"]


async def test_a_tied_vote_goes_to_the_arbitrator(ctx, llm):
    llm.script(model="gpt-4o", reply="Sixteen legs. Answer: 16")
    answer_panel(llm, "Answer: 16", "Answer: 14", "Answer: 12")
    result, _ = await collect(debate("vote", answer_rule="number"), ctx)
    assert result["answer"] == "Sixteen legs. Answer: 16" and result["arbitrator"] == ARBITRATOR
    decision = result["decision"]
    assert decision["decidedBy"] == "arbitrator" and decision["model"] == ARBITRATOR
    assert decision["reason"] == "the vote is tied: '16' and '14' and '12' have 1 each"
    assert [t["votes"] for t in decision["tally"]] == [1, 1, 1] and decision["independent"] is True


async def test_a_vote_reads_exact_answers_by_default(ctx, llm):
    answer_panel(llm, "It is the capital.\nAnswer: Paris", "Answer: Lyon", "Answer: paris.")
    result = await graph.ainvoke(debate("vote"), context=ctx)
    decision = result["decision"]
    assert decision["answerRule"] == "exact" and decision["answer"] == "paris"
    assert [(t["answer"], t["votes"]) for t in decision["tally"]] == [("paris", 2), ("lyon", 1)]
    assert result["answer"].startswith("It is the capital.\nAnswer: Paris\n\n---")
    assert all(answer_prompts.EXACT_FORMAT in r["messages"][0]["content"] for r in llm.requests)


async def test_one_readable_answer_wins_no_vote(ctx, llm):
    llm.script(model="gpt-4o", reply="The arbitrator's answer.")
    answer_panel(llm, "Answer: 16", "no number here", "none either")
    result = await graph.ainvoke(debate("vote", answer_rule="number"), context=ctx)
    assert result["decision"]["decidedBy"] == "arbitrator" and result["answer"] == "The arbitrator's answer."
    assert result["decision"]["unreadable"] == ["anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"]


# --- rank -----------------------------------------------------------------------------------

FOUR = [*PANEL, "meta:llama-4-maverick"]
FOUR_NAMES = [*NAMES, "llama-4-maverick"]
FOUR_ANSWERS = ["Sixteen, from eight each.", "Two spiders have 16 legs.", "Fourteen.", "Sixteen legs in all."]


def script_reviews(llm, seed: int, prefer: list[int]) -> None:
    """Every reviewer ranks the answers it reads by the order of `prefer` (positions, best first)."""
    for reviewer, order in enumerate(review_orders(len(FOUR), seed)):
        ranking = sorted(range(len(order)), key=lambda shown: prefer.index(order[shown]))
        llm.script(model=FOUR_NAMES[reviewer], match="Rank these answers",
                   json={"ranking": [ANSWER_LETTERS[i] for i in ranking], "reason": "Answer A is right."})


async def test_rank_counts_borda_over_self_recused_seeded_reviews(ctx, llm):
    script_reviews(llm, seed=7, prefer=[1, 3, 0, 2])
    for name, reply in zip(FOUR_NAMES, FOUR_ANSWERS):
        llm.script(model=name, reply=reply)
    result, events = await collect(debate("rank", models=FOUR, panel_size=4, seed=7), ctx)
    # The Borda winner is returned verbatim, with the ranking.
    assert result["answer"].startswith(FOUR_ANSWERS[1] + "\n\n---\n\n**Ranking**")
    decision = result["decision"]
    assert decision["decidedBy"] == "borda" and decision["winner"] == "anthropic:claude-sonnet-4-5"
    assert [r["panelist"] for r in decision["ranking"]] == [FOUR[1], FOUR[3], FOUR[0], FOUR[2]]
    assert [r["reviews"] for r in decision["ranking"]] == [3, 3, 3, 3] and decision["ranking"][0]["score"] == 2.0
    orders = review_orders(4, 7)
    reviews = [r for r in llm.requests if "Rank these answers" in r["messages"][-1]["content"]]
    assert len(reviews) == 4
    for review in reviews:
        reviewer = FOUR_NAMES.index(review["model"])
        # Never its own answer, and the others in its own seeded order.
        assert FOUR_ANSWERS[reviewer] not in review["messages"][-1]["content"]
        assert shown_texts(review, FOUR_ANSWERS) == [FOUR_ANSWERS[i] for i in orders[reviewer]]
        # Anonymised: no author's model name reaches a reviewer.
        assert not any(name in json.dumps(review["messages"]) for name in FOUR_NAMES)
    assert any(order != sorted(order) for order in orders)  # shuffled, not every reviewer in panel order
    assert [e["reviewer"] for e in events if e["event"] == "review"] and calls_to(llm, "gpt-4o") == []
    # The reason names authors, not letters.
    assert all("Answer A" not in r["reason"] for r in decision["reviews"])


async def test_the_same_seed_reads_the_same_orders_and_another_seed_others(ctx, llm):
    seen = []
    for seed in (7, 7, 8):
        llm.reset()
        script_reviews(llm, seed=seed, prefer=[1, 3, 0, 2])
        for name, reply in zip(FOUR_NAMES, FOUR_ANSWERS):
            llm.script(model=name, reply=reply)
        result = await graph.ainvoke(debate("rank", models=FOUR, panel_size=4, seed=seed), context=ctx)
        assert result["decision"]["winner"] == "anthropic:claude-sonnet-4-5"
        seen.append({r["model"]: tuple(shown_texts(r, FOUR_ANSWERS)) for r in llm.requests
                     if "Rank these answers" in r["messages"][-1]["content"]})
    assert seen[0] == seen[1] and seen[0] != seen[2]


async def test_a_tied_borda_count_goes_to_the_arbitrator(ctx, llm):
    llm.script(model="gpt-4o", reply="The arbitrated answer.")
    # Three answers: each reviewer prefers the answer after its own, so every answer scores 1 point of 1 possible.
    for reviewer, order in enumerate(review_orders(3, 1)):
        first = order.index((reviewer + 1) % 3)
        llm.script(model=NAMES[reviewer], match="Rank these answers",
                   json={"ranking": [ANSWER_LETTERS[first], ANSWER_LETTERS[1 - first]], "reason": "Close."})
    answer_panel(llm, "One.", "Two.", "Three.")
    result = await graph.ainvoke(debate("rank", seed=1), context=ctx)
    decision = result["decision"]
    assert decision["decidedBy"] == "arbitrator" and "the Borda count is tied" in decision["reason"]
    assert [r["score"] for r in decision["ranking"]] == [0.5, 0.5, 0.5]
    assert result["answer"] == "The arbitrated answer." and decision["model"] == ARBITRATOR


async def test_a_failed_or_unreadable_reviewer_abstains(ctx, llm):
    llm.script(model="gpt-5", match="Rank these answers", status=401)
    llm.script(model="gemini-2.5-pro", match="Rank these answers", json={"ranking": ["A", "A"], "reason": "x"})
    orders = review_orders(3, 3)
    claude_first = orders[1].index(0)  # claude reads gpt-5's and gemini's answers: it prefers gpt-5's
    llm.script(model="claude-sonnet-4-5", match="Rank these answers",
               json={"ranking": [ANSWER_LETTERS[claude_first], ANSWER_LETTERS[1 - claude_first]], "reason": "ok"})
    answer_panel(llm, "Sixteen.", "Fourteen.", "Twelve.")
    result = await graph.ainvoke(debate("rank", seed=3), context=ctx)
    decision = result["decision"]
    assert decision["winner"] == "openai:gpt-5" and result["answer"].startswith("Sixteen.\n\n---")
    assert [(r["reviewer"], r["success"], r.get("error")) for r in decision["reviews"]] == [
        ("openai:gpt-5", False, "auth"), ("anthropic:claude-sonnet-4-5", True, None),
        ("google:gemini-2.5-pro", False, None)]


async def test_rank_needs_three_answers(ctx, llm):
    llm.script(model="gemini-2.5-pro", status=401)
    llm.script(model="gpt-4o", reply="Arbitrated.")
    result = await graph.ainvoke(debate("rank"), context=ctx)
    assert result["decision"]["decidedBy"] == "arbitrator" and "too few to rank" in result["decision"]["reason"]
    assert not any("Rank these answers" in r["messages"][-1]["content"] for r in llm.requests)


# --- best-of-n ------------------------------------------------------------------------------

THREE = ["Sixteen legs.", "Two times eight: 16.", "Fourteen."]


async def test_best_of_n_returns_the_answer_both_readings_picked(ctx, llm):
    # In panel order the second answer is B; reversed, it is B again (C, B, A): the judge picks it both times.
    llm.script(model="gpt-4o", match="Which answer is the best", json={"best": "B", "reason": "Answer B shows why."})
    answer_panel(llm, *THREE)
    result, events = await collect(debate("best-of-n"), ctx)
    assert result["answer"].startswith(THREE[1] + "\n\n---\n\n**Best of 3**")
    decision = result["decision"]
    assert decision["decidedBy"] == "judge" and decision["winner"] == "anthropic:claude-sonnet-4-5"
    assert decision["judge"] == ARBITRATOR and decision["independent"] is True
    judgings = [r for r in calls_to(llm, "gpt-4o") if "Which answer is the best" in r["messages"][-1]["content"]]
    assert [shown_texts(r, THREE) for r in judgings] in ([THREE, THREE[::-1]], [THREE[::-1], THREE])
    assert [v["order"] for v in decision["verdicts"]] == ["as_given", "reversed"]
    assert decision["verdicts"][0]["reason"] == "anthropic:claude-sonnet-4-5 shows why."  # letters put back
    assert len(calls_to(llm, "gpt-4o")) == 2  # no arbitration after the judge agreed with itself
    assert len([e for e in events if e["event"] == "verdict"]) == 2


async def test_a_judge_that_favours_a_position_leaves_it_to_the_arbitrator(ctx, llm):
    llm.script(model="gpt-4o", match="Which answer is the best", json={"best": "A", "reason": "A is first."})
    llm.script(model="gpt-4o", reply="The arbitrated answer.")
    answer_panel(llm, *THREE)
    result = await graph.ainvoke(debate("best-of-n"), context=ctx)
    decision = result["decision"]
    assert decision["decidedBy"] == "arbitrator" and "position bias" in decision["reason"]
    assert [v["panelist"] for v in decision["verdicts"]] == ["openai:gpt-5", "google:gemini-2.5-pro"]
    assert result["answer"] == "The arbitrated answer." and result["arbitrator"] == ARBITRATOR


# --- who decides ----------------------------------------------------------------------------


async def test_an_arbitrator_of_an_outside_family_goes_first(ctx, llm):
    llm.script(model="llama-4-maverick", reply="From outside.")
    # claude-opus-4-5 is the family of a panelist (claude-sonnet-4-5): the outsider is asked first.
    result = await graph.ainvoke(debate("synthesis", arbitrators=["anthropic:claude-opus-4-5",
                                                                  "meta:llama-4-maverick"]), context=ctx)
    assert result["arbitrator"] == "meta:llama-4-maverick" and result["answer"] == "From outside."
    assert result["decision"] == {"rule": "synthesis", "decidedBy": "arbitrator", "model": "meta:llama-4-maverick",
                                  "arbitrator": "meta:llama-4-maverick", "independent": True}


async def test_the_decision_says_when_no_outside_family_is_configured(ctx, llm):
    result = await graph.ainvoke(debate("synthesis", arbitrators=["anthropic:claude-opus-4-5"]), context=ctx)
    decision = result["decision"]
    assert decision["independent"] is False and decision["arbitrator"] == "anthropic:claude-opus-4-5"
    assert "No configured arbitrator candidate is of a family outside the panel's" in decision["note"]


async def test_self_moa_samples_one_model_then_decides_by_its_rule(ctx, llm):
    llm.script(model="gpt-5", replies=["Answer: 16", "Answer: 16", "Answer: 18"])
    result = await graph.ainvoke(debate("vote", models=["openai:gpt-5"], allow_same_family=True,
                                        answer_rule="number"), context=ctx)
    assert result["same_family"] is True and result["decision"]["decidedBy"] == "majority"
    # The three samples are asked at once: which two of them the scripted server answers "16" is theirs to race.
    tally = {t["answer"]: t["panelists"] for t in result["decision"]["tally"]}
    assert len(tally["16"]) == 2 and len(tally["18"]) == 1
    assert sorted(tally["16"] + tally["18"]) == ["openai:gpt-5", "openai:gpt-5 #2", "openai:gpt-5 #3"]


def test_check_rule_names_the_field_at_fault():
    check_rule("vote", "regex:ID-(\\d+)", 3)
    for args, param in ((("majority",), "rule"), (("vote", "regex:("), "answer_rule"),
                        (("rank", "number"), "answer_rule"), (("rank", None, 2), "rule")):
        with pytest.raises(ValueError) as caught:
            check_rule(*args)
        assert caught.value.param == param


# --- with tools, or an answer format ----------------------------------------------------------

LEGS = {"type": "json_schema", "json_schema": {"name": "legs", "strict": True, "schema": {
    "type": "object", "properties": {"legs": {"type": "integer"}}, "required": ["legs"],
    "additionalProperties": False}}}


async def test_a_vote_for_json_returns_the_majority_verbatim_without_its_note(ctx, llm):
    answer_panel(llm, '{"legs": 16}', '{"legs": 16}', '{"legs": 14}')
    result, _ = await collect(debate("vote", response_format=AnswerFormat.from_request(LEGS).dump()), ctx)
    assert result["answer"] == '{"legs": 16}'  # the JSON asked for, and nothing after it
    assert result["decision"]["decidedBy"] == "majority" and result["decision"]["tally"][0]["votes"] == 2
    assert calls_to(llm, "gpt-4o") == []


async def test_a_vote_whose_winner_is_not_the_json_asked_for_goes_to_the_arbitrator(ctx, llm):
    llm.script(model="gpt-4o", json={"legs": 16})
    answer_panel(llm, "16 legs", "16 legs", "14 legs")
    result, _ = await collect(debate("vote", response_format=AnswerFormat.from_request(LEGS).dump()), ctx)
    assert result["answer"] == '{"legs": 16}' and result["arbitrator"] == ARBITRATOR
    assert result["decision"]["decidedBy"] == "arbitrator"
    assert "not the JSON the request asks for" in result["decision"]["reason"]


async def test_a_vote_whose_answer_may_call_tools_goes_to_the_arbitrator_who_has_them(ctx, llm):
    tools = ToolSet.from_request([{"type": "function", "function": {
        "name": "count_legs", "parameters": {"type": "object", "properties": {"animal": {"type": "string"}}}}}])
    llm.script(model="gpt-4o", reply="Two spiders have 16 legs.")
    answer_panel(llm, "Answer: 16", "Answer: 16", "Answer: 14")
    result, _ = await collect(debate("vote", answer_rule="number", tools=tools.dump()), ctx)
    assert result["answer"] == "Two spiders have 16 legs." and result["arbitrator"] == ARBITRATOR
    assert result["decision"]["decidedBy"] == "arbitrator" and "tools" in result["decision"]["reason"]
    assert calls_to(llm, "gpt-4o")[0]["tools"][0]["function"]["name"] == "count_legs"
