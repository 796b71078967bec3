"""`parley debate`: the duel in the terminal, run in-process against the scripted model."""

from __future__ import annotations

from typer.testing import CliRunner

from parley.cli.main import app
from tests.support.duel import OPPONENT_REPLY, USER_REPLY, judgement, script_duel


def test_debate_streams_rounds_and_prints_the_synthesis(parley_env, llm):
    script_duel(llm, as_debated=judgement("A", winnerReason="Speaker A cited real studies."))
    result = CliRunner().invoke(app, ["debate", "Should remote work be the default?", "--name", "Ada",
                                      "--bio", "Engineer", "--rounds", "2", "--trait", "rational"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Ada vs Margaret Hale" in out
    assert out.index("Round 1 of 2") < out.index("Round 2 of 2") < out.index("Judging")
    assert out.count(f"Ada: {USER_REPLY}") == 2 and out.count(f"Margaret Hale: {OPPONENT_REPLY}") == 2
    assert "Synthesis" in out and "Winner" in out and "Ada cited real studies." in out
    assert "as debated → Ada" in out and "swapped → Ada" in out
    assert "7 calls" in out  # opponent choice, four turns, two judges: all billed to the run
    turn = next(r for r in llm.requests if "You are Ada," in r["messages"][0]["content"])
    assert "Engineer" in turn["messages"][0]["content"] and "rational" in turn["messages"][0]["content"]


def test_debate_reports_a_model_failure_clearly(parley_env, llm):
    script_duel(llm, opponent_turn={"status": 400})
    result = CliRunner().invoke(app, ["debate", "Should remote work be the default?", "--rounds", "1"])
    assert result.exit_code == 1
    assert "Margaret Hale: \nerror: Debate generation failed: the model failed (HTTP 400" in result.output  # the API's


def test_debate_with_steer_asks_after_every_turn_and_takes_a_message_then_the_end(parley_env, llm):
    script_duel(llm)
    # After turn 1: a message; after turn 2: go on; after turn 3: the verdict at once.
    result = CliRunner().invoke(app, ["debate", "Should remote work be the default?", "--name", "Ada",
                                      "--rounds", "3", "--steer"], input="Think of the juniors.\n\n/end\n")
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.count("Your turn") == 3 and "Ada (you): Think of the juniors." in out
    assert out.index("Ada (you): Think of the juniors.") < out.index("Judging")
    assert "Stopped early (user): you ended it" in out and "Synthesis" in out
    turns = [r for r in llm.requests if r.get("stream") and "Round " in r["messages"][-1]["content"]]
    assert len(turns) == 3 and "Think of the juniors." not in turns[0]["messages"][-1]["content"]
    assert all("Think of the juniors." in t["messages"][-1]["content"] for t in turns[1:])


def test_debate_with_a_budget_stops_at_it_or_refuses_one_too_small(parley_env, llm):
    script_duel(llm)
    result = CliRunner().invoke(app, ["debate", "Remote work?", "--max-tokens", "10"])
    assert result.exit_code == 2 and "budget is too small" in result.output
    result = CliRunner().invoke(app, ["debate", "Remote work?", "--max-cost", "-1"])
    assert result.exit_code == 2 and "maxCost" in result.output
