"""Custom stream events carry the task that sent them, through nested graphs too."""

from __future__ import annotations

from typing import TypedDict

from langgraph.graph import END, START, StateGraph

from parley.nodes.events import TaskEvent, emit, event_writer, relay


class State(TypedDict, total=False):
    n: int


async def speak(state: State) -> State:
    emit({"event": "said", "n": 1})
    return {"n": 1}


def inner_graph():
    builder = StateGraph(State)
    builder.add_node("speak", speak)
    builder.add_edge(START, "speak")
    builder.add_edge("speak", END)
    return builder.compile()


async def host(state: State) -> State:
    """Run the inner graph inside this node and re-send its events, as designer mode nodes do."""
    write = event_writer()
    write({"event": "hosting"})
    async for _, mode, chunk in inner_graph().astream({}, stream_mode=["custom", "values"], subgraphs=True):
        if mode == "custom":
            write(relay(chunk, {**chunk, "via": "host"}))
    return {"n": 2}


def outer_graph():
    builder = StateGraph(State)
    builder.add_node("host", host)
    builder.add_edge(START, "host")
    builder.add_edge("host", END)
    return builder.compile()


async def test_an_event_is_a_plain_dict_marked_with_its_task():
    events = [e async for e in inner_graph().astream({}, stream_mode="custom")]
    assert events == [{"event": "said", "n": 1}] and isinstance(events[0], TaskEvent)
    origin = events[0].origin
    assert origin.task.startswith("speak:") and [ns for ns, _ in origin.checkpoints] == [""]


async def test_a_relayed_event_keeps_the_origin_of_the_nested_task_that_sent_it():
    events = [e async for e in outer_graph().astream({}, stream_mode="custom")]
    assert events == [{"event": "hosting"}, {"event": "said", "n": 1, "via": "host"}]
    hosting, said = (e.origin for e in events)
    assert hosting.task.startswith("host:") and "|" not in hosting.task
    assert said.task.startswith(hosting.task + "|speak:")
    assert [ns for ns, _ in said.checkpoints] == ["", hosting.task]


def test_outside_a_graph_an_event_has_no_origin():
    assert relay({}, {"event": "x"}).origin is None
