"""Designer in the browser: examples round-trip, problems land on their node, edits save, a run lights nodes in order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

EXAMPLES = Path(__file__).resolve().parents[2] / "designer" / "examples"


def node(page, node_id: str):
    return page.locator(f'.react-flow [data-node-id="{node_id}"]')


def open_example(page, name: str) -> None:
    page.get_by_label("Example").select_option(name)
    page.get_by_role("button", name="Open example").click()
    expect(page.get_by_text(f"Opened the example {name}.")).to_be_visible()


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.json")))
def test_an_example_exported_equals_its_file(studio, name):
    page = studio.open("/designer")
    open_example(page, name)
    expect(page.get_by_role("status").filter(has_text="Valid workflow.")).to_be_visible()
    original = json.loads((EXAMPLES / f"{name}.json").read_text())
    for spec in original["nodes"]:
        expect(node(page, spec["id"])).to_be_visible()
    with page.expect_download() as download:
        page.get_by_role("button", name="Export JSON").click()
    exported = Path(download.value.path()).read_text()
    assert json.loads(exported) == original
    assert list(json.loads(exported)) == list(original)  # keys in the file's order, too
    if name == "roundtable-decision":
        studio.shot("designer")


def test_an_imported_file_round_trips_and_a_broken_one_shows_the_error_on_its_node(studio, tmp_path):
    page = studio.open("/designer")
    broken = json.loads((EXAMPLES / "debate-summary.json").read_text())
    broken["nodes"][1]["inputs"]["prompt"] = "Summarize {verdit} for {audience}."
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    page.get_by_test_id("import-file").set_input_files(path)

    expect(page.get_by_role("status").filter(has_text="1 problem found.")).to_be_visible()
    issues = node(page, "summarize").locator(".node-issues")
    expect(issues).to_contain_text("nodes[1].inputs.prompt")
    expect(issues).to_contain_text("unknown state key 'verdit' (did you mean 'verdict'?)")
    expect(node(page, "debate").locator(".node-issues")).to_have_count(0)
    studio.shot("designer-problem")

    # The problem opens its node; fixing the prompt there makes the workflow valid again.
    page.get_by_role("button", name="At node 'summarize'").click()
    prompt = page.get_by_role("tabpanel").get_by_label("Prompt")
    prompt.fill("Summarize {verdict} for {audience}.")
    expect(page.get_by_role("status").filter(has_text="Valid workflow.")).to_be_visible()
    expect(node(page, "summarize").locator(".node-issues")).to_have_count(0)


def test_a_debate_node_is_added_edited_and_saved(studio):
    page = studio.open("/designer")
    page.get_by_role("button", name="New").click()
    page.get_by_role("list").filter(has_text="answer").get_by_role("button", name="answer llm").click()
    page.get_by_role("button", name="Delete node").click()
    page.get_by_label("Node type").select_option("debate")
    page.get_by_role("button", name="Add node").click()
    panel = page.get_by_role("tabpanel")
    expect(panel.get_by_role("heading", name="debate node debate")).to_be_visible()
    panel.get_by_label("System Prompt").fill("Answer in five sentences.")
    panel.get_by_label("Arbitrator Prompt").fill("Pick one answer and say why.")
    panel.get_by_label("Write Output to State Key").select_option("answer")
    panel.get_by_label("Input").fill("{input}")
    expect(node(page, "debate")).to_contain_text("System Prompt set · Arbitrator Prompt set")

    expect(page.get_by_role("status").filter(has_text="Valid workflow.")).to_be_visible()

    page.get_by_role("tab", name="Workflow").click()
    page.get_by_role("tabpanel").get_by_label("Name", exact=True).fill("Debate the input")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("Saved as")).to_be_visible()
    with studio.api() as api:
        [saved] = api.get("/v1/workflows").json()["data"]
    added = next(n for n in saved["workflow"]["nodes"] if n["id"] == "debate")
    assert saved["name"] == "Debate the input"
    assert added["config"]["system_prompt"] == "Answer in five sentences."
    assert added["config"]["arbitrator_prompt"] == "Pick one answer and say why."
    assert added["output_key"] == "answer" and added["inputs"] == {"input": "{input}"}


def test_a_run_highlights_nodes_in_order_with_their_tokens(studio, llm):
    # Each node's model call waits at a gate, so the test sees one node running at a time.
    llm.script(match="Summarize this verdict", reply="Try it for three months. Then decide with data.",
               hold="summarize", pause_after=2)
    llm.script(match="four-day work week", hold="debate", times=1)
    page = studio.open("/designer")
    open_example(page, "debate-summary")
    page.get_by_role("tab", name="Run").click()
    expect(page.get_by_label("question (string, required)")).to_have_value(
        "Should a ten-person startup adopt a four-day work week?")
    page.get_by_role("button", name="Run workflow").click()

    expect(node(page, "debate")).to_have_attribute("data-status", "running")
    expect(node(page, "summarize")).to_have_attribute("data-status", "idle")
    studio.shot("designer-running")
    llm.release("debate")
    expect(node(page, "debate")).to_have_attribute("data-status", "done")
    expect(node(page, "summarize")).to_have_attribute("data-status", "running")
    expect(node(page, "summarize").locator(".node-tokens")).to_have_text("Try it ")
    llm.release("summarize")
    expect(node(page, "summarize")).to_have_attribute("data-status", "done")
    expect(page.get_by_role("status").filter(has_text="Done: 2 node runs")).to_be_visible()
    log = page.get_by_role("list", name="Run log").locator("li")
    assert [log.nth(i).get_attribute("data-node") for i in range(log.count())] == ["debate", "summarize"]
    final = page.locator("details").filter(has=page.get_by_text("Final state", exact=True)).locator("pre")
    expect(final).to_contain_text('"summary": "Try it for three months. Then decide with data."')


def test_a_run_is_stopped_from_the_run_panel(studio, llm):
    llm.script(match="four-day work week", hold="debate", times=1)
    page = studio.open("/designer")
    open_example(page, "debate-summary")
    page.get_by_role("tab", name="Run").click()
    page.get_by_role("button", name="Run workflow").click()
    expect(node(page, "debate")).to_have_attribute("data-status", "running")
    page.get_by_role("button", name="Stop").click()
    expect(page.get_by_role("status").filter(has_text="Cancelled.")).to_be_visible()
    expect(node(page, "debate")).to_have_attribute("data-status", "cancelled")
    expect(node(page, "summarize")).to_have_attribute("data-status", "idle")
    with studio.api() as api:
        [run] = api.get("/v1/runs", params={"kind": "workflow"}).json()["data"]
    assert run["status"] == "cancelled"


def test_the_multiagent_debate_example_runs_from_capability_nodes(studio, llm):
    llm.script(match="Other agents answered", reply="Checked the others. Answer: 9")
    llm.script(reply="First try. Answer: 9")
    page = studio.open("/designer")
    open_example(page, "multiagent-debate")
    expect(node(page, "revise")).to_contain_text("3 branches revising {first}")
    expect(node(page, "majority")).to_contain_text("majority of {final}")
    page.get_by_role("tab", name="Run").click()
    page.get_by_role("button", name="Run workflow").click()
    expect(page.get_by_role("status").filter(has_text="Done: 3 node runs")).to_be_visible()
    log = page.get_by_role("list", name="Run log").locator("li")
    assert [log.nth(i).get_attribute("data-node") for i in range(log.count())] == \
        ["answer_alone", "revise", "majority"]
    final = page.locator("details").filter(has=page.get_by_text("Final state", exact=True)).locator("pre")
    expect(final).to_contain_text('"answer": "Checked the others. Answer: 9"')
    assert len(llm.requests) == 6


def test_a_fan_out_node_is_added_from_the_palette_and_set_in_the_inspector(studio):
    page = studio.open("/designer")
    page.get_by_role("button", name="New").click()
    page.get_by_label("Node type").select_option("fan_out")
    page.get_by_role("button", name="Add node").click()
    panel = page.get_by_role("tabpanel")
    expect(panel.get_by_role("heading", name="fan_out node fan_out")).to_be_visible()
    panel.get_by_label("Prompt", exact=True).fill("{input}")
    panel.get_by_label("Branches").fill("2")
    panel.get_by_label("Minimum answers").fill("3")
    expect(node(page, "fan_out").locator(".node-issues")).to_contain_text("more than the node's 2 branches")
    panel.get_by_label("Minimum answers").fill("1")
    expect(node(page, "fan_out")).to_contain_text("2 branches")
    expect(node(page, "fan_out").locator(".node-issues")).not_to_contain_text("min_successes")


def chain(steps: int) -> dict:
    """A valid workflow of `steps` llm nodes, one after another."""
    keys = [f"draft{i}" for i in range(1, steps + 1)]
    return {
        "version": 1,
        "name": f"{steps} drafts",
        "state": {"topic": {"type": "string", "required": True}, **{key: {"type": "string"} for key in keys}},
        "nodes": [{"id": f"step{i}", "type": "llm", "inputs": {"prompt": f"Improve {{{keys[i - 2]}}}." if i > 1 else
                                                               "Draft a line on {topic}."}, "output_key": keys[i - 1]}
                  for i in range(1, steps + 1)],
        "edges": [{"from": f"step{i}", "to": f"step{i + 1}"} for i in range(1, steps)],
        "entry": "step1",
        "finish": [f"step{steps}"],
    }


def zoom_of(page) -> float:
    transform = page.locator(".react-flow__viewport").evaluate("el => getComputedStyle(el).transform")
    return float(transform.removeprefix("matrix(").split(",")[0])  # matrix(zoom, 0, 0, zoom, x, y)


def smallest_text_px(page) -> float:
    """The smallest font size of any text on the canvas, as drawn (its CSS size times the zoom)."""
    return page.evaluate("""() => {
        const sizes = [];
        for (const el of document.querySelectorAll('.react-flow__node *, .react-flow__edge-text')) {
            if ([...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim())) {
                sizes.push(parseFloat(getComputedStyle(el).fontSize));
            }
        }
        return Math.min(...sizes);
    }""") * zoom_of(page)


def test_a_big_workflow_is_panned_at_a_readable_size_not_shrunk(studio, tmp_path):
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(chain(8)))  # with start and end, ten nodes: more than the canvas holds readably
    page = studio.open("/designer")
    page.get_by_test_id("import-file").set_input_files(path)
    expect(page.get_by_role("status").filter(has_text="Valid workflow.")).to_be_visible()
    expect(node(page, "step8")).to_be_attached()
    canvas = page.get_by_role("region", name="Workflow canvas")
    expect(canvas.get_by_text("Drag or scroll to see the rest of the workflow")).to_be_visible()
    assert round(smallest_text_px(page), 2) >= 10  # MIN_ZOOM × 12 px (Canvas.tsx)
    expect(node(page, "step1")).to_be_in_viewport()  # shown from its start
    zoom = zoom_of(page)

    def shown(node_id: str) -> bool:
        frame, drawn = canvas.bounding_box(), node(page, node_id).bounding_box()
        return frame["y"] <= drawn["y"] and drawn["y"] + drawn["height"] <= frame["y"] + frame["height"]

    assert not shown("step8")
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    for _ in range(40):  # scrolling pans to the end; the zoom stays
        if shown("step8"):
            break
        page.mouse.wheel(0, 150)
    assert shown("step8")
    assert zoom_of(page) == zoom
    studio.shot("designer-big")
