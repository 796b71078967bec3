"""`parley roundtable`: the renderer on round-table wire events, and the command end to end."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from rich.console import Console
from typer.testing import CliRunner

from parley.cli.main import app
from parley.cli.roundtable import RoundTableFailed, render_round_table
from tests.support.sse import parse_sse

SEATS = [{"agentId": "agt_1", "agentName": "Claire", "isDevilsAdvocate": False},
         {"agentId": "agt_2", "agentName": "Marc", "isDevilsAdvocate": False},
         {"agentId": "agt_da", "agentName": "Devil's Advocate", "isDevilsAdvocate": True}]
SYNTHESIS = {
    "summary": "Open in Lyon, but only after the sales hire.",
    "debateEvolution": "Claire moved from against to conditional once the cash figures were shown.",
    "devilsAdvocateMainAttack": "A second office doubles fixed costs before the pipeline is proven.",
    "agentInsights": [
        {"name": "Claire", "role": "Finance", "keyPoint": "Break-even needs 14 months.", "stance": "conditional",
         "shifted": True},
        {"name": "Marc", "role": "Sales", "keyPoint": "Three letters of intent.", "stance": "for", "shifted": False},
    ],
    "consensus": ["The Lyon market is real."],
    "riskPoints": ["Fixed-cost exposure"],
    "recommendedAction": "Hire the Lyon sales lead first; revisit the lease in six months.",
    "conditions": ["Sales lead hired"],
    "confidenceLevel": "medium",
    "urgency": "low",
    "roundCount": 1,
    "raw": "{}",
}


def message(agent: dict, round_number: int, stance: str, confidence: float, key_point: str) -> tuple[str, dict]:
    return "message", {
        "agentId": agent["agentId"], "agentName": agent["agentName"],
        "agentRole": "Devil's advocate" if agent["isDevilsAdvocate"] else "Finance", "content": key_point + " More.",
        "stance": stance, "confidence": confidence, "keyPoint": key_point,
        "phase": "initial" if round_number == 0 else "debate", "roundNumber": round_number,
        "isDevilsAdvocate": agent["isDevilsAdvocate"], "seat": 0, "model": "openai:gpt-5-mini",
        "usage": {"inputTokens": 120, "outputTokens": 40}, "createdAt": "2026-10-09T10:03:19.554000+00:00",
    }


# A debate as the conversation message SSE carries it: two rounds, chunks interleaved, converged in round 1.
EVENTS = [
    ("round_start", {"roundNumber": 0, "phase": "initial", "agents": SEATS}),
    ("chunk", {"agentId": "agt_1", "agentName": "Claire", "roundNumber": 0, "content": "Break-even "}),
    ("chunk", {"agentId": "agt_2", "agentName": "Marc", "roundNumber": 0, "content": "Three "}),
    message(SEATS[0], 0, "against", 0.8, "Break-even needs 14 months at current margins."),
    message(SEATS[1], 0, "for", 0.9, "Three letters of intent."),
    message(SEATS[2], 0, "against", 0.6, "The table will say yes too fast."),
    ("round_start", {"roundNumber": 1, "phase": "debate", "agents": SEATS}),
    message(SEATS[0], 1, "conditional", 0.7, "Yes, once the sales lead is hired. " + "x" * 300),
    message(SEATS[1], 1, "for", 0.9, "Three letters of intent."),
    message(SEATS[2], 1, "against", 0.5, "Fixed costs double."),
    ("convergence", {"roundNumber": 1, "score": 0.8712, "threshold": 0.85, "converged": True}),
    ("synthesis", {"synthesis": SYNTHESIS, "totalRounds": 1}),
    ("done", {"conversationId": "conv_1", "synthesis": SYNTHESIS, "totalRounds": 1,
              "tokenUsage": {"totalTokensUsed": 4123, "remainingBalance": None}}),
]


async def events_of(items):
    for item in items:
        yield item


def render(items) -> tuple[dict | None, str, Exception | None]:
    import asyncio

    out = Console(record=True, width=160, color_system=None)
    try:
        result = asyncio.run(render_round_table(events_of(items), out))
        return result, out.export_text(), None
    except RoundTableFailed as exc:
        return None, out.export_text(), exc


def test_rounds_stances_convergence_and_the_synthesis_are_printed_in_order():
    result, text, _ = render(EVENTS)
    assert result["totalRounds"] == 1 and result["conversationId"] == "conv_1"
    order = ["Round 0 · initial positions", "Claire, Marc and Devil's Advocate speak",
             "Claire (Finance): against 80% · Break-even needs 14 months", "Marc (Finance): for 90%",
             "Devil's Advocate: against 60%", "Round 1 · debate", "Claire (Finance): conditional 70%",
             "convergence 0.87 (threshold 0.85): converged, the table stops", "Synthesis",
             "Open in Lyon, but only after the sales hire.", "4123 tokens used; allowance left: unlimited"]
    positions = [text.index(piece) for piece in order]
    assert positions == sorted(positions), text
    assert "Break-even " not in text.replace("Break-even needs", "")  # chunks are not printed
    long_line = next(line for line in text.splitlines() if "conditional 70%" in line)
    assert long_line.rstrip().endswith("…") and len(long_line) < 220  # the key point is kept short


def test_the_synthesis_table_shows_every_seed_field():
    _, text, _ = render(EVENTS)
    synthesis = text[text.index("Synthesis"):]
    for label, value in [("Summary", SYNTHESIS["summary"]), ("Recommended action", "Hire the Lyon sales lead first"),
                         ("Conditions", "• Sales lead hired"), ("Consensus", "• The Lyon market is real."),
                         ("Risks", "• Fixed-cost exposure"), ("Devil's advocate's main attack", "doubles fixed costs"),
                         ("How the debate evolved", "Claire moved from against"), ("Confidence", "medium"),
                         ("Urgency", "low"), ("Debate rounds", "1")]:
        row = next((line for line in synthesis.splitlines() if label in line), "")
        assert value in row or value in synthesis[synthesis.index(label):], (label, synthesis)
    assert "Agent insights" in synthesis
    assert "Break-even needs 14 months." in synthesis and "Three letters of intent." in synthesis
    claire = next(line for line in synthesis.splitlines() if "Claire" in line and "Break-even" in line)
    assert "conditional" in claire and "yes" in claire  # her stance shifted


def test_a_round_below_the_threshold_says_so_and_an_allowance_is_shown():
    events = [("round_start", {"roundNumber": 1, "phase": "debate", "agents": SEATS[:1]}),
              ("convergence", {"roundNumber": 1, "score": 0.5, "threshold": 0.85, "converged": False}),
              ("done", {"synthesis": SYNTHESIS, "totalRounds": 3,
                        "tokenUsage": {"totalTokensUsed": 10, "remainingBalance": 990}})]
    _, text, _ = render(events)
    assert "Claire speaks" in text and "convergence 0.50 (threshold 0.85): below the threshold" in text
    assert "allowance left: 990" in text


def test_an_error_event_ends_the_rendering_with_its_message():
    _, text, error = render(EVENTS[:4] + [("error", {"error": "Model failure: the model endpoint answered 500",
                                                     "status": 500})])
    assert isinstance(error, RoundTableFailed) and "answered 500" in str(error)
    assert "Claire (Finance): against 80%" in text  # what came before is shown


def test_events_that_stop_without_done_are_a_failure():
    _, _, error = render(EVENTS[:3])
    assert isinstance(error, RoundTableFailed) and "without a result" in str(error)


def test_the_renderer_reads_the_events_the_http_stream_sends(http, make_key, llm):
    key = make_key(["conversations"])
    headers = {"Authorization": f"Bearer {key}"}
    for name in ("Claire", "Marc"):
        http.post("/v1/agents", json={"name": name, "role": "Finance"}, headers=headers).raise_for_status()
    conversation = http.post("/v1/conversations", json={"title": "Lyon?"}, headers=headers).json()["conversation"]
    resp = http.post(f"/v1/conversations/{conversation['id']}/message?stream=true", json={"content": "Open now?"},
                     headers=headers)
    wire = [(e.event, json.loads(e.data)) for e in parse_sse(resp.text)]
    result, text, error = render(wire)
    assert error is None and result["totalRounds"] == wire[-1][1]["totalRounds"]
    assert "Round 0 · initial positions" in text and "Claire (Finance):" in text and "convergence" in text
    assert "Recommended action" in text and result["synthesis"]["recommendedAction"] in text


# --- the command ----------------------------------------------------------------------------

runner = CliRunner()


def parley(*args: str):
    return runner.invoke(app, list(args), terminal_width=200)


def test_roundtable_debates_the_workspace_agents_and_stores_a_conversation(parley_env, llm, sync_db):
    for name, role in (("Claire", "Finance"), ("Marc", "Sales")):
        assert parley("agents", "add", name, "--role", role, "--workspace", "acme").exit_code == 0
    result = parley("roundtable", "Should we open a second office in Lyon?", "--workspace", "acme")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Round 0 · initial positions" in out and "Round 1 · debate" in out
    assert "Claire (Finance):" in out and "Marc (Sales):" in out and "Devil's Advocate" in out
    assert "convergence" in out and "threshold 0.85" in out
    assert "Recommended action" in out and "tokens used" in out

    conversation = sync_db.conversations.find_one({"workspace": "acme"})
    assert conversation["title"] == "Should we open a second office in Lyon?" and conversation["user"] == "local"
    assert f"--conversation {conversation['_id']}" in out
    senders = [m["senderType"] for m in sync_db.conversation_messages.find({"conversationId": conversation["_id"]})]
    assert senders[0] == "user" and senders[-1] == "synthesizer"

    # A follow-up in the same conversation: the table hears the earlier exchange.
    before = len(llm.requests)
    follow = parley("roundtable", "And if we delay the lease?", "--conversation", conversation["_id"],
                    "--workspace", "acme")
    assert follow.exit_code == 0, follow.output
    assert sync_db.conversations.count_documents({"workspace": "acme"}) == 1
    prompts = "\n".join(m["content"] for r in llm.requests[before:] for m in r["messages"])
    assert "Q1: Should we open a second office in Lyon?" in prompts


@pytest.mark.parametrize("args,message", [
    (("roundtable", "Open now?", "--workspace", "empty"), "No agents found. Please create agents first."),
    (("roundtable", "Open now?", "--conversation", "conv_missing"), "Conversation not found"),
    (("roundtable", "   "), "question: String should have at least 1 character"),
])
def test_roundtable_refusals_are_clear(parley_env, llm, sync_db, args, message):
    assert parley("agents", "add", "Claire").exit_code == 0  # in `default`
    result = parley(*args)
    assert result.exit_code in (1, 2) and message in result.output.replace("\n", " "), result.output
    assert not [r for r in llm.requests if r.get("stream")]  # no debate ran
    assert sync_db.conversations.count_documents({}) == 0  # and nothing was left behind


def test_a_model_failure_mid_debate_is_reported(parley_env, llm, sync_db):
    assert parley("agents", "add", "Claire").exit_code == 0
    llm.script(match="This is debate round 1", status=400, reply="context length exceeded")
    result = parley("roundtable", "Open now?")
    assert result.exit_code == 1 and "Model failure" in result.output and "400" in result.output
    assert "Claire:" in result.output  # round 0 was shown before the failure


def test_the_command_leaves_runs_other_workers_left_to_the_servers(parley_env, llm, sync_db):
    # A run whose server died: the servers sharing the database resume it, never a passing CLI process
    # (which would exit with it half done).
    stale = datetime.now(timezone.utc) - timedelta(minutes=5)
    sync_db.runs.insert_one({"_id": "debate_stale", "kind": "duel", "workspace": "ws1", "user": "bob",
                             "status": "running", "worker": "gone:1", "leaseUntil": stale, "claims": 1,
                             "cancelRequested": False, "input": {}, "ref": {}})
    assert parley("agents", "add", "Claire").exit_code == 0
    result = parley("roundtable", "Open now?")
    assert result.exit_code == 0, result.output
    left = sync_db.runs.find_one({"_id": "debate_stale"})
    assert left["worker"] == "gone:1" and left["claims"] == 1
    assert sync_db.runs.count_documents({"kind": "roundtable", "status": "completed"}) == 1


def test_roundtable_with_steer_asks_after_every_round(parley_env, llm, sync_db):
    for name, stance in (("Claire", "for"), ("Marc", "against")):
        assert parley("agents", "add", name, "--role", "Finance", "--workspace", "acme").exit_code == 0
        llm.script(match=f"Record {name}'s stance", json={"stance": stance, "confidence": 0.9, "keyPoint": "Mine."})
    # After round 0: a message; after round 1: the synthesis at once.
    result = CliRunner().invoke(app, ["roundtable", "Open in Lyon?", "--workspace", "acme", "--steer"],
                                input="The lease offer expires in May.\n/end\n")
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.count("Your turn") == 2 and "after round 0" in out and "after round 1" in out
    assert "local (you): The lease offer expires in May." in out
    assert "Stopped early (user): you ended it" in out and "Recommended action" in out
    assert "Round 2" not in out
    round_one = [r for r in llm.requests if r.get("stream") and "This is debate round 1." in r["messages"][-1]["content"]]
    assert round_one and all("The lease offer expires in May." in r["messages"][-1]["content"] for r in round_one)
    stored = [m for m in sync_db.conversation_messages.find({"senderType": "user"})]
    assert [m["content"] for m in stored] == ["Open in Lyon?", "The lease offer expires in May."]


def test_roundtable_with_a_budget_too_small_is_refused_before_any_call(parley_env, llm, sync_db):
    assert parley("agents", "add", "Claire", "--workspace", "acme").exit_code == 0
    result = parley("roundtable", "Open in Lyon?", "--workspace", "acme", "--max-tokens", "20")
    assert result.exit_code == 1 and "budget is too small" in result.output.replace("\n", " ")
    assert not llm.requests
