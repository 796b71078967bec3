"""The multi-agent debate graph (Du et al.) against the scripted model server: fan-out, revision prompts, rounds."""

from __future__ import annotations

from collections import Counter

from parley.graphs.multiagent_debate import AgentTask, MultiAgentDebateContext, graph, revision_messages
from parley.llm.factory import ModelFactory

QUESTION = "What is the value of 2+3*4+1-2*3?\n\nEnd with `Answer: <number>`."
REVISE_MARK = "Other agents answered the same question"


def context(parley_env, **knobs) -> MultiAgentDebateContext:
    return MultiAgentDebateContext(models=ModelFactory(parley_env), model="openai:gpt-4o-mini", **knobs)


async def test_agents_answer_then_revise_reading_each_other(parley_env, llm):
    llm.script(match=REVISE_MARK, reply="Checked the others. Answer: 9")
    llm.script(replies=["First try. Answer: 5", "First try. Answer: 6", "First try. Answer: 7"])
    ctx = context(parley_env, agents=3, rounds=2)
    events = []
    result = None
    async for mode, data in graph.astream({"question": QUESTION}, context=ctx, stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(data)
        else:
            result = data

    assert len(llm.requests) == 9  # 3 agents × (first answers + 2 revision rounds)
    assert result["final_answers"] == ["Checked the others. Answer: 9"] * 3
    assert Counter(a["round"] for a in result["answers"]) == {0: 3, 1: 3, 2: 3}
    assert [(e["round"], e["event"]) for e in events].count((2, "answer")) == 3

    first = [r for r in llm.requests if len(r["messages"]) == 1]
    assert len(first) == 3 and all(r["messages"][0]["content"] == QUESTION for r in first)
    round_one = [r for r in llm.requests if len(r["messages"]) == 3 and "First try" in r["messages"][1]["content"]]
    assert len(round_one) == 3
    owns = set()
    for request in round_one:
        question, own, revise = request["messages"]
        assert question["content"] == QUESTION and own["role"] == "assistant"
        shown = revise["content"]
        others = {a for a in ("Answer: 5", "Answer: 6", "Answer: 7") if a in shown}
        assert own["content"].split(". ", 1)[1] not in others and len(others) == 2  # the other two, not itself
        assert shown.rstrip().endswith(QUESTION)  # the question is restated after the answers
        owns.add(own["content"])
    assert len(owns) == 3  # each agent revises its own first answer
    assert len(ctx.ledger.records) == 9
    assert Counter(r.label for r in ctx.ledger.records)["debate:2:0"] == 1


async def test_no_revision_rounds_is_just_k_answers(parley_env, llm):
    llm.script(reply="Answer: 8")
    result = await graph.ainvoke({"question": QUESTION}, context=context(parley_env, agents=4, rounds=0))
    assert result["final_answers"] == ["Answer: 8"] * 4 and len(llm.requests) == 4


async def test_agent_models_are_dealt_to_the_seats(parley_env, llm):
    ctx = context(parley_env, agents=3, rounds=1, agent_models=["openai:model-a", "openai:model-b"])
    result = await graph.ainvoke({"question": QUESTION}, context=ctx)
    assert [a["model"] for a in result["answers"] if a["round"] == 1] == \
        ["openai:model-a", "openai:model-b", "openai:model-a"]
    assert Counter(r["model"] for r in llm.requests) == {"model-a": 4, "model-b": 2}


def test_previous_answers_share_a_small_context_window():
    long_answer = "step " * 2000
    task = AgentTask(question=QUESTION, agent=0, round=1, own=long_answer, others=[long_answer, long_answer])
    messages = revision_messages(task, prompt_budget=600)
    assert messages[1].content.endswith("[...]") and len(messages[1].content) < len(long_answer) / 4
    assert messages[2].content.count("[...]") == 2 and "--- Agent 2 ---" in messages[2].content
    assert len(revision_messages(AgentTask(question=QUESTION, agent=0, round=0, own=None, others=[]),
                                 prompt_budget=600)) == 1
