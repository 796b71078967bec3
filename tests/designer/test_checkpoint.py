"""A compiled workflow checkpoints to MongoDB (the run checkpointer, `runs.checkpoints`) and resumes in a new process."""

from __future__ import annotations

from pymongo import MongoClient

from parley.designer import WorkflowContext, compile_workflow
from parley.runs.checkpoints import COLLECTION, mongodb_saver
from tests.designer.conftest import wf

DOCUMENT = wf(
    [
        {"id": "draft", "type": "llm", "inputs": {"prompt": "Draft a tagline about {topic}."}, "output_key": "draft"},
        {"id": "polish", "type": "llm", "inputs": {"prompt": "Polish this tagline: {draft}"}, "output_key": "final"},
    ],
    {"topic": "string", "draft": "string", "final": "string"},
    [{"from": "draft", "to": "polish"}],
    finish=["polish"],
)


async def test_a_run_stopped_midway_resumes_from_its_mongodb_checkpoint(parley_env, llm, factory):
    llm.script(match="Draft a tagline", reply="Tides, on time.")
    llm.script(match="Polish this tagline", reply="Tides: always on time.")
    config = {"configurable": {"thread_id": "run-1"}}
    client = MongoClient(parley_env.mongodb_uri)
    savers = [mongodb_saver(parley_env.mongodb_uri, parley_env.mongodb_db) for _ in range(2)]
    try:
        # The first process stops before `polish` (as if it died there); its checkpoint is in MongoDB.
        first = compile_workflow(DOCUMENT, checkpointer=savers[0], interrupt_before=["polish"])
        await first.ainvoke({"topic": "tides"}, config, context=WorkflowContext(models=factory))
        assert client[parley_env.mongodb_db][COLLECTION].count_documents({"thread_id": "run-1"}) == 1

        # A second process, with a saver of its own, picks the run up where it stopped.
        second = compile_workflow(DOCUMENT, checkpointer=savers[1])
        state = await second.ainvoke(None, config, context=WorkflowContext(models=factory))
    finally:
        client.close()
        for saver in savers:
            await saver.aclose()
    assert state["draft"] == "Tides, on time." and state["final"] == "Tides: always on time."
    drafts = [r for r in llm.requests if "Draft a tagline" in str(r["messages"])]
    assert len(drafts) == 1  # the finished step was not run again
