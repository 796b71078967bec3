"""Each method, run on one item against the scripted model server: what it asks, and the answer it reads."""

from __future__ import annotations

from collections import Counter

import pytest

from parley.evals import prompts
from parley.nodes.answers import parse_rule
from parley.evals.methods import METHODS, MethodOptions
from parley.llm.factory import ModelFactory
from parley.nodes.context import RunContext

QUESTION = "What is the value of 1+2*3+4-5*1?\n\nEnd with `Answer: <number>`."
NUMBER = parse_rule("number")


def ctx(parley_env) -> RunContext:
    return RunContext(models=ModelFactory(parley_env), model="openai:gpt-4o-mini")


async def test_single_asks_once_at_temperature_zero(parley_env, llm):
    llm.script(reply="1 + 6 + 4 - 5 = 6\nAnswer: 6")
    context = ctx(parley_env)
    attempt = await METHODS["single"](QUESTION, NUMBER, context, MethodOptions())
    assert attempt.prediction == "6" and attempt.votes is None
    assert len(llm.requests) == 1 and llm.requests[0]["temperature"] == 0.0
    assert len(context.ledger.records) == 1


async def test_self_consistency_takes_the_majority_of_k_samples(parley_env, llm):
    llm.script(replies=["Answer: 7", "Answer: 6", "Answer: 6", "no idea", "Answer: 6"])
    attempt = await METHODS["self-consistency"](QUESTION, NUMBER, ctx(parley_env),
                                                MethodOptions(samples=5, temperature=0.9))
    assert attempt.prediction == "6" and not attempt.tied
    assert Counter(attempt.votes) == {"6": 3, "7": 1, None: 1}
    assert attempt.response == "Answer: 6"  # the text shown is one that voted for the winner
    assert len(llm.requests) == 5 and {r["temperature"] for r in llm.requests} == {0.9}


async def test_debate_takes_the_majority_of_the_last_round(parley_env, llm):
    llm.script(match="Other agents answered", replies=["Answer: 6", "Answer: 4", "Answer: 6"])
    llm.script(replies=["Answer: 6", "Answer: 5", "Answer: 4"])
    context = ctx(parley_env)
    attempt = await METHODS["debate"](QUESTION, NUMBER, context, MethodOptions(agents=3, rounds=1))
    assert attempt.prediction == "6" and sorted(attempt.votes) == ["4", "6", "6"]
    assert len(llm.requests) == 6 and len(context.ledger.records) == 6


async def test_panel_reads_the_arbitrators_answer(parley_env, llm):
    llm.script(match="arbitrator of a panel", reply="Weighing the three answers: Answer: 6")
    llm.script(reply="Answer: 5")
    context = ctx(parley_env)
    attempt = await METHODS["panel"](QUESTION, NUMBER, context, MethodOptions(agents=3))
    assert attempt.prediction == "6"
    assert len(llm.requests) == 4  # three panelists (one model resampled) and the arbitrator
    assert len({r["temperature"] for r in llm.requests[:3]}) == 3  # the resampled seats differ


async def test_roundtable_reads_the_recommended_action(parley_env, llm):
    synthesis = {"summary": "The table agrees.", "debateEvolution": "Nobody moved.",
                 "devilsAdvocateMainAttack": "The product may be wrong.", "consensus": ["6"], "riskPoints": [],
                 "recommendedAction": "Report the result. Answer: 6", "conditions": [],
                 "confidenceLevel": "high", "urgency": "low"}
    llm.script(match="synthesizer of a round-table debate", json=synthesis)
    llm.script(reply="I compute 6. Answer: 6")
    context = ctx(parley_env)
    attempt = await METHODS["roundtable"](QUESTION, NUMBER, context, MethodOptions(agents=2, rounds=1))
    assert attempt.prediction == "6" and attempt.response == "Report the result. Answer: 6"
    assert attempt.first_vote == {"rule": "number", "answer": "6", "count": 2, "tied": False, "votes": ["6", "6"]}
    first_turn = next(r for r in llm.requests if "Careful solver" in r["messages"][0]["content"])
    assert prompts.ROUNDTABLE_TOPIC in first_turn["messages"][0]["content"]  # the table's header, before the rounds
    assert any("Sceptical checker" in r["messages"][0]["content"] for r in llm.requests)
    assert len(context.ledger.records) == len(llm.requests)  # every call is on the item's bill


# --- the panel's decision rules and Self-MoA ------------------------------------------------


async def test_panel_vote_takes_the_majority_without_an_arbitrator(parley_env, llm):
    llm.script(replies=["Answer: 6", "Answer: 6", "Answer: 5"])
    attempt = await METHODS["panel:vote"](QUESTION, NUMBER, ctx(parley_env), MethodOptions(agents=3))
    assert attempt.prediction == "6" and attempt.response == "Answer: 6"  # the chosen answer, without the tally
    assert len(llm.requests) == 3


async def test_panel_rank_reads_the_borda_winner(parley_env, llm):
    # Every reviewer puts a 6 first wherever it reads one: a 6 wins the Borda count whichever seat wrote it.
    for letter, ranking in (("A", ["A", "B"]), ("B", ["B", "A"])):
        llm.script(match=f"### Answer {letter}\nAnswer: 6", json={"ranking": ranking, "reason": "Six is right."})
    llm.script(replies=["Answer: 6", "Answer: 6", "Answer: 5"])
    context = ctx(parley_env)
    attempt = await METHODS["panel:rank"](QUESTION, NUMBER, context, MethodOptions(agents=3))
    assert attempt.prediction == "6"
    assert len(llm.requests) == 6 and len(context.ledger.records) == 6  # three answers, three reviews


async def test_panel_best_of_n_reads_the_judges_pick(parley_env, llm):
    for letter in "AB":
        llm.script(match=f"### Answer {letter}\nAnswer: 6", json={"best": letter, "reason": "Six."})
    llm.script(match="Which answer is the best", json={"best": "C", "reason": "Six."})
    llm.script(replies=["Answer: 6", "Answer: 5", "Answer: 4"])
    attempt = await METHODS["panel:best-of-n"](QUESTION, NUMBER, ctx(parley_env), MethodOptions(agents=3))
    assert attempt.prediction == "6"
    assert len(llm.requests) == 5  # three answers and two readings that agree: no arbitrator


async def test_self_moa_samples_the_run_model_and_aggregates(parley_env, llm):
    llm.script(match="arbitrator of a panel", reply="Most say six. Answer: 6")
    llm.script(replies=["Answer: 6", "Answer: 5", "Answer: 6"])
    attempt = await METHODS["self-moa"](QUESTION, NUMBER, ctx(parley_env), MethodOptions(agents=3, temperature=0.7))
    assert attempt.prediction == "6"
    assert [r["model"] for r in llm.requests] == ["gpt-4o-mini"] * 4
    assert len({r["temperature"] for r in llm.requests[:3]}) == 3  # three distinct samples


async def test_debate_records_the_round_zero_vote(parley_env, llm):
    llm.script(match="Other agents answered", replies=["Answer: 4"])
    llm.script(replies=["Answer: 6", "Answer: 6", "Answer: 5"])
    attempt = await METHODS["debate"](QUESTION, NUMBER, ctx(parley_env), MethodOptions(agents=3, rounds=1))
    assert attempt.prediction == "4"
    assert attempt.first_vote["answer"] == "6" and attempt.first_vote["count"] == 2
    assert sorted(attempt.first_vote["votes"]) == ["5", "6", "6"] and attempt.first_vote["rule"] == "number"


# --- adaptive depth ---------------------------------------------------------------------------


async def test_adaptive_stops_after_two_seats_that_agree(parley_env, llm):
    llm.script(match="arbitrator of a panel", reply="Answer: 5")  # never asked: the agreed pair answers
    llm.script(reply="1 + 6 + 4 - 5 = 6\nAnswer: 6")
    context = ctx(parley_env)
    attempt = await METHODS["adaptive"](QUESTION, NUMBER, context, MethodOptions(agents=3))
    assert attempt.prediction == "6"
    assert attempt.adaptive["path"] == "agreed" and attempt.adaptive["seats"] == 3
    assert attempt.adaptive["agreement"] >= attempt.adaptive["threshold"]
    assert len(llm.requests) == 2 and len(context.ledger.records) == 2  # the two panelists, no arbitrator


async def test_adaptive_asks_the_rest_of_the_panel_when_the_first_two_disagree(parley_env, llm):
    llm.script(match="arbitrator of a panel", reply="Two of three say six. Answer: 6")
    llm.script(replies=["Answer: 6", "Answer: 5", "Answer: 6", "Answer: 6"])
    context = ctx(parley_env)
    attempt = await METHODS["adaptive"](QUESTION, NUMBER, context, MethodOptions(agents=4))
    assert attempt.prediction == "6"
    assert attempt.adaptive["path"] == "escalated" and attempt.adaptive["agreement"] < attempt.adaptive["threshold"]
    assert len(llm.requests) == 5  # the first two, the other two seats, and the arbitrator


async def test_the_full_panel_records_no_path(parley_env, llm):
    llm.script(match="arbitrator of a panel", reply="Answer: 6")
    llm.script(reply="Answer: 6")
    attempt = await METHODS["panel"](QUESTION, NUMBER, ctx(parley_env), MethodOptions(agents=3))
    assert attempt.adaptive is None and len(llm.requests) == 4


async def test_adaptive_refuses_a_panel_with_nothing_to_skip(parley_env, llm):
    with pytest.raises(ValueError, match="at least 3 panelists, not 2"):
        await METHODS["adaptive"](QUESTION, NUMBER, ctx(parley_env), MethodOptions(agents=2))
    assert llm.requests == []
