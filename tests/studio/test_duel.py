"""Duel in the browser: start one from the form, watch it stream, read the verdict; resume a dropped stream."""

from __future__ import annotations

import re

from playwright.sync_api import Request, Route, expect

from parley.core.limits import DEFAULT_DUEL_ROUNDS, MAX_DUEL_ROUNDS, MIN_DUEL_ROUNDS
from tests.studio.conftest import PHONE
from tests.support.duel import OPPONENT, OPPONENT_REPLY, USER_REPLY, script_duel


def fill_duel_form(page, *, topic="Should remote work be the default?", rounds=2) -> None:
    page.get_by_label("Topic").fill(topic)
    page.get_by_label("Persona name").fill("Ada")
    page.get_by_label("Bio").fill("Engineer who shipped from four countries")
    page.get_by_label("Traits").fill("rational, curious")
    page.get_by_label("Interests").fill("remote teams")
    page.get_by_label("Rounds").fill(str(rounds))


def test_the_form_offers_the_rounds_the_api_takes_and_defaults_to_its_default(studio):
    # studio/src/api/limits.ts keeps these; a request that names no rounds gets DEFAULT_DUEL_ROUNDS from the API
    # and the CLI, so the form starts there too.
    page = studio.open("/duel")
    rounds = page.get_by_label("Rounds")
    expect(rounds).to_have_value(str(DEFAULT_DUEL_ROUNDS))
    expect(rounds).to_have_attribute("min", str(MIN_DUEL_ROUNDS))
    expect(rounds).to_have_attribute("max", str(MAX_DUEL_ROUNDS))
    schema = studio.api().get("/openapi.json").json()["components"]["schemas"]["DebateBody"]["properties"]["rounds"]
    bounds = next(option for option in schema["anyOf"] if option.get("type") == "integer")
    assert (bounds["minimum"], bounds["maximum"]) == (MIN_DUEL_ROUNDS, MAX_DUEL_ROUNDS)


def test_tokens_appear_before_the_debate_ends_then_the_verdict(studio, llm):
    # The user's first turn stops after three chunks until the test lets it go on.
    llm.script(match="You are Ada,", reply=USER_REPLY, hold="first-turn", pause_after=3, times=1)
    script_duel(llm)
    page = studio.open("/duel")
    fill_duel_form(page)
    page.get_by_role("button", name="Start the duel").click()

    first = page.locator(".turn").first
    expect(first).to_contain_text("Remote work widens")
    expect(first).to_have_attribute("aria-busy", "true")
    expect(page.get_by_role("status")).to_contain_text("Round 1 of 2: Ada is speaking")
    expect(page.get_by_test_id("winner")).to_have_count(0)
    assert USER_REPLY not in first.inner_text()  # only the chunks before the gate have arrived
    first.scroll_into_view_if_needed()
    studio.shot("duel-streaming")

    llm.release("first-turn")
    expect(page.get_by_test_id("winner")).to_have_text("Ada")
    expect(page.get_by_role("status")).to_contain_text("Finished after 2 rounds")
    texts = page.locator(".turn-text").all_inner_texts()
    assert texts == [USER_REPLY, OPPONENT_REPLY, USER_REPLY, OPPONENT_REPLY]  # chunks add up to each message
    verdict = page.get_by_role("region", name="Verdict")
    expect(verdict).to_contain_text("Remote work works where teams build deliberate rituals.")
    expect(verdict).to_contain_text("Pilot hybrid schedules")
    expect(verdict).to_contain_text("Whether output holds up")
    judges = verdict.get_by_role("row")
    expect(judges).to_have_count(3)  # the header and both judges
    expect(judges.nth(1)).to_contain_text("as debated")
    expect(judges.nth(2)).to_contain_text("swapped")
    expect(page.get_by_role("article", name="Opponent")).to_contain_text(OPPONENT["name"])
    studio.shot("duel", full_page=True)


def test_a_running_duel_is_cancelled_from_the_viewer(studio, llm):
    llm.script(match="You are Ada,", reply=USER_REPLY, hold="first-turn", pause_after=3, times=1)
    script_duel(llm)
    page = studio.open("/duel")
    fill_duel_form(page)
    page.get_by_role("button", name="Start the duel").click()
    expect(page.locator(".turn").first).to_contain_text("Remote work widens")
    page.get_by_role("button", name="Cancel the debate").click()
    expect(page.get_by_role("status")).to_have_text("Cancelled.")
    expect(page.get_by_role("button", name="Start the duel")).to_be_enabled()
    debate_id = page.get_by_role("link", name=re.compile(r"^debate_")).inner_text()
    with studio.api() as api:
        assert api.get(f"/v1/runs/{debate_id}").json()["status"] == "cancelled"


def test_a_dropped_stream_resumes_after_the_last_event_without_repeating_text(studio, llm):
    script_duel(llm)
    page = studio.open("/duel")
    cut: dict = {}

    def drop_after_first_message(route: Route) -> None:
        # The real answer, cut after the first `message` event: the connection "drops" mid-debate.
        response = route.fetch()
        body = response.text()
        end = re.compile(r"\r?\n\r?\n").search(body, body.index("event: message")).end()
        cut["last"] = int(re.findall(r"^id: (\d+)\r?$", body[:end], re.M)[-1])
        headers = {k: v for k, v in response.headers.items() if k.lower() in ("content-type", "x-debate-id")}
        route.fulfill(status=200, headers=headers, body=body[:end])

    resumed: list[Request] = []
    page.route("**/api/debate", drop_after_first_message)
    page.on("request", lambda r: resumed.append(r) if r.url.endswith("/events") else None)
    fill_duel_form(page)
    page.get_by_role("button", name="Start the duel").click()

    expect(page.get_by_test_id("winner")).to_have_text("Ada")
    assert [r.headers.get("last-event-id") for r in resumed] == [str(cut["last"])]
    texts = page.locator(".turn-text").all_inner_texts()
    assert texts == [USER_REPLY, OPPONENT_REPLY, USER_REPLY, OPPONENT_REPLY]


def test_the_viewer_fits_a_phone(make_studio, llm):
    script_duel(llm)
    studio = make_studio(viewport=PHONE)
    page = studio.open("/duel")
    fill_duel_form(page, rounds=1)
    page.get_by_role("button", name="Start the duel").click()
    expect(page.get_by_test_id("winner")).to_have_text("Ada")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    for box in (page.locator(".turn").first.bounding_box(), page.get_by_role("region", name="Verdict").bounding_box()):
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    studio.shot("duel-phone", full_page=True)


def test_a_stored_debate_replays_from_its_events(studio, llm):
    script_duel(llm)
    page = studio.open("/duel")
    fill_duel_form(page, rounds=1)
    page.get_by_role("button", name="Start the duel").click()
    expect(page.get_by_test_id("winner")).to_have_text("Ada")
    link = page.get_by_role("link", name=re.compile(r"^debate_"))
    debate_id = link.inner_text()
    link.click()
    # The router keeps the old page on screen while the new one loads: wait for the replay's own heading, then
    # for its turns (the winner alone could still be the live page's).
    expect(page.get_by_role("heading", name=f"Duel {debate_id}")).to_be_visible()
    expect(page.locator(".turn-text")).to_have_text([USER_REPLY, OPPONENT_REPLY])
    expect(page.get_by_test_id("winner")).to_have_text("Ada")
