"""Steering in the browser (docs/steering.md): pause a duel, guide it, let it continue, end it; a round table asked to
wait after every round, guided between rounds, with a budget."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.studio.test_duel import fill_duel_form
from tests.studio.test_roundtable import create_agent, script_disagreement
from tests.support.duel import USER_REPLY, script_duel

GUIDANCE = "Think of the juniors who learn by watching."


def test_a_duel_is_paused_guided_continued_and_ended_from_the_viewer(studio, llm):
    # Ada's turns in rounds 1, 2 and 3 each hold at a gate until the test has clicked what it means to.
    for round_number in (1, 2, 3):
        llm.script(match=f"Round {round_number} of 4.", reply=USER_REPLY, hold=f"ada-{round_number}", times=1)
    script_duel(llm)
    page = studio.open("/duel")
    fill_duel_form(page, rounds=4)
    page.get_by_label("Budget (USD)").fill("5")
    page.get_by_role("button", name="Start the duel").click()
    steer = page.get_by_role("region", name="Steer the debate")

    llm.wait_held("ada-1")  # Ada's first turn is under way: pause after it
    steer.get_by_role("button", name="Pause").click()
    expect(steer).to_contain_text("Pausing after this turn")
    llm.release("ada-1")
    expect(page.get_by_role("status")).to_have_text("Waiting for you after turn 1.")
    expect(steer.get_by_role("button", name="Continue")).to_be_visible()
    studio.shot("duel-waiting")

    steer.get_by_label("Message to the debate").fill(GUIDANCE)
    steer.get_by_role("button", name="Guide").click()
    human = page.locator(".turn-human")
    expect(human).to_have_count(1)
    expect(human).to_contain_text(GUIDANCE)

    llm.wait_held("ada-2")  # the duel went on to round 2: pause again, then let it continue
    steer.get_by_role("button", name="Pause").click()
    expect(steer).to_contain_text("Pausing after this turn")  # stored: the boundary after this turn will see it
    llm.release("ada-2")
    expect(page.get_by_role("status")).to_have_text("Waiting for you after turn 3.")
    steer.get_by_role("button", name="Continue").click()

    llm.wait_held("ada-3")  # round 3 under way: end the debate after this turn
    steer.get_by_role("button", name="End").click()
    expect(steer).to_contain_text("Going to the verdict")
    llm.release("ada-3")
    expect(page.get_by_test_id("winner")).to_be_visible()
    expect(page.get_by_role("status")).to_contain_text("Ended early by you.")
    expect(page.get_by_role("region", name="Steer the debate")).to_have_count(0)
    assert page.locator(".turn").count() == 6  # five turns and the guidance: round 3's reply never came

    debate_id = page.get_by_role("link", name=re.compile(r"^debate_")).inner_text()
    with studio.api() as api:
        run = api.get(f"/v1/runs/{debate_id}").json()
        assert run["status"] == "completed" and run["stoppedBy"] == "user" and run["budget"]["limits"] == {"maxCost": 5}
        messages = api.get(f"/api/debate/{debate_id}").json()["messages"]
    assert [m["role"] for m in messages] == ["user", "human", "opponent", "user", "opponent", "user"]
    turns = [r for r in llm.requests if r.get("stream") and "Round " in r["messages"][-1]["content"]]
    assert GUIDANCE not in turns[0]["messages"][-1]["content"]
    assert all(GUIDANCE in t["messages"][-1]["content"] for t in turns[1:])


def test_a_round_table_waits_after_each_round_and_takes_guidance(studio, llm):
    script_disagreement(llm)
    page = studio.open("/roundtable")
    create_agent(page, "Claire", "Finance", "Cash first.")
    create_agent(page, "Marc", "Sales", "Growth first.")
    page.get_by_label("New conversation title").fill("Lyon office")
    page.get_by_role("button", name="Create conversation").click()
    page.get_by_label("Question for the table").fill("Open in Lyon now?")
    page.get_by_label("Budget (USD)").fill("2")
    page.get_by_label("Wait for me after every round").check()
    page.get_by_role("button", name="Ask the table").click()

    steer = page.get_by_role("region", name="Steer the debate")
    expect(page.get_by_role("status").filter(has_text="Waiting for you after round 0.")).to_be_visible()
    steer.get_by_label("Message to the debate").fill("The lease offer expires in May.")
    steer.get_by_role("button", name="Guide").click()
    expect(page.get_by_role("status").filter(has_text="Waiting for you after round 1.")).to_be_visible()
    guidance = page.get_by_role("list", name="Your messages to the table")
    expect(guidance).to_contain_text("The lease offer expires in May.")
    steer.get_by_role("button", name="End").click()
    synthesis = page.get_by_role("region", name="Synthesis")
    expect(synthesis).to_be_visible()
    expect(page.get_by_role("button", name="Ask the table")).to_be_visible()
    # The stored exchange (shown once the run ends) keeps the guidance before round 1, and why it ended.
    expect(page.get_by_role("list", name="Your messages to the table")).to_contain_text("The lease offer expires")
    expect(page.locator(".exchange").last).to_contain_text("Ended early by you.")
    expect(page.locator(".rt-round")).to_have_count(2)
    studio.shot("roundtable-steered", full_page=True)
