"""Panel in the browser: panelists' answers fill side by side, a failure shows as one, the answer streams; the
decision rules (a vote's tally, a rank's reviews and Borda ranking, best-of-n's two readings, a decider of a
panelist's family noted); the model picker reads `GET /v1/models`; tools offered, the arbitrator's calls and the
panelists' proposals; a council chosen per question (panel, judge, criteria, depth), the map of where the answers
agree, adaptive depth's path and a degraded answer (issue 35)."""

from __future__ import annotations

import json
import re

import httpx
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from parley.core.limits import ADAPTIVE_AGREEMENT, MAX_CRITERIA_CHARS, MAX_PANEL_SIZE, MIN_PANEL_SIZE
from parley.llm.families import model_family
from parley.nodes.analysis import analyse
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
    llm.script(model="gpt-4o-mini", reply="Pick two of the three.", reasoning_tokens=1200, cached_tokens=3)
    page = studio.open("/panel")
    page.get_by_label("Question").fill("Explain the CAP theorem")
    page.get_by_role("button", name="Ask the panel").click()

    gpt, claude, gemini = (seat(page, m) for m in
                           ("openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-flash"))
    expect(gpt).to_have_attribute("data-status", "answered")
    expect(gpt).to_contain_text("Pick two of the three.")
    expect(gpt.locator(".seat-tokens")).to_contain_text("(3 cached · 1,200 reasoning)")  # what the seat paid for
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
    expect(figures.get_by_role("row", name="reasoningTokens")).to_contain_text("1200")
    expect(figures.get_by_role("row", name="cachedTokens")).to_contain_text("3")
    expect(figures.get_by_role("row", name="reasoningCostUsd")).to_contain_text("0.000720")  # 1200 x $0.60/M
    expect(panelists.nth(1).get_by_role("cell")).to_have_text(
        ["openai:gpt-4o-mini", "answered", re.compile(r"^\d+$"), "3", "1200", re.compile(r"\$"), re.compile("ms|s")])
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
    expect(page.get_by_role("region", name="Agreement").get_by_test_id("agreement-score")).to_have_text(
        percent(analyse([{"model": m, "answer": a} for m, a in zip(PANEL, ["Sixteen.", "Fourteen.", "Twelve."])],
                        QUESTION)["agreement"]))  # the map, from the stored events


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
    expect(picker.locator("optgroup[label='Routers'] option")).to_have_text(
        ["router/debate", "router/quality", "router/budget", "router/support"])
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


# --- a council per question (issue 35) ----------------------------------------------------------

COUNCIL = ["openai:gpt-5", "anthropic:claude-opus-4-5", "mistral:mistral-large-latest"]  # the last one typed in
JUDGE = "google:gemini-2.5-pro"
MONOLITH = "Should a team of five start with a monolith or microservices, considering hiring and budget?"
# Three answers with one contradiction (mistral against the others), one point all make, one two make, points only
# one makes, and a term of the question none mentions ("budget").
COUNCIL_ANSWERS = [
    "Start with a monolith. One codebase and one deploy keep a team of five fast.\n\n"
    "Automate tests and deploys from the first week.\n\nSplit a service out only when its load outgrows the monolith.",
    "Start with a monolith. Keep it modular, with clear boundaries between its parts.\n\n"
    "Automate tests and deploys from the first week.\n\nHiring is easier for one codebase than for ten services.",
    "Do not start with a monolith. Microservices let each developer deploy on their own from day one.\n\n"
    "Automate tests and deploys from the first week.\n\nSplit a service out only when its load outgrows the monolith.",
]
AGREED = "Start with a monolith. Split services out later, once the team and the load grow."
CRITERIA = "Weigh the cost of running it above elegance."


def name(model: str) -> str:
    return model.split(":", 1)[1]


def percent(share: float) -> str:
    return f"{round(share * 100)}%"


def choose_council(page, models=(), typed=(), judge=None, criteria=None, depth=None, shadow=False) -> None:
    """Open the council and choose: listed `models` ticked, `typed` ones added by hand, the judge, criteria, depth."""
    council = page.locator("details.council")
    if council.get_attribute("open") is None:
        council.locator("summary").click()
    panel = page.get_by_role("group", name="Panel")
    for model in models:
        panel.get_by_role("checkbox", name=model, exact=True).check()
    for model in typed:
        page.get_by_label("Another model").fill(model)
        page.get_by_role("button", name="Add to the panel").click()
    if judge is not None:
        page.get_by_label("Judge").fill(judge)
    if criteria is not None:
        page.get_by_label("Criteria").fill(criteria)
    if depth is not None:
        page.get_by_label("Depth").select_option(depth)
    if shadow:
        page.get_by_role("checkbox", name=re.compile("^Shadow")).check()


def test_a_chosen_council_reaches_the_api_and_the_map_shows_where_its_answers_agree(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    for model, reply in zip(COUNCIL, COUNCIL_ANSWERS):
        llm.script(model=name(model), reply=reply)
    llm.script(model=name(JUDGE), reply="Start with a modular monolith and automate its tests and deploys from the "
                                        "first week; split a service out when its load demands it.")
    page = studio.open("/panel")
    expect(page.get_by_test_id("council-summary")).to_have_text("the router's panel, the router's judge")
    form = page.get_by_role("form", name="Ask a panel")
    expect(form.get_by_role("note")).to_contain_text(f"The arbitrator {PANEL[0]} is of a panelist's family")
    page.get_by_label("Question").fill(MONOLITH)
    choose_council(page, models=COUNCIL[:2], typed=COUNCIL[2:], judge=JUDGE, criteria=CRITERIA)
    expect(form.get_by_role("note")).to_have_count(0)  # the router's arbitrator does not judge this question
    expect(page.get_by_label("Criteria")).to_have_attribute("maxlength", str(MAX_CRITERIA_CHARS))
    expect(page.get_by_role("group", name="Panel").get_by_role("checkbox", name=COUNCIL[2], exact=True)).to_be_checked()
    expect(page.get_by_test_id("council-summary")).to_have_text(f"3 models chosen, judge {JUDGE}, criteria")
    studio.shot("panel-council", full_page=True)
    ask(page, MONOLITH)
    expect(page.get_by_role("status")).to_have_text("Done.")

    # The chosen models answered and the chosen judge decided, weighing the criteria the panelists never saw.
    assert sorted(r["model"] for r in llm.requests) == sorted(name(m) for m in [*COUNCIL, JUDGE])
    judged = json.dumps(next(r for r in llm.requests if r["model"] == name(JUDGE))["messages"])
    assert CRITERIA in judged
    assert not any(CRITERIA in json.dumps(r["messages"]) for r in llm.requests if r["model"] != name(JUDGE))
    for model in COUNCIL:
        expect(seat(page, model)).to_have_attribute("data-status", "answered")
    expect(page.get_by_role("heading", name=f"Answer (arbitrator: {JUDGE})")).to_be_visible()

    # The map: the API's own figures (the same answers always give the same map).
    expected = analyse([{"model": m, "answer": a} for m, a in zip(COUNCIL, COUNCIL_ANSWERS)], MONOLITH)
    agreement = page.get_by_role("region", name="Agreement")
    expect(agreement.get_by_test_id("agreement-score")).to_have_text(percent(expected["agreement"]))
    pairs = agreement.get_by_role("list", name="Agreement of each pair").get_by_role("listitem")
    expect(pairs).to_have_count(3)
    for row, pair in zip(pairs.all(), expected["pairs"]):
        assert row.inner_text().split() == [pair["models"][0], "·", pair["models"][1], percent(pair["agreement"])]
    contradictions = agreement.get_by_role("region", name=re.compile("^Contradictions"))
    expect(contradictions.get_by_role("heading")).to_have_text("Contradictions 1")
    expect(contradictions).to_contain_text("On Start monolith:")
    expect(contradictions.get_by_role("listitem", name=f"{COUNCIL[0]}'s stance")).to_contain_text(
        "Start with a monolith.")
    expect(contradictions.get_by_role("listitem", name=f"{COUNCIL[2]}'s stance")).to_contain_text(
        "Do not start with a monolith.")
    expect(agreement.get_by_role("region", name=re.compile("^Consensus"))).to_contain_text(
        "Automate tests and deploys from the first week.")
    partial = agreement.get_by_role("region", name=re.compile("^Partial coverage"))
    expect(partial).to_contain_text(f"Made by {COUNCIL[0]}, {COUNCIL[2]}; left out by {COUNCIL[1]}.")
    insights = agreement.get_by_role("region", name=re.compile("^Unique insights"))
    expect(insights.get_by_role("term")).to_have_text(COUNCIL)  # grouped by model, in panel order
    expect(insights).to_contain_text("Hiring is easier for one codebase than for ten services.")
    blind = agreement.get_by_role("region", name=re.compile("^Blind spots"))
    expect(blind.get_by_role("listitem")).to_have_text(expected["blindSpots"])
    assert expected["blindSpots"] == ["budget"] and len(expected["contradictions"]) == 1
    results = Axe().run(page, options={"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21aa"]}})
    assert results.violations_count == 0, results.generate_report()
    agreement.evaluate("el => el.scrollIntoView({block: 'start'})")
    studio.shot("panel-council-map")
    page.set_viewport_size(PHONE)  # the map and the council's choices fit a phone, stances one under another
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


def test_adaptive_depth_shows_its_path_and_a_map_with_nothing_to_report_says_so(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    llm.script(model=name(COUNCIL[0]), reply=AGREED, times=1)
    llm.script(model=name(COUNCIL[1]), reply=AGREED, times=1)
    page = studio.open("/panel")
    choose_council(page, models=COUNCIL[:2], typed=COUNCIL[2:], depth="adaptive")
    ask(page, MONOLITH)
    expect(page.get_by_role("status")).to_have_text("Done.")
    expect(page.get_by_test_id("decided-by")).to_have_text(
        f"The first two seats agreed (adaptive depth): {COUNCIL[0]}'s answer is returned as written.")
    assert len(llm.requests) == 2  # the two seats; no arbitrator
    expect(page.get_by_test_id("adaptive-path")).to_contain_text(
        f"Adaptive: the first two seats agreed (100% ≥ {percent(ADAPTIVE_AGREEMENT)}), 2 of 3 asked.")
    expect(seat(page, COUNCIL[2])).to_have_attribute("data-status", "skipped")
    expect(seat(page, COUNCIL[2])).to_contain_text("not asked")
    assert name(COUNCIL[2]) not in [r["model"] for r in llm.requests]
    expect(page.get_by_test_id("adaptive-shadow")).to_have_count(0)
    agreement = page.get_by_role("region", name="Agreement")  # two equal answers: nothing to report but agreement
    expect(agreement.get_by_test_id("agreement-score")).to_have_text("100%")
    expect(agreement).to_contain_text("No contradictions found.")
    expect(agreement).to_contain_text("No point that some models make and others leave out.")
    expect(agreement).to_contain_text("No point that only one model makes.")
    expect(agreement.get_by_role("list", name="Agreement of each pair")).to_have_count(0)  # one pair: the score
    page.get_by_role("region", name="Panel run").evaluate("el => el.scrollIntoView({block: 'start'})")
    studio.shot("panel-adaptive")

    # First seats that disagree: the rest of the panel is asked.
    llm.reset()
    llm.script(model=name(COUNCIL[0]), reply=COUNCIL_ANSWERS[0], times=1)
    llm.script(model=name(COUNCIL[1]), reply=COUNCIL_ANSWERS[2], times=1)
    page.get_by_role("button", name="Ask the panel").click()
    expect(page.get_by_role("status")).to_have_text("Done.")
    first = analyse([{"model": m, "answer": a} for m, a in zip(COUNCIL, COUNCIL_ANSWERS[0::2])])["agreement"]
    assert first < ADAPTIVE_AGREEMENT
    expect(page.get_by_test_id("adaptive-path")).to_contain_text(
        f"Adaptive: escalated, the first two seats disagreed ({percent(first)} < {percent(ADAPTIVE_AGREEMENT)}); "
        "all 3 asked.")
    expect(seat(page, COUNCIL[2])).to_have_attribute("data-status", "answered")
    assert name(COUNCIL[2]) in [r["model"] for r in llm.requests]


def test_an_adaptive_router_offers_shadow_and_shows_its_verdict(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    budget = ["openai:gpt-5-nano", "google:gemini-2.5-flash-lite", "deepseek:deepseek-chat"]
    for model in budget:
        llm.script(model=name(model), reply=AGREED)
    llm.script(match=ARBITRATOR_MARK, reply=AGREED)
    page = studio.open("/panel")
    page.get_by_label("Model", exact=True).select_option("router/budget")
    expect(page.get_by_label("What router/budget does")).to_contain_text("adaptive: two seats first")
    choose_council(page)
    expect(page.get_by_label("Depth")).to_have_value("")
    expect(page.get_by_label("Depth").locator("option").first).to_have_text("The router's (adaptive)")
    page.get_by_role("checkbox", name=re.compile("^Shadow")).check()
    page.get_by_label("Depth").select_option("full")
    expect(page.get_by_role("checkbox", name=re.compile("^Shadow"))).to_have_count(0)  # shadow needs adaptive depth
    page.get_by_label("Depth").select_option("")
    ask(page, MONOLITH)
    expect(page.get_by_role("status")).to_have_text("Done.")
    path = page.get_by_test_id("adaptive-path")
    expect(path).to_contain_text(
        f"Adaptive: the first two seats agreed (100% ≥ {percent(ADAPTIVE_AGREEMENT)}); the shadow asks all 3 anyway")
    expect(path).to_contain_text(f"First seats: {budget[0]}, {budget[1]}.")
    expect(page.get_by_test_id("adaptive-shadow")).to_have_text(
        f"Shadow: stopping after {budget[0]} and {budget[1]} would have given the same answer (100% alike).")
    assert name(budget[2]) in [r["model"] for r in llm.requests]  # the shadow asked the third seat


def test_a_degraded_answer_says_the_judge_failed_and_lists_who_failed(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    for model, reply in zip(COUNCIL, COUNCIL_ANSWERS):
        llm.script(model=name(model), reply=reply)
    llm.script(model=name(JUDGE), status=500)
    llm.script(model=NAMES[0], status=500)  # the deployment's arbitrator, the next candidate
    page = studio.open("/panel")
    choose_council(page, models=COUNCIL[:2], typed=COUNCIL[2:], judge=JUDGE)
    ask(page, MONOLITH)
    expect(page.get_by_role("status")).to_have_text("Done.")
    notice = page.get_by_role("note", name="The judge failed: these are the panelists' answers, labelled")
    expect(notice).to_contain_text("Every arbitrator candidate failed")
    failed = notice.get_by_role("list", name="Models that failed").get_by_role("listitem")
    expect(failed).to_have_count(2)
    expect(failed.nth(0)).to_contain_text(f"{JUDGE} (arbitrator): server")
    expect(failed.nth(1)).to_contain_text(f"{PANEL[0]} (arbitrator): server")
    expect(page.get_by_role("heading", name="Answers, labelled", exact=True)).to_be_visible()
    answer = page.locator(".answer-text")
    for model, reply in zip(COUNCIL, COUNCIL_ANSWERS):
        expect(answer).to_contain_text(f"**{model}**")
        expect(answer).to_contain_text(reply.split("\n")[0])
    expect(page.get_by_test_id("decided-by")).to_have_text(
        "No one decided: every arbitrator candidate failed, so the panelists' answers come back labelled.")
    expect(page.get_by_role("region", name="Agreement").get_by_role("region", name=re.compile("^Contradictions"))
           ).to_contain_text("Do not start with a monolith.")  # the map comes with the labelled answers
    studio.shot("panel-degraded", full_page=True)


def test_a_council_the_api_refuses_shows_why_and_calls_no_model(studio, llm, sync_db):
    sync_db.workspaces.insert_one({"_id": "ws1", "creditUsd": 10.0})
    studio.expect_console_error("status of 400")  # the browser's note on each refusal
    page = studio.open("/panel")
    choose_council(page, models=COUNCIL[:1])
    ask(page, MONOLITH)
    expect(page.get_by_role("alert")).to_have_text(
        f"Choose at least {MIN_PANEL_SIZE} models for the panel, or none for the router's own.")
    typed = [f"acme:m{i}" for i in range(MAX_PANEL_SIZE)]
    choose_council(page, typed=typed)
    page.get_by_role("button", name="Ask the panel").click()
    expect(page.get_by_role("alert")).to_have_text(
        f"A panel seats at most {MAX_PANEL_SIZE} models; {MAX_PANEL_SIZE + 1} are chosen.")
    panel = page.get_by_role("group", name="Panel")
    for model in typed:
        panel.get_by_role("checkbox", name=model, exact=True).uncheck()

    choose_council(page, typed=["local:smollm2"])  # the embedded model: not configured on this server
    page.get_by_role("button", name="Ask the panel").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text(
        re.compile(r"^A model of the council cannot be called here\. models: 'local:smollm2'"))
    expect(alert).to_contain_text("(HTTP 400, model_unavailable)")

    panel.get_by_role("checkbox", name="local:smollm2", exact=True).uncheck()
    panel.get_by_role("checkbox", name="openai:gpt-5-nano", exact=True).check()  # two of one family
    expect(page.get_by_role("form", name="Ask a panel").get_by_role("note").filter(has_text="both of")).to_have_text(
        f"{COUNCIL[0]} and openai:gpt-5-nano are both of the {model_family(COUNCIL[0])} family: the API refuses such a "
        "panel unless two of one family may sit.")
    page.get_by_role("button", name="Ask the panel").click()
    expect(page.get_by_role("alert")).to_contain_text(re.compile(
        r"^The panel needs models of distinct families \(or let two of one family sit\)\. "
        r".*\(HTTP 400, too_few_families\)$"))
    assert llm.requests == []
