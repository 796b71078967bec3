"""The modes' bounds are said once (core/limits.py) and every door says the same: the OpenAPI document (HTTP
routes and the designer's workflow schema), the CLI's options and the nodes that keep them."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from parley.api.main import create_app
from parley.cli.main import app as cli_app
from parley.core.limits import (
    DEFAULT_DUEL_ROUNDS,
    DEFAULT_PANEL_SIZE,
    MAX_DUEL_ROUNDS,
    MAX_NODE_RETRIES,
    MAX_PANEL_SIZE,
    MAX_TABLE_ROUNDS,
    MAX_TABLE_SEATS,
    MIN_DUEL_ROUNDS,
    MIN_PANEL_SIZE,
)
from parley.graphs.duel import DuelContext
from parley.graphs.panel.steps import ANSWER_LETTERS, pick_panelists
from parley.graphs.roundtable import RoundTableContext


def _properties(name: str) -> dict[str, dict]:
    """Every property called `name` in the OpenAPI document's schemas, by schema, its integer branch unwrapped."""
    found = {}
    for schema_name, schema in create_app().openapi()["components"]["schemas"].items():
        prop = schema.get("properties", {}).get(name)
        if prop is not None:
            found[schema_name] = next((b for b in prop.get("anyOf", []) if b.get("type") == "integer"), prop)
    return found


def _option(*path: str, name: str) -> Any:
    command = typer.main.get_command(cli_app)
    for part in path:
        command = command.commands[part]
    return next(p for p in command.params if p.name == name)


def test_every_panel_size_in_the_api_and_the_designer_is_the_one_range():
    sizes = _properties("panel_size") | _properties("panelSize")
    assert {"PanelConfig", "DebateConfig", "RouterCreate", "RouterUpdate"} <= set(sizes)
    assert {(s["minimum"], s["maximum"]) for s in sizes.values()} == {(MIN_PANEL_SIZE, MAX_PANEL_SIZE)}
    assert sizes["PanelConfig"]["default"] == sizes["RouterCreate"]["default"] == DEFAULT_PANEL_SIZE
    option = _option("ask", name="panel_size")
    assert (option.min, option.max) == (MIN_PANEL_SIZE, MAX_PANEL_SIZE)


def test_every_duel_rounds_bound_is_the_one_range():
    rounds = {name: prop for name, prop in _properties("rounds").items() if prop.get("type") == "integer"}
    assert set(rounds) == {"DebateBody", "DuelConfig"}  # the route's body and the designer's duel node
    assert {(r["minimum"], r["maximum"]) for r in rounds.values()} == {(MIN_DUEL_ROUNDS, MAX_DUEL_ROUNDS)}
    option = _option("debate", name="rounds")
    assert (option.min, option.max, option.default) == (MIN_DUEL_ROUNDS, MAX_DUEL_ROUNDS, DEFAULT_DUEL_ROUNDS)
    assert DuelContext().rounds == DEFAULT_DUEL_ROUNDS


def test_workflow_node_retries_and_the_round_tables_bounds_come_from_the_limits():
    retries = _properties("retries")
    assert len(retries) >= 6 and {r["maximum"] for r in retries.values()} == {MAX_NODE_RETRIES}
    table = RoundTableContext()
    assert (table.max_seats, table.max_rounds) == (MAX_TABLE_SEATS, MAX_TABLE_ROUNDS)


def test_the_panel_seats_as_many_as_the_limit_and_no_more():
    models = [f"vendor{i}:model-{chr(97 + i)}" for i in range(MAX_PANEL_SIZE + 1)]
    assert len(ANSWER_LETTERS) == MAX_PANEL_SIZE  # an arbitrator can tell every seat's answer apart
    assert len(pick_panelists(models, MAX_PANEL_SIZE)) == MAX_PANEL_SIZE
    for size in (MIN_PANEL_SIZE - 1, MAX_PANEL_SIZE + 1):
        with pytest.raises(ValueError, match="panel size"):
            pick_panelists(models, size)
