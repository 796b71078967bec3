"""Panel in the browser: panelists' answers fill side by side, a failure shows as one, the answer streams; the
decision rules (a vote's tally, a rank's reviews and Borda ranking, best-of-n's two readings, a decider of a
panelist's family noted); the model picker reads `GET /v1/models`; tools offered, the arbitrator's calls and the
panelists' proposals."""

from __future__ import annotations

import json
import re

import httpx
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from parley.nodes.arbitrate import ANSWER_LETTERS
from parley.nodes.prompts.answers import NUMBER_FORMAT
from parley.nodes.rank import review_orders
from tests.studio.conftest import PHONE

ARBITRATOR_MARK = "You are the arbitrator of a panel"
# The deployment's panel on the scripted server; its arbitrator (and judge), gpt-4o-mini, is one of them.
PANEL = ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-flash"]
NAMES = [model.split(":", 1)[1] for model in PANEL]
QUESTION = "How many legs do two spiders have?"
NOT_OUTSIDE = "No configured {role} candidate is of a family outside the panel's"


def seat(page, model: str):
    return page.get_by_role("list", name="Panelists").get_by_role("listitem").filter(
        has=page.get_by_role("heading", name=model, exact=True))


def answer_panel(llm, *replies: str) -> None:
    for name, reply in zip(NAMES, replies):
        llm.script(model=name, reply=reply, times=1)


def ask(page, question: str = QUESTION, **choices: str) -> None:
    """Fill the form (`choices`: a select's label and the option's value) and ask."""
    page.get_by_label("Question").fill(question)
    for label, value in choices.items():
        page.get_by_label(label.replace("_", " "), exact=True).select_option(value)
    page.get_by_role("button", name="Ask the panel").click()


def cells(row) -> list[str]:
    return [c.strip() for c in row.get_by_role("cell").all_inner_texts()]


def test_panel_columns_fill_as_answers_arrive_then_the_answer_streams(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(match=ARBITRATOR_MARK, reply="Choose consistency for money, availability for feeds.",
               hold="arbitrator", pause_after=2)
    llm.script(model="claude-sonnet-4-5", status=401)
    llm.script(model="gemini-2.5-flash", reply="Partitions will happen; plan for them.", hold="gemini")
    llm.script(model="gpt-4o-mini", reply="Pick two of the three.")
    page = studio.open("/panel")
    page.get_by_label("Question").fill("Explain the CAP theorem")
    page.get_by_role("button", name="Ask the panel").click()

    gpt, claude, gemini = (seat(page, m) for m in
                           ("openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-flash"))
    expect(gpt).to_have_attribute("data-status", "answered")
    expect(gpt).to_contain_text("Pick two of the three.")
    expect(claude).to_have_attribute("data-status", "failed")
    expect(claude.locator(".error")).to_contain_text("auth")
    expect(gemini).to_have_attribute("data-status", "waiting")
    expect(page.get_by_role("status")).to_have_text("2 of 3 panelists have answered")
    studio.shot("panel-filling")

    llm.release("gemini")
    expect(gemini).to_have_attribute("data-status", "answered")
    expect(gemini).to_contain_text("Partitions will happen; plan for them.")
    answer = page.locator(".answer-text")
    expect(answer).to_have_text("Choose consistency ")  # the arbitrator's first tokens, before the rest
    expect(page.get_by_role("heading", name="Answer (arbitrator: openai:gpt-4o-mini)")).to_be_visible()
    llm.release("arbitrator")
    expect(answer).to_have_text("Choose consistency for money, availability for feeds.")
    expect(page.get_by_role("status")).to_have_text("Done.")
    figures = page.get_by_role("region", name="Figures (_meta)")
    expect(figures.get_by_role("row", name="routerMode")).to_contain_text("debate")
    expect(figures.get_by_role("row", name="modelUsed")).to_contain_text("openai:gpt-4o-mini")
    panelists = figures.get_by_role("table").filter(has_text="Panelists").get_by_role("row")
    expect(panelists).to_have_count(4)
    expect(panelists.nth(2)).to_contain_text("failed")
    decision = page.get_by_role("region", name="Decision: Synthesis")
    expect(decision.get_by_test_id("decided-by")).to_have_text(
        "The arbitrator openai:gpt-4o-mini wrote the answer from every panelist's.")
    expect(decision.get_by_role("note", name="Not an outside family")).to_contain_text(
        NOT_OUTSIDE.format(role="arbitrator"))
    for box in (gpt, claude, gemini):  # side by side at 1280 px: one row of three columns
        assert box.bounding_box()["y"] == gpt.bounding_box()["y"]
    studio.shot("panel", full_page=True)


def test_panel_mode_returns_every_answer_labelled(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(model="gpt-4o-mini", reply="Pick two.")
    llm.script(model="claude-sonnet-4-5", reply="Trade-offs.")
    llm.script(model="gemini-2.5-flash", reply="Partitions.")
    page = studio.open("/panel")
    page.get_by_label("Question").fill("Explain the CAP theorem")
    page.get_by_label("Panel: every answer, labelled").check()
    page.get_by_role("button", name="Ask the panel").click()
    expect(page.get_by_role("status")).to_have_text("Done.")
    answer = page.locator(".answer-text")
    for text in ("openai:gpt-4o-mini", "Pick two.", "anthropic:claude-sonnet-4-5", "Trade-offs.", "Partitions."):
        expect(answer).to_contain_text(text)
    figures = page.get_by_role("region", name="Figures (_meta)")
    expect(figures.get_by_role("row", name="routerMode")).to_contain_text("panel")
    expect(figures.get_by_role("table").filter(has_text="Panelists").get_by_role("row")).to_have_count(4)


def test_a_vote_shows_its_tally_and_returns_the_majoritys_answer(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    answer_panel(llm, "8 + 8.\nAnswer: 16", "Answer: 16", "Seven each.\nAnswer: 14")
    page = studio.open("/panel")
    ask(page, Decision_rule="vote", Answer_rule="number")
    expect(page.get_by_role("status")).to_have_text("Done.")
    expect(page.locator(".answer-text")).to_contain_text(re.compile(r"^8 \+ 8\.\s+Answer: 16\s+---\s+\*\*Majority vote"))
    decision = page.get_by_role("region", name="Decision: Majority vote")
    expect(decision.get_by_test_id("decided-by")).to_have_text(
        "The majority chose openai:gpt-4o-mini's answer (16); it is returned as written.")
    tally = decision.get_by_role("table", name="Tally (answers read as number)").get_by_role("row")
    expect(tally).to_have_count(3)
    assert cells(tally.nth(1)) == ["16", "2", f"{PANEL[0]}, {PANEL[1]}"]
    assert cells(tally.nth(2)) == ["14", "1", PANEL[2]]
    expect(decision.get_by_role("note")).to_have_count(0)  # the majority decided: no arbitrator, no judge
    figures = page.get_by_role("region", name="Figures (_meta)")
    expect(figures.get_by_role("row", name="rule")).to_contain_text("vote")
    # The panelists were asked for a number, and no arbitrator was needed.
    asked = [r for r in llm.requests if r["model"] in NAMES]
    assert len(asked) == 3 and all(NUMBER_FORMAT in str(r["messages"]) for r in asked)
    assert not any(ARBITRATOR_MARK in str(r["messages"]) for r in llm.requests)
    results = Axe().run(page, options={"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21aa"]}})
    assert results.violations_count == 0, results.generate_report()
    studio.shot("panel-vote", full_page=True)


def test_a_rank_shows_each_review_as_it_arrives_then_the_borda_ranking(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    orders = review_orders(3, 5)
    for reviewer, order in enumerate(orders):  # gpt's answer is the others' first; gpt puts gemini's first
        best = order.index(0) if reviewer != 0 else order.index(2)
        llm.script(model=NAMES[reviewer], match="Rank these answers", hold="gemini" if reviewer == 2 else None,
                   json={"ranking": [ANSWER_LETTERS[best], ANSWER_LETTERS[1 - best]], "reason": f"Sound, {reviewer}."})
    answer_panel(llm, "Sixteen.", "Fourteen.", "Twelve.")
    page = studio.open("/panel")
    page.get_by_label("Decision rule").select_option("rank")
    page.get_by_label("Seed").fill("5")
    ask(page)

    reviews = page.get_by_role("list", name="Reviews").get_by_role("listitem")
    expect(page.get_by_role("status")).to_have_text("2 of 3 reviewers have ranked the others' answers")
    expect(reviews).to_have_count(2)
    decision = page.get_by_role("region", name="Decision: Ranking (Borda count)")
    expect(decision.get_by_test_id("decided-by")).to_have_text("Deciding…")
    by_gpt = page.get_by_role("listitem", name=f"Review by {PANEL[0]}")
    expect(by_gpt.get_by_test_id("ranking")).to_have_text(f"{PANEL[2]} > {PANEL[1]}")
    expect(by_gpt).to_contain_text(f"Read in the order {', '.join(PANEL[i] for i in orders[0])}.")
    expect(by_gpt).to_contain_text("Sound, 0.")
    llm.release("gemini")

    expect(page.get_by_role("status")).to_have_text("Done.")
    expect(page.locator(".answer-text")).to_contain_text(re.compile(r"^Sixteen\.\s+---\s+\*\*Ranking"))
    expect(decision.get_by_test_id("decided-by")).to_have_text(
        "The Borda count chose openai:gpt-4o-mini's answer; it is returned as written.")
    ranking = decision.get_by_role("table", name="Borda ranking (orders seeded with 5)").get_by_role("row")
    expect(ranking).to_have_count(4)
    assert [cells(ranking.nth(i)) for i in (1, 2, 3)] == [
        ["1", PANEL[0], "2", "2", "1.00"], ["2", PANEL[2], "1", "2", "0.50"], ["3", PANEL[1], "0", "2", "0.00"]]
    expect(reviews).to_have_count(3)
    expect(page.get_by_role("listitem", name=f"Review by {PANEL[2]}").get_by_test_id("ranking")).to_have_text(
        f"{PANEL[0]} > {PANEL[1]}")
    # Each reviewer read the others' answers, never its own.
    for reviewer, name in enumerate(NAMES):
        asked = next(r for r in llm.requests if r["model"] == name and "Rank these answers" in str(r["messages"]))
        others = ["Sixteen.", "Fourteen.", "Twelve."]
        assert others.pop(reviewer) not in str(asked["messages"]) and all(o in str(asked["messages"]) for o in others)
    studio.shot("panel-rank", full_page=True)

    # Replayed from History, the stored events tell the same decision.
    page.get_by_role("link", name="History").click()
    page.get_by_label("Kind").select_option("panel")
    page.get_by_role("link", name=QUESTION).click()
    replayed = page.get_by_role("region", name="Decision: Ranking (Borda count)")
    expect(replayed.get_by_test_id("decided-by")).to_have_text(
        "The Borda count chose openai:gpt-4o-mini's answer; it is returned as written.")
    expect(replayed.get_by_role("table", name="Borda ranking (orders seeded with 5)").get_by_role("row")).to_have_count(4)
    expect(replayed.get_by_role("list", name="Reviews").get_by_role("listitem")).to_have_count(3)


def test_best_of_n_shows_both_readings_and_notes_a_judge_of_a_panelists_family_on_a_phone(make_studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(model=NAMES[0], match="Which answer is the best", json={"best": "B", "reason": "Answer B counts legs."})
    answer_panel(llm, "Sixteen.", "Two spiders have sixteen legs in all.", "Twelve.")
    studio = make_studio(viewport=PHONE)
    page = studio.open("/panel")
    ask(page, Decision_rule="best-of-n")
    expect(page.get_by_role("status")).to_have_text("Done.")
    decision = page.get_by_role("region", name="Decision: Best of n")
    expect(decision.get_by_test_id("decided-by")).to_have_text(
        f"The judge {PANEL[0]} chose {PANEL[1]}'s answer in both readings; it is returned as written.")
    expect(decision.get_by_role("note", name="Not an outside family")).to_contain_text(NOT_OUTSIDE.format(role="judge"))
    verdicts = decision.get_by_role("table", name="Verdicts in two reading orders")
    # B is claude's answer in both orders (A B C, then C B A); the reason names it rather than its letter.
    for reading in ("Panel order", "Reversed"):
        row = verdicts.get_by_role("row", name=reading)
        assert cells(row) == [PANEL[0], PANEL[1], f"{PANEL[1]} counts legs."]
    expect(page.locator(".answer-text")).to_contain_text("Two spiders have sixteen legs in all.")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    for box in (decision.bounding_box(), page.get_by_role("form", name="Ask a panel").bounding_box()):
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    studio.shot("panel-phone", full_page=True)


def test_the_model_picker_lists_v1_models_for_a_key_that_cannot_list_routers(make_studio, make_key, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    studio = make_studio(scopes=("chat",))  # GET /v1/routers needs admin; /v1/models lists them to a chat key
    admin = make_key(("admin",))
    created = httpx.post(studio.url + "/v1/routers", headers={"Authorization": f"Bearer {admin}"}, json={
        "id": "support", "models": PANEL, "debate": True, "arbitrator": "meta:llama-4-maverick", "rule": "vote",
        "answerRule": "number"})
    assert created.status_code == 201, created.text
    page = studio.open("/panel")
    picker = page.get_by_label("Model", exact=True)
    expect(picker.locator("optgroup[label='Routers'] option")).to_have_text(["router/debate", "router/support"])
    expect(picker.locator("optgroup[label^='Self-MoA'] option")).to_have_text(["self-moa/openai:gpt-4o-mini"])
    plain = picker.locator("optgroup[label='Models'] option")
    for model in (*PANEL, "meta:llama-4-maverick"):
        expect(plain.filter(has_text=re.compile(f"^{re.escape(model)}$"))).to_have_count(1)

    summary = page.get_by_label("What router/debate does")  # the preset, chosen first
    expect(summary).to_contain_text(", ".join(PANEL))
    expect(summary).to_contain_text("synthesis")
    expect(page.get_by_role("form", name="Ask a panel").get_by_role("note")).to_contain_text(
        f"The arbitrator {PANEL[0]} is of a panelist's family")

    picker.select_option("router/support")
    summary = page.get_by_label("What router/support does")
    expect(summary).to_contain_text("meta:llama-4-maverick")
    expect(summary).to_contain_text("vote (answers read as number)")
    expect(page.get_by_role("form", name="Ask a panel").get_by_role("note")).to_have_count(0)
    expect(page.get_by_label("Decision rule")).to_have_value("vote")  # the router's rule, to keep or change
    expect(page.get_by_label("Answer rule")).to_have_value("number")
    studio.shot("panel-models")
    answer_panel(llm, "Answer: 16", "Answer: 16", "Answer: 14")
    ask(page)
    decision = page.get_by_role("region", name="Decision: Majority vote")
    expect(decision.get_by_test_id("decided-by")).to_contain_text(f"The majority chose {PANEL[0]}'s answer (16)")

    picker.select_option("google:gemini-2.5-flash")
    expect(page.get_by_text("One model of the gemini-2-5 family answers: no panel and no rule.")).to_be_visible()
    expect(page.get_by_role("radiogroup", name="Mode")).to_have_count(0)
    expect(page.get_by_label("Decision rule")).to_have_count(0)
    llm.script(model="gemini-2.5-flash", reply="Sixteen, from one model.")
    ask(page)
    expect(page.locator(".answer-text")).to_have_text("Sixteen, from one model.")
    expect(page.get_by_role("status")).to_have_text("Done.")
    figures = page.get_by_role("region", name="Figures (_meta)")
    expect(figures.get_by_role("row", name="routerMode")).to_contain_text("direct")
    expect(page.get_by_role("region", name=re.compile("^Decision"))).to_have_count(0)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_a_debate_offered_tools_shows_the_arbitrators_call_and_the_panelists_proposals(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(model=NAMES[0], with_tools=True,  # the arbitrator (gpt-4o-mini) is offered the tools; panelists not
               tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_paris"}])
    answer_panel(llm, "Call get_weather for Paris first.", "Check Paris's weather with the tool.", "Look it up.")
    page = studio.open("/panel")
    page.get_by_label("Tools (JSON)").fill("get_weather")
    ask(page, "Should I take an umbrella in Paris today?")
    expect(page.get_by_role("alert")).to_have_text("Tools must be a JSON list of OpenAI tool definitions.")
    assert not llm.requests

    page.get_by_label("Tools (JSON)").fill(json.dumps([WEATHER]))
    page.get_by_role("button", name="Ask the panel").click()
    expect(page.get_by_role("status")).to_have_text("Done.")
    call = page.get_by_role("region", name="Tool calls").get_by_role("listitem", name="Call of get_weather")
    expect(call).to_contain_text("call_paris")
    arguments = call.get_by_label("Arguments of get_weather")
    expect(arguments).not_to_be_empty()
    assert json.loads(arguments.inner_text()) == {"city": "Paris"}
    table = page.get_by_role("region", name="Figures (_meta)").get_by_role("table").filter(has_text="Panelists")
    expect(table.get_by_role("columnheader", name="Proposal")).to_be_visible()
    proposals = [cells(table.get_by_role("row").nth(i))[-1] for i in (1, 2, 3)]
    assert proposals == ["Call get_weather for Paris first.", "Check Paris's weather with the tool.", "Look it up."]
    [arbitration] = [r for r in llm.requests if r.get("tools")]
    assert arbitration["model"] == NAMES[0] and arbitration["tools"] == [WEATHER]
    studio.shot("panel-tools", full_page=True)
