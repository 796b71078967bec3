"""Where each node of a workflow can go next, and the tests that decide it.

Shared by the validator (reachability, loops without an exit) and the compiler (conditional edges).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parley.core.patterns import PatternError, user_pattern
from parley.designer.spec import END, AwaitNode, ConditionNode, Predicate, WorkflowSpec
from parley.designer.templates import MissingValue, lookup


# The state key an `await` node writes when the run is ended early (`nodes.steer.SteerState.stopped_by`).
STOPPED_KEY = "stopped_by"


@dataclass
class Routing:
    """The ways out of one node.

    `plain` edges all fire together; `when` edges are tried in order and the first passing one is taken
    instead (the plain edges are then the fallback); a condition node picks one of its `cases` or its default.
    """

    plain: list[str] = field(default_factory=list)
    when: list[tuple[Predicate, str]] = field(default_factory=list)
    cases: ConditionNode | None = None

    @property
    def fallback(self) -> list[str]:
        return self.plain or [END]

    def choices(self) -> list[set[str]]:
        """Each set of nodes one run of this node may activate."""
        if self.cases is not None:
            config = self.cases.config
            return [{case.goto} for case in config.cases] + [{config.default}]
        if self.when:
            return [{target} for _, target in self.when] + [set(self.fallback)]
        return [set(self.fallback)]

    def targets(self) -> set[str]:
        return set().union(*self.choices())


def node_routes(spec: WorkflowSpec) -> dict[str, Routing]:
    """The routing of every node, from `edges`, `finish` and condition nodes' cases."""
    routes = {node.id: Routing(cases=node if isinstance(node, ConditionNode) else None) for node in spec.nodes}
    for edge in spec.edges:
        route = routes.get(edge.source)
        if route is None:
            continue
        if edge.when is not None:
            route.when.append((edge.when, edge.target))
        elif edge.target not in route.plain:
            route.plain.append(edge.target)
    for node_id in spec.finish:
        if node_id in routes and END not in routes[node_id].plain:
            routes[node_id].plain.append(END)
    for node in spec.nodes:
        if isinstance(node, AwaitNode):  # ended by the person or the budget: its `on_end`, before any other way out
            routes[node.id].when.insert(0, (Predicate(key=STOPPED_KEY, op="truthy"), node.config.on_end or END))
    return routes


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def evaluate(op: str, actual: Any, expected: Any) -> bool:
    """Apply one comparison; values that cannot be compared (a string against a number) fail the test."""
    try:
        match op:
            case "eq":
                return actual == expected
            case "ne":
                return actual != expected
            case "gt" | "gte" | "lt" | "lte":
                if actual is None or (_number(actual) != _number(expected)):
                    return False
                return {"gt": actual > expected, "gte": actual >= expected,
                        "lt": actual < expected, "lte": actual <= expected}[op]
            case "in":
                return actual in expected
            case "not_in":
                return actual not in expected
            case "contains":
                return actual is not None and expected in actual
            case "not_contains":
                return actual is None or expected not in actual
            case "matches":
                return isinstance(actual, str) and user_pattern(expected).search(actual) is not None
            case "truthy":
                return bool(actual)
            case "falsy":
                return not actual
    except TypeError:
        return False
    raise ValueError(f"unknown operator '{op}'")


def read(state: Mapping[str, Any], path: str, defaults: Mapping[str, Any]) -> Any:
    """A state value for a test; an absent value is None rather than an error, so `falsy` can test for it."""
    try:
        return lookup(state, path, defaults)
    except MissingValue:
        return None


def check_operand(op: str, value: Any) -> str | None:
    """Why `value` cannot be compared with `op`, or None when it can."""
    if op in ("in", "not_in") and not isinstance(value, list):
        return f"'{op}' needs a list as value"
    if op in ("gt", "gte", "lt", "lte") and not _number(value):
        return f"'{op}' needs a number as value"
    if op in ("contains", "not_contains") and value is None:
        return f"'{op}' needs a value"
    if op == "matches":
        if not isinstance(value, str):
            return "'matches' needs a regular expression as value"
        try:
            user_pattern(value)
        except PatternError as exc:
            return f"bad regular expression: {exc}"
    return None
