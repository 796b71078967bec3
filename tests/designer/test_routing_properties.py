"""A workflow's route tests hold for any value a model wrote into the state: a test with an operand it accepts
answers True or False, never raising (designer/routing.py)."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from parley.designer.routing import check_operand, evaluate
from tests.support.strategies import PROPERTY, json_values, text

OPERATORS = ["eq", "ne", "gt", "gte", "lt", "lte", "in", "not_in", "contains", "not_contains", "matches", "truthy",
             "falsy"]


@PROPERTY
@given(op=st.sampled_from(OPERATORS), actual=st.one_of(text, json_values),
       expected=st.one_of(json_values, text, st.sampled_from([r"\d+", "^(yes|no)$", "(?i)answer", "."])))
def test_a_route_test_answers_true_or_false_for_any_value(op, actual, expected):
    assume(check_operand(op, expected) is None)
    assert evaluate(op, actual, expected) in (True, False)
