"""What a listener of a resumed run is shown, and which events of a crashed run stand: pure rules, no servers."""

from __future__ import annotations

import asyncio

from parley.nodes.events import Origin
from parley.runs.survival import EventBarrier, SavedGraph, namespaces, survives
from parley.runs.events import listener_view


def rows(*events: tuple) -> list[dict]:
    return [{"seq": seq, "event": name, "data": data, **extra} for seq, name, data, *more in events
            for extra in (more[0] if more else {},)]


LOG = rows(
    (5, "message", {"n": 1}),
    (6, "start", {}, {"void": True}),
    (7, "chunk", {"c": "a"}, {"void": True}),
    (8, "chunk", {"c": "b"}, {"void": True}),
    (9, "retract", {"seqs": [6, 7, 8], "reason": "r"}),
    (10, "start", {}),
)


def test_a_listener_who_saw_part_of_a_cut_off_turn_is_told_to_drop_what_it_saw():
    shown = listener_view(LOG[3:], after=7)  # it had events up to 7
    assert [(e.seq, e.event) for e in shown] == [(9, "retract"), (10, "start")]
    assert shown[0].data == {"seqs": [6, 7], "reason": "r"}


def test_a_listener_who_saw_none_of_it_never_sees_it():
    assert [(e.seq, e.event) for e in listener_view(LOG, after=4)] == [(5, "message"), (10, "start")]
    assert [e.seq for e in listener_view(LOG[1:], after=5)] == [10]


def origin(task: str, **checkpoints: str) -> Origin:
    return Origin(task, tuple(sorted(checkpoints.items())))


SAVED = {
    "": SavedGraph(ids={"c1", "c2", "c3"}, latest="c3", written={"c3": {"t_done"}}),
    "debate:t_open": SavedGraph(ids={"n1", "n2"}, latest="n2", written={"n2": {"p_done"}}),
}


def test_events_of_tasks_whose_step_or_result_was_saved_stand():
    assert survives(origin("turn:t_old", **{"": "c2"}), SAVED)  # c2 has a saved successor: its step finished
    assert survives(origin("turn:t_done", **{"": "c3"}), SAVED)  # its own result was saved
    assert survives(None, SAVED)  # sent by no task (the engine's own)


def test_events_of_tasks_that_will_run_again_are_void():
    assert not survives(origin("turn:t_cut", **{"": "c3"}), SAVED)  # running when the worker died
    assert not survives(origin("turn:t_lost", **{"": "c4"}), SAVED)  # started from a checkpoint never saved


def test_inside_a_task_that_runs_again_its_nested_graph_decides():
    inner = {"": "c3", "debate:t_open": "n2"}
    assert survives(origin("debate:t_open|panelist:p_done", **inner), SAVED)
    assert not survives(origin("debate:t_open|panelist:p_cut", **inner), SAVED)
    assert survives(origin("debate:t_open|panelist:p_old", **{"": "c3", "debate:t_open": "n1"}), SAVED)
    assert not survives(origin("debate:t_gone|panelist:p", **{"": "c3", "debate:t_gone": "m1"}), SAVED)
    assert namespaces([origin("debate:t_open|panelist:p", **inner)]) == {"", "debate:t_open"}


async def test_the_barrier_holds_until_every_event_received_before_is_stored():
    barrier = EventBarrier()
    barrier.received_one()
    barrier.received_one()
    waiting = asyncio.create_task(barrier.wait())
    await asyncio.sleep(0)  # the wait begins
    barrier.received_one()  # received after the wait began: not waited for
    barrier.stored_upto(1)
    await asyncio.sleep(0)
    assert not waiting.done()
    barrier.stored_upto(2)
    await asyncio.wait_for(waiting, 1)
    stuck = asyncio.create_task(barrier.wait())
    barrier.release()  # the writer stopped: nobody waits forever
    await asyncio.wait_for(stuck, 1)
