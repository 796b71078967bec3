"""`parley debate`: the duel in the terminal, run in-process against the scripted model."""

from __future__ import annotations

from typer.testing import CliRunner

from cli.main import app
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
    assert "the model call failed" in result.output
