"""Round table in the browser: agents made by typing, a question streamed live, rounds, stances, chart, synthesis."""

from __future__ import annotations

from playwright.sync_api import expect

SYNTHESIS = {
    "summary": "The table favours Lyon once a sales lead is hired.",
    "debateEvolution": "Marc held his ground; Claire stayed cautious.",
    "devilsAdvocateMainAttack": "A second office doubles fixed costs before the pipeline is proven.",
    "consensus": ["The Lyon market is real"],
    "riskPoints": ["Fixed-cost exposure"],
    "recommendedAction": "Hire the Lyon sales lead first; revisit the lease in six months.",
    "conditions": ["Sales lead hired"],
    "confidenceLevel": "medium",
    "urgency": "low",
}


def stance(value: str, point: str) -> dict:
    return {"stance": value, "confidence": 0.9, "keyPoint": point}


def script_disagreement(llm, *, hold_synthesis: bool = False) -> None:
    """Claire for, Marc against, every round: the table never converges and debates all three rounds.

    With `hold_synthesis`, the synthesis waits at the gate "synthesis" until the test releases it."""
    llm.script(match="Record Claire's stance", json=stance("for", "The cash covers the lease."))
    llm.script(match="Record Marc's stance", json=stance("against", "The pipeline is not proven."))
    llm.script(match="Record Devil's Advocate's stance", json=stance("against", "Costs double."))
    llm.script(match="You are the synthesizer of a round-table debate", json=SYNTHESIS,
               hold="synthesis" if hold_synthesis else None)


def create_agent(page, name: str, role: str, persona: str) -> None:
    form = page.get_by_role("form", name="New agent")
    form.get_by_label("Name").fill(name)
    form.get_by_label("Role").fill(role)
    form.get_by_label("Persona").fill(persona)
    form.get_by_role("button", name="Create agent").click()
    expect(page.locator(".agents > li").filter(has_text=name)).to_be_visible()


def test_a_question_streams_by_round_with_stances_chart_and_synthesis(studio, llm):
    script_disagreement(llm, hold_synthesis=True)
    page = studio.open("/roundtable")
    create_agent(page, "Claire", "Finance", "Cash first. Quote numbers.")
    create_agent(page, "Marc", "Sales", "Growth first.")
    studio.shot("roundtable-agents")
    page.get_by_label("New conversation title").fill("Lyon office")
    page.get_by_role("button", name="Create conversation").click()
    expect(page.get_by_role("heading", name="Lyon office")).to_be_visible()

    page.get_by_label("Question for the table").fill("Should we open a second office in Lyon?")
    page.get_by_role("button", name="Ask the table").click()
    llm.wait_held("synthesis")  # every round is done and the synthesis is held: the run is surely live
    expect(page.get_by_role("status").filter(has_text="Round")).to_be_visible()
    llm.release("synthesis")
    synthesis = page.get_by_role("region", name="Synthesis")
    expect(synthesis).to_contain_text("Hire the Lyon sales lead first")
    expect(page.get_by_role("button", name="Ask the table")).to_be_visible()

    rounds = page.locator(".rt-round")
    expect(rounds).to_have_count(4)  # round 0 and three debate rounds
    debate_rounds = page.locator(".rt-round:not([data-round='0'])")
    points = page.locator(".convergence-point")
    expect(points).to_have_count(debate_rounds.count())
    assert [points.nth(i).get_attribute("data-round") for i in range(points.count())] == ["1", "2", "3"]
    stored = studio.api().get(page.url.replace(studio.url, "").replace("/roundtable/", "/v1/conversations/")).json()
    scores = [d["convergenceScore"] for d in stored["conversation"]["debates"] if d["roundNumber"] >= 1]
    assert [float(points.nth(i).get_attribute("data-score")) for i in range(3)] == scores
    expect(page.locator(".threshold-line")).to_have_count(1)

    claire = page.locator(".rt-round[data-round='1'] .rt-turn").filter(has_text="Claire")
    expect(claire.locator(".badge-good")).to_have_text("for · 90%")
    marc = page.locator(".rt-round[data-round='1'] .rt-turn").filter(has_text="Marc")
    expect(marc.locator(".badge-bad")).to_have_text("against · 90%")
    expect(page.locator(".rt-devil").first).to_contain_text("Devil's Advocate")
    for finding in ("Fixed-cost exposure", "Sales lead hired", "doubles fixed costs"):
        expect(synthesis.locator(".watch").filter(has_text=finding)).to_be_visible()
    studio.shot("roundtable-conversation", full_page=True)


def test_agents_are_edited_given_documents_and_forget_memories(studio, llm):
    page = studio.open("/roundtable")
    create_agent(page, "Claire", "Finance", "Cash first.")
    row = page.locator(".agents > li").filter(has_text="Claire")
    row.get_by_role("button", name="Edit").click()
    row.get_by_role("form", name="Edit Claire").get_by_label("Role").fill("Chief financial officer")
    row.get_by_role("button", name="Save").click()
    expect(row).to_contain_text("Chief financial officer")

    row.get_by_role("button", name="Documents").click()
    docs = row.get_by_role("form", name="Add a document")
    docs.get_by_label("Title").fill("Lyon lease")
    docs.get_by_label("Text").fill("The Part-Dieu lease costs 42,000 EUR a year, three-year minimum.")
    docs.get_by_role("button", name="Add document").click()
    expect(row).to_contain_text("Lyon lease")
    expect(row).to_contain_text("64 characters")

    with studio.api() as api:
        agent = next(a for a in api.get("/v1/agents").json()["agents"] if a["name"] == "Claire")
        assert agent["role"] == "Chief financial officer"
    row.get_by_role("button", name="Memories").click()
    expect(row).to_contain_text("Nothing remembered yet.")


def test_a_table_that_converges_early_says_one_round_and_charts_only_it(studio, llm):
    # Claire and Marc agree, too unsure in round 0 to skip the debate: the table converges after its first round.
    agreed = {"stance": "for", "confidence": 0.6}
    llm.script(match="Record Claire's stance", json={**agreed, "keyPoint": "The cash covers the lease."})
    llm.script(match="Record Marc's stance", json={**agreed, "keyPoint": "The pipeline will follow."})
    llm.script(match="Record Devil's Advocate's stance", json=stance("against", "Costs double."))
    llm.script(match="You are the synthesizer of a round-table debate", json=SYNTHESIS)
    page = studio.open("/roundtable")
    create_agent(page, "Claire", "Finance", "Cash first.")
    create_agent(page, "Marc", "Sales", "Growth first.")
    page.get_by_label("New conversation title").fill("Lyon, agreed")
    page.get_by_role("button", name="Create conversation").click()
    page.get_by_label("Question for the table").fill("Should we open a second office in Lyon?")
    page.get_by_role("button", name="Ask the table").click()

    expect(page.get_by_role("region", name="Synthesis")).to_contain_text("Hire the Lyon sales lead first")
    expect(page.locator(".rt-round")).to_have_count(2)  # round 0 and the one debate round
    expect(page.locator(".convergence-point")).to_have_count(1)
    ticks = page.locator(".convergence-chart .visx-axis-bottom .visx-axis-tick")
    expect(ticks).to_have_text(["round 1"])  # the round the table ran, and none it never had

    # Its run, replayed from History, says how it ended.
    page.get_by_role("link", name="History").click()
    page.get_by_role("link", name="Should we open a second office in Lyon?").click()
    expect(page.get_by_role("status").filter(has_text="Done after")).to_have_text("Done after 1 debate round.")
    expect(ticks).to_have_text(["round 1"])
