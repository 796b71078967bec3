"""The round-table graph against the scripted model: seating, rounds, early stop, retrieval, memories, events."""

from __future__ import annotations

from typing import Any

import pytest

from parley.core.settings import Settings
from parley.graphs.roundtable import (
    build_round_table_graph,
    estimate_minimum_tokens,
    format_history,
    graph,
    minimum_calls,
    seat_order,
)
from parley.graphs.roundtable.steps import RoundTableContext
from parley.llm.factory import ModelFactory
from parley.nodes.speak import is_chunk
from parley.runs.modes.roundtable import seed_chunk


@pytest.fixture
def make_context(llm):
    settings = Settings(openai_base_url=llm.base_url, openai_api_key="sk-test", openai_model="openai:gpt-5")

    def make(**knobs: Any) -> RoundTableContext:
        return RoundTableContext(models=ModelFactory(settings), **knobs)

    return make


def agent(name: str, role: str, **extra: Any) -> dict[str, Any]:
    return {"id": name.lower(), "name": name, "role": role, "persona": f"{name} cares about {role}.",
            "isDevilsAdvocate": False, "memories": [], "documents": [], **extra}


def stance(llm, name: str, role: str, value: str, confidence: float = 0.9, *, after: str = "",
           key_point: str | None = None) -> None:
    """Script the position extracted from `name`'s answers (those containing `after`, when given)."""
    llm.script(match=f"{name} ({role}) said:\n{after}",
               json={"stance": value, "confidence": confidence, "keyPoint": key_point or f"{name} is {value}."})


TABLE = [agent("Claire", "Finance"), agent("Marc", "Sales"), agent("Lea", "Legal")]


def user_prompt(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"])


def turn_requests(llm, name: str) -> list[dict]:
    """The streamed answer requests of one agent, in order."""
    return [r for r in llm.requests if r.get("stream") and f"You are {name}," in r["messages"][0]["content"]]


async def test_agreeing_table_stops_early(llm, make_context):
    for a in TABLE:
        stance(llm, a["name"], a["role"], "for")
    result = await graph.ainvoke({"question": "Open a Lyon office?", "agents": TABLE}, context=make_context())
    assert result["total_rounds"] == 1
    assert [r["roundNumber"] for r in result["rounds"]] == [0, 1]
    assert result["rounds"][0]["convergenceScore"] is None
    assert result["rounds"][1]["convergenceScore"] >= 0.85
    assert result["synthesis"]["roundCount"] == 1
    # Every seat spoke in rounds 0 and 1, the built-in devil's advocate included.
    assert sorted((m["roundNumber"], m["agentName"]) for m in result["transcript"]) == sorted(
        (r, n) for r in (0, 1) for n in ("Claire", "Marc", "Lea", "Devil's Advocate")
    )
    usage = result["rounds"][1]["usage"]
    assert set(usage) == {"claire", "marc", "lea", "devils-advocate"}
    assert all(u["inputTokens"] > 0 and u["outputTokens"] > 0 for u in usage.values())


async def test_split_table_runs_to_max_rounds(llm, make_context):
    stance(llm, "Claire", "Finance", "against")
    stance(llm, "Marc", "Sales", "for")
    stance(llm, "Lea", "Legal", "for")
    result = await graph.ainvoke({"question": "Open a Lyon office?", "agents": TABLE}, context=make_context())
    assert result["total_rounds"] == 3
    assert [r["roundNumber"] for r in result["rounds"]] == [0, 1, 2, 3]
    assert all(r["convergenceScore"] < 0.85 for r in result["rounds"][1:])

    llm.reset()
    stance(llm, "Claire", "Finance", "against")
    fewer = await graph.ainvoke({"question": "Open a Lyon office?", "agents": TABLE},
                                context=make_context(max_rounds=1, convergence_threshold=0.99))
    assert fewer["total_rounds"] == 1 and len(fewer["rounds"]) == 2


async def test_seats_first_five_regular_agents_and_one_devils_advocate(llm, make_context):
    crowd = [agent(f"A{i}", "Ops") for i in range(7)]
    own_advocate = {**agent("Vera", "Contrarian"), "isDevilsAdvocate": True}
    result = await graph.ainvoke({"question": "Q?", "agents": [*crowd, own_advocate]},
                                 context=make_context(max_rounds=0))
    speakers = {m["agentName"]: m["isDevilsAdvocate"] for m in result["transcript"]}
    assert speakers == {"A0": False, "A1": False, "A2": False, "A3": False, "A4": False, "Vera": True}
    assert result["total_rounds"] == 0
    with pytest.raises(ValueError, match="at least one regular agent"):
        await graph.ainvoke({"question": "Q?", "agents": [own_advocate]}, context=make_context())


def test_the_budget_estimates_seat_the_table_as_the_graph_does(make_context):
    crowd = [agent(f"A{i}", "Ops") for i in range(7)]
    own_advocate = {**agent("Vera", "Contrarian"), "isDevilsAdvocate": True}
    regular, advocate = seat_order([crowd[0], own_advocate, *crowd[1:]], 5)
    assert [a["name"] for a in regular] == ["A0", "A1", "A2", "A3", "A4"] and advocate is own_advocate
    assert seat_order(crowd[:2], 5) == (crowd[:2], None)

    ctx = make_context()
    calls = minimum_calls({"question": "Q?", "agents": [*crowd, own_advocate]}, ctx)
    # Round 0 (an answer and its stance per seat), the synthesis and a memory call per seat: six seats.
    assert len(calls) == 6 * 2 + 1 + 6
    # Agents past the fifth change nothing; a table without its own advocate seats the built-in one.
    seated = estimate_minimum_tokens({"question": "Q?", "agents": [*crowd[:5], own_advocate]}, ctx)
    assert estimate_minimum_tokens({"question": "Q?", "agents": [*crowd, own_advocate]}, ctx) == seated
    assert len(minimum_calls({"question": "Q?", "agents": crowd}, ctx)) == len(calls)


async def test_agents_see_every_earlier_round_in_order_and_the_advocate_attacks_the_consensus(llm, make_context):
    llm.script(match="You are Claire,", replies=["Claire opening words.", "Claire second words.",
                                                "Claire third words."])
    stance(llm, "Claire", "Finance", "against")
    stance(llm, "Marc", "Sales", "for", key_point="Three letters of intent prove demand.")
    stance(llm, "Lea", "Legal", "for", key_point="The lease terms are acceptable.")
    await graph.ainvoke({"question": "Open a Lyon office?", "agents": TABLE},
                        context=make_context(max_rounds=2, convergence_threshold=1.0))
    requests = turn_requests(llm, "Marc")
    marc = [user_prompt(r) for r in requests]
    assert len(marc) == 3
    assert "This is round 0" in marc[0] and "Claire opening words" not in marc[0]
    assert "Claire opening words." in marc[1] and "[against, confidence 0.90]" in marc[1]
    assert "Claire second words." in marc[2] and "Claire opening words" in marc[2]
    # Cache-friendly: each turn repeats the previous one's messages but its last (the round's ask), byte for byte,
    # then adds the round just played and its own ask; the question is in the system message, before the rounds.
    for earlier, later in zip(requests, requests[1:]):
        assert later["messages"][: len(earlier["messages"]) - 1] == earlier["messages"][:-1]
        assert len(later["messages"]) == len(earlier["messages"]) + 1
    assert "Question: Open a Lyon office?" in requests[0]["messages"][0]["content"]
    assert requests[2]["messages"][2]["content"].startswith("Positions at the table after round 1:")
    assert requests[2]["messages"][-1]["content"].startswith("This is debate round 2.")
    advocate = [user_prompt(r) for r in turn_requests(llm, "Devil's Advocate")]
    assert "Three letters of intent prove demand." in advocate[1]
    assert "2 agent(s) are for" in advocate[1]


async def test_shifted_marks_agents_whose_stance_changed(llm, make_context):
    llm.script(match="You are Claire,", replies=["Claire doubts it.", "Claire is convinced now."])
    stance(llm, "Claire", "Finance", "against", after="Claire doubts it.")
    stance(llm, "Claire", "Finance", "for", after="Claire is convinced now.")
    stance(llm, "Marc", "Sales", "for")
    stance(llm, "Lea", "Legal", "for")
    result = await graph.ainvoke({"question": "Open a Lyon office?", "agents": TABLE},
                                 context=make_context(max_rounds=1))
    insights = {i["name"]: i for i in result["synthesis"]["agentInsights"]}
    assert insights["Claire"]["shifted"] is True and insights["Claire"]["stance"] == "for"
    assert insights["Marc"]["shifted"] is False
    assert set(result["synthesis"]) >= {
        "summary", "debateEvolution", "devilsAdvocateMainAttack", "agentInsights", "consensus", "riskPoints",
        "recommendedAction", "conditions", "confidenceLevel", "urgency", "roundCount", "raw",
    }


async def test_documents_memories_and_history_reach_the_agent(llm, make_context):
    lease = "The Lyon lease at Part-Dieu costs 42,000 euros a year with a three-year minimum term."
    newsletter = " ".join(f"Newsletter item {i} about brand colours and social posts." for i in range(40))
    claire = agent("Claire", "Finance", memories=["Marc overestimates pipelines."],
                   documents=[{"title": "Brand newsletter", "text": newsletter},
                              {"title": "Lyon lease terms", "text": lease}])
    llm.script(match="short notes", json={"notes": ["Legal wants a break clause.", "  "]})
    result = await graph.ainvoke(
        {"question": "Can we afford the Lyon office lease?", "agents": [claire, TABLE[1]],
         "history": "Q1: Hire in Lyon?\n  Conclusion: Hire first."},
        context=make_context(max_rounds=0),
    )
    system = turn_requests(llm, "Claire")[0]["messages"][0]["content"]
    assert "[Lyon lease terms]\n" + lease in system
    assert "Brand newsletter" not in system
    assert "- Marc overestimates pipelines." in system
    assert "Q1: Hire in Lyon?" in user_prompt(turn_requests(llm, "Claire")[0])
    assert {m["agentId"]: m["notes"] for m in result["memories"]} == {
        "claire": ["Legal wants a break clause."], "marc": ["Legal wants a break clause."],
        "devils-advocate": ["Legal wants a break clause."],
    }


async def test_streamed_events_come_in_round_order(llm, make_context):
    for a in TABLE:
        stance(llm, a["name"], a["role"], "for")
    events = []
    async for chunk in build_round_table_graph().compile().astream(
        {"question": "Open a Lyon office?", "agents": TABLE}, context=make_context(), stream_mode="custom"
    ):
        events.append({"event": "chunk", **seed_chunk(chunk)} if is_chunk(chunk) else chunk)  # as its stream shows it
    names = [e["event"] for e in events]
    assert names[0] == "round_start" and events[0]["roundNumber"] == 0 and len(events[0]["agents"]) == 4
    second = names.index("round_start", 1)
    assert events[second]["roundNumber"] == 1
    assert names[:second].count("message") == 4 and names[second:].count("message") == 4
    assert names[-2:] == ["convergence", "synthesis"]
    # Each agent's tokens arrive before its message, and rebuild it exactly.
    for message in (e for e in events if e["event"] == "message"):
        index = events.index(message)
        chunks = [e["content"] for e in events[:index] if e["event"] == "chunk"
                  and e["agentId"] == message["agentId"] and e["roundNumber"] == message["roundNumber"]]
        assert "".join(chunks).strip() == message["content"]


async def test_a_plain_run_context_and_no_context_both_work(llm, make_context):
    from parley.nodes.context import RunContext

    ctx = make_context()
    plain = RunContext(models=ctx.models)
    result = await graph.ainvoke({"question": "Q?", "agents": TABLE[:1]}, context=plain)
    assert result["synthesis"]["summary"] and plain.ledger.total_tokens > 0


def test_history_is_bounded_and_keeps_the_latest_exchange():
    exchanges = [
        {"question": f"Question {i}?", "synthesis": {"summary": "S" * 300, "recommendedAction": "Act."},
         "positions": [{"agentName": "Claire", "stance": "for", "keyPoint": "Point."}]}
        for i in range(1, 20)
    ]
    history = format_history(exchanges, max_chars=1200)
    assert len(history) <= 1200
    assert "Question 19?" in history and "Question 1?" not in history
    assert "Claire [for]: Point." in history
    assert history.index("Question 18?") < history.index("Question 19?")
    assert format_history([]) is None


def test_minimum_estimate_grows_with_the_table():
    small = estimate_minimum_tokens({"question": "Q?", "agents": TABLE[:1]})
    large = estimate_minimum_tokens({"question": "Q?", "agents": TABLE})
    assert 1000 < small < large


async def test_unreadable_structured_answers_do_not_sink_the_debate(llm, make_context):
    # A small model's confidence out of range is clamped; a stance that does not fit the schema counts
    # as neutral; an unreadable synthesis falls back to the table's own positions.
    stance(llm, "Claire", "Finance", "for", confidence=7)
    llm.script(match="Marc (Sales) said:", json={"stance": "maybe so"})
    stance(llm, "Lea", "Legal", "against")
    llm.script(match="synthesizer of a round-table debate", json={"summary": ["not", "a", "string"]})
    result = await graph.ainvoke({"question": "Open a Lyon office?", "agents": TABLE},
                                 context=make_context(max_rounds=1))
    final = {m["agentName"]: m for m in result["transcript"] if m["roundNumber"] == 1}
    assert final["Claire"]["confidence"] == 1.0
    assert final["Marc"]["stance"] == "neutral" and final["Marc"]["confidence"] == 0.0
    assert final["Marc"]["content"]  # the answer itself is kept
    synthesis = result["synthesis"]
    assert synthesis["summary"].startswith("The synthesizer's answer could not be read")
    assert synthesis["confidenceLevel"] == "low" and len(synthesis["agentInsights"]) == 4
