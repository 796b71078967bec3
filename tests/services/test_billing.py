"""A run's bill: what the services reserve rides in the run's input, and runs started before bills still settle
what they reserved."""

from __future__ import annotations

from parley.services.billing import Bill, bill_of


def test_a_bill_rides_in_the_run_input_whole():
    bill = Bill(usage="debate", request_id="chatcmpl-1", credit=0.25)
    assert bill_of({"kind": "panel", "input": {"bill": bill.dump()}}) == bill


def test_a_run_started_before_bills_settles_what_its_mode_reserved():
    panel = {"kind": "panel", "input": {"reserved": 0.5, "plan": {"mode": "single"}, "completion": {"id": "c1"}}}
    assert bill_of(panel) == Bill(usage="chat", request_id="c1", credit=0.5)
    table = {"kind": "roundtable", "input": {"reserved": 1200}}
    assert bill_of(table) == Bill(usage="roundtable", allowance=1200)
    assert bill_of({"kind": "workflow", "input": {}}) == Bill(usage="workflow", takes_allowance=True)
    assert bill_of({"kind": "duel", "input": {"topic": "t"}}) == Bill(usage="duel")
