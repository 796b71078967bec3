"""The boundary capability (`nodes.steer`) in a graph of its own kind: the multi-agent debate against the scripted
model server, steered in-process (a `Steering` in its context, an in-memory checkpointer to wait)."""

from __future__ import annotations

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from parley.graphs.multiagent_debate import MultiAgentDebateContext, build_multiagent_debate_graph, graph
from parley.llm.budget import Budget, BudgetLimits
from parley.llm.factory import ModelFactory
from parley.nodes.inbox import Steering

QUESTION = "What is 2+3*4? End with `Answer: <number>`."
NOTE = "Mind the order of operations."


def context(parley_env, **knobs) -> MultiAgentDebateContext:
    return MultiAgentDebateContext(models=ModelFactory(parley_env), model="openai:gpt-4o-mini", agents=2, **knobs)


def given(n: int, **fields) -> dict:
    return {"id": f"in_{n}", "user": "ada", "at": f"2026-01-01T00:00:0{n}.000Z", **fields}


def prompts_of_round(llm, round_number: int) -> list[str]:
    """The last message of each agent's call in a round: round 0's are the question alone."""
    calls = [r["messages"][-1]["content"] for r in llm.requests]
    return calls[2 * round_number: 2 * round_number + 2]


async def test_without_steering_or_budget_a_boundary_passes_untouched(parley_env, llm):
    result = await graph.ainvoke({"question": QUESTION}, context=context(parley_env, rounds=1))
    assert len(llm.requests) == 4 and "stopped_by" not in result and not result.get("human")


async def test_messages_delivered_before_a_boundary_reach_the_next_round_once(parley_env, llm):
    steering = Steering()
    steering.deliver([given(1, content=NOTE), given(2, action="continue")])
    events = []
    async for mode, data in graph.astream({"question": QUESTION}, context=context(parley_env, rounds=2,
                                                                                  steering=steering),
                                          stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(data)
    assert not any(NOTE in p for p in prompts_of_round(llm, 0))
    assert all(NOTE in p for p in prompts_of_round(llm, 1) + prompts_of_round(llm, 2))
    assert all(p.count(NOTE) == 1 for p in prompts_of_round(llm, 2))  # taken in once, at the first boundary
    human = [e for e in events if e.get("event") == "human"]
    chunks = [e for e in events if e.get("event") == "chunk" and e["speaker"]["id"] == "human"]
    assert [h["content"] for h in human] == [NOTE] and human[0]["round"] == 1 and human[0]["position"] == 0
    assert [c["content"] for c in chunks] == [NOTE]  # the one chunk shape, then the message


async def test_a_run_that_awaits_waits_at_each_boundary_and_goes_on_with_the_answer(parley_env, llm):
    steering = Steering(await_at="after_round")
    ctx = context(parley_env, rounds=2, steering=steering)
    steered = build_multiagent_debate_graph().compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    out = await steered.ainvoke({"question": QUESTION}, config, context=ctx)
    assert out["__interrupt__"][0].value == {"at": "after_round", "position": 0, "round": 1} and len(llm.requests) == 2

    answer = given(1, action="guide", content=NOTE)
    steering.deliver([answer])
    out = await steered.ainvoke(Command(resume=answer), config, context=ctx)
    assert out["__interrupt__"][0].value["position"] == 1 and len(llm.requests) == 4
    assert all(NOTE in p for p in prompts_of_round(llm, 1))

    end = given(2, action="end")
    steering.deliver([end])
    out = await steered.ainvoke(Command(resume=end), config, context=ctx)
    assert "__interrupt__" not in out and out["stopped_by"] == "user" and len(llm.requests) == 4  # no round 2
    assert out["consumed"] == ["in_1", "in_2"] and [h["content"] for h in out["human"]] == [NOTE]


async def test_a_budget_that_holds_no_more_rounds_ends_the_debate_within_it(parley_env, llm):
    llm.script(reply=" ".join(["long"] * 200))
    ctx = context(parley_env, rounds=3)
    ctx.budget = Budget(BudgetLimits(max_tokens=1500), ctx.ledger)
    events = []
    async for mode, data in graph.astream({"question": QUESTION}, context=ctx, stream_mode=["custom", "values"]):
        if mode == "values":
            result = data
        else:
            events.append(data)
    assert result["stopped_by"] == "budget" and ctx.ledger.total_tokens <= 1500
    assert len(llm.requests) < 8  # fewer than its four rounds of two agents
    stopping = next(e for e in events if e.get("event") == "stopping")
    assert stopping["by"] == "budget" and stopping["limits"] == {"maxTokens": 1500}
