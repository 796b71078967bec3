"""Check a workflow document before anything is built: every problem, each naming its node and JSON path.

`validate_workflow(data)` returns the parsed `WorkflowSpec` or raises `WorkflowError` listing every
`Issue` found, e.g. "At node 'summarize' (nodes[1].inputs.prompt): unknown state key 'verdit'".
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from string import Formatter
from typing import Any

from pydantic import ValidationError

from parley.core.fields import model_id_problem
from parley.core.limits import MAX_WORKFLOW_NODES, MAX_WORKFLOW_ROUTES
from parley.designer.routing import check_operand, node_routes
from parley.designer.schemas import SchemaError, model_from_schema
from parley.designer.spec import (
    END,
    NODE_TYPES,
    SPEC_VERSION,
    STEER_KEYS,
    UNARY_OPS,
    ArbitrateNode,
    AwaitNode,
    ConditionNode,
    DebateNode,
    FanOutNode,
    LlmNode,
    RoundtableNode,
    StateKey,
    SynthesizeNode,
    TransformNode,
    VoteNode,
    WorkflowSpec,
)
from parley.designer.templates import Placeholder, TemplateError, check_path, parse_template, template_keys
from parley.graphs.panel.rules import RuleError, check_rule
from parley.nodes.answers import parse_rule

# The placeholders a fan_out's `config.revise_prompt` takes (Python format fields, filled per branch).
REVISE_FIELDS = ("answers", "question")


@dataclass(frozen=True)
class Issue:
    """One problem in a workflow: the node it concerns (when there is one), where, and what."""

    node: str | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"At node '{self.node}' ({self.path})" if self.node else f"At {self.path}"
        return f"{where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "path": self.path, "message": self.message, "detail": str(self)}


class WorkflowError(ValueError):
    """A workflow that cannot be compiled, with every issue found."""

    def __init__(self, issues: Sequence[Issue]) -> None:
        self.issues = list(issues)
        super().__init__("Invalid workflow: " + "; ".join(str(i) for i in self.issues))


# --- JSON paths -----------------------------------------------------------------------------


def json_path(parts: Iterable[str | int]) -> str:
    """`("nodes", 1, "inputs", "prompt")` → `nodes[1].inputs.prompt`."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_]*", part):
            out += f".{part}" if out else part
        else:
            out += f'["{part}"]'
    return out or "$"


def _node_at(raw: Any, parts: Sequence[str | int]) -> str | None:
    """The node id a path into the raw document concerns (an edge concerns its source)."""
    if len(parts) < 2 or not isinstance(raw, dict):
        return raw.get("entry") if isinstance(raw, dict) and parts[:1] == ["entry"] else None
    items = raw.get(parts[0])
    if parts[0] in ("nodes", "edges") and isinstance(items, list) and isinstance(parts[1], int):
        item = items[parts[1]] if parts[1] < len(items) else None
        value = item.get("id" if parts[0] == "nodes" else "from") if isinstance(item, dict) else None
        return value if isinstance(value, str) else None
    if parts[0] == "finish" and isinstance(items, list) and isinstance(parts[1], int) and parts[1] < len(items):
        value = items[parts[1]]
        return value if isinstance(value, str) else None
    return None


# --- schema errors (pydantic) ---------------------------------------------------------------


def _walk(raw: Any, loc: Sequence[Any]) -> tuple[list[str | int], bool]:
    """Follow pydantic's `loc` through the raw document, dropping the union tags pydantic inserts.

    Returns the path and whether it ended on a dict-key error (`[key]`).
    """
    parts: list[str | int] = []
    current = raw
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if part == "[key]":
            return parts, True
        if isinstance(current, dict) and part in current:
            current = current[part]
            parts.append(part)
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            current = current[part]
            parts.append(part)
        elif last or (isinstance(current, dict) and not isinstance(part, str)):
            parts.append(part)
        # else: a discriminated-union tag ("llm", "pick"), absent from the document itself
    return parts, False


def _allowed_fields(raw: Any, parts: Sequence[str | int]) -> list[str] | None:
    """For an unknown field inside a node's `inputs` or `config`, the fields that node type takes."""
    if len(parts) < 4 or parts[0] != "nodes" or parts[2] not in ("inputs", "config"):
        return None
    node = raw["nodes"][parts[1]]
    model = NODE_TYPES.get(node.get("type")) if isinstance(node, dict) else None
    if model is None:
        return None
    annotation = model.model_fields[parts[2]].annotation
    fields = getattr(annotation, "model_fields", None)
    return list(fields) if fields else None


def _describe(error: dict[str, Any], raw: Any, parts: list[str | int], key_error: bool) -> tuple[list, str]:
    kind, ctx = error["type"], error.get("ctx") or {}
    field = parts[-1] if parts else None
    if key_error:
        return parts, f"state key name '{field}' must be an identifier (letters, digits and '_', not first a digit)"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        tag_name = str(ctx.get("discriminator", "'type'")).strip("'")
        what = "node type" if tag_name == "type" else f"{tag_name}"
        expected = str(ctx.get("expected_tags", "")).replace("'", "")
        parts = [*parts, tag_name]
        if kind == "union_tag_not_found":
            return parts, f"{what} is missing; choose from {expected}"
        return parts, f"unknown {what} '{ctx.get('tag')}'; choose from {expected}"
    if kind == "missing":
        if field == "id" and parts[:1] == ["nodes"]:
            return parts, "node id is missing"
        return parts, f"'{field}' is required"
    if kind == "extra_forbidden":
        allowed = _allowed_fields(raw, parts)
        hint = f"; this node type takes: {', '.join(allowed)}" if allowed else ""
        return parts, f"unknown field '{field}'{hint}"
    if kind == "string_pattern_mismatch" and field == "id":
        return parts, (f"node id '{error.get('input')}' must start with a letter and hold only letters, digits, "
                       "'_' and '-'")
    if kind == "literal_error" and parts == ["version"]:
        return parts, f"unsupported version {error.get('input')!r}; this Parley reads version {SPEC_VERSION}"
    return parts, error["msg"]


def _too_large(data: dict[str, Any]) -> Issue | None:
    """The issue of a document with more nodes or routes than a workflow may have, found before it is parsed (parsing
    and checking a document costs time in its size)."""
    nodes = data.get("nodes")
    if isinstance(nodes, list) and len(nodes) > MAX_WORKFLOW_NODES:
        return Issue(None, "$.nodes", f"a workflow has at most {MAX_WORKFLOW_NODES} nodes ({len(nodes)} sent)")
    routes = len(data["edges"]) if isinstance(data.get("edges"), list) else 0
    for node in nodes if isinstance(nodes, list) else []:
        config = node.get("config") if isinstance(node, dict) else None
        cases = config.get("cases") if isinstance(config, dict) else None
        routes += len(cases) if isinstance(cases, list) else 0
    if routes > MAX_WORKFLOW_ROUTES:
        return Issue(None, "$.edges", f"a workflow has at most {MAX_WORKFLOW_ROUTES} routes (edges and condition "
                                      f"cases together; {routes} sent)")
    return None


def parse_spec(data: Any) -> WorkflowSpec:
    """Parse a workflow document into a `WorkflowSpec`; schema problems raise `WorkflowError`."""
    if isinstance(data, WorkflowSpec):
        return data
    if not isinstance(data, dict):
        raise WorkflowError([Issue(None, "$", "a workflow must be a JSON object")])
    if (too_large := _too_large(data)) is not None:
        raise WorkflowError([too_large])
    try:
        return WorkflowSpec.model_validate(data)
    except ValidationError as exc:
        issues = []
        for error in exc.errors():
            parts, key_error = _walk(data, error["loc"])
            parts, message = _describe(error, data, parts, key_error)
            issues.append(Issue(_node_at(data, parts), json_path(parts), message))
        raise WorkflowError(issues) from None


# --- meaning --------------------------------------------------------------------------------

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "number": (int, float), "integer": (int,), "boolean": (bool,),
    "object": (dict,), "array": (list,),
}


def type_matches(declared: str, value: Any) -> bool:
    """True when `value` is of the JSON type `declared` (`any` accepts everything; booleans are not numbers)."""
    if declared == "any":
        return True
    if isinstance(value, bool) and declared != "boolean":
        return False
    return isinstance(value, _JSON_TYPES[declared])


def _a(word: str) -> str:
    """The article for `word` as it is read aloud ("an llm", "an object", "a string")."""
    return "an" if word[:1] in "aeiou" or word == "llm" else "a"


def suggest(name: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


class _Checker:
    def __init__(self, spec: WorkflowSpec) -> None:
        self.spec = spec
        self.issues: list[Issue] = []
        self.ids = [n.id for n in spec.nodes]
        # Set when an id is duplicated or a route names no node: the topology checks need sound references.
        self.broken_refs = False

    def add(self, node: str | None, path: str, message: str) -> None:
        self.issues.append(Issue(node, path, message))

    def state_key(self, node: str | None, path: str, key: str) -> None:
        if key not in self.spec.state:
            self.add(node, path, f"unknown state key '{key}'{suggest(key, self.spec.state)}; declare it under state")

    def state_path(self, node: str | None, path: str, value: str) -> None:
        try:
            check_path(value)
        except TemplateError as exc:
            self.add(node, path, str(exc))
            return
        self.state_key(node, path, value.split(".", 1)[0])

    def template(self, node: str, path: str, text: str) -> None:
        try:
            keys = template_keys(text)
        except TemplateError as exc:
            self.add(node, path, str(exc))
            return
        for key in keys:
            self.state_key(node, path, key)

    def target(self, node: str | None, path: str, target: str) -> None:
        if target != END and target not in self.ids:
            self.broken_refs = True
            self.add(node, path, f"unknown node '{target}'{suggest(target, self.ids)}")

    def operand(self, node: str | None, path: str, op: str, value: Any) -> None:
        problem = None if op in UNARY_OPS else check_operand(op, value)
        if problem:
            self.add(node, path, problem)

    # the document, part by part

    def state(self) -> None:
        for name in STEER_KEYS if self.spec.steerable else ():
            if name in self.spec.state:
                self.add(None, f"state.{name}", f"'{name}' is kept by the workflow's await nodes; name the key otherwise")
        for name, key in self.spec.state.items():
            if key.has_default and key.default is not None and not type_matches(key.type, key.default):
                self.add(None, f"state.{name}.default", f"default {key.default!r} is not of type {key.type}")
            if key.reducer == "append" and key.type not in ("array", "any"):
                self.add(None, f"state.{name}.reducer", f"'append' needs an array key, but '{name}' is {key.type}")

    def ids_unique(self) -> None:
        first: dict[str, int] = {}
        for i, node_id in enumerate(self.ids):
            if node_id in first:
                self.broken_refs = True
                self.add(node_id, f"nodes[{i}].id", f"duplicate node id '{node_id}' (first at nodes[{first[node_id]}])")
            else:
                first[node_id] = i

    def output(self, i: int, node) -> None:
        path = f"nodes[{i}].output_key"
        key = node.output_key
        if key is None:
            if node.needs_output:
                self.add(node.id, path, f"{_a(node.type)} {node.type} node needs an output_key (a declared state key)")
            return
        if key not in self.spec.state:
            self.state_key(node.id, path, key)
            return
        declared: StateKey = self.spec.state[key]
        writes = node.output_type()
        compatible = (declared.reducer == "append" or "any" in (declared.type, writes) or declared.type == writes)
        if not compatible:
            self.add(node.id, path, f"{_a(node.type)} {node.type} node writes {_a(writes)} {writes}, "
                                    f"but state key '{key}' is declared {declared.type}")

    def node(self, i: int, node) -> None:
        base = f"nodes[{i}]"
        self.output(i, node)
        for slot, text in node.inputs.model_dump(exclude_none=True).items():
            self.template(node.id, f"{base}.inputs.{slot}", text)
        for name, value in (getattr(node.config, "options", None) or {}).items():  # a mode's models (`judge_model`)
            if name.endswith("model") and isinstance(value, str) and (problem := model_id_problem(value)):
                self.add(node.id, f"{base}.config.options.{name}", problem)
        if isinstance(node, LlmNode | SynthesizeNode) and node.config.output_schema is not None:
            try:
                output_model = model_from_schema(node.config.output_schema, node.id)
            except SchemaError as exc:
                self.add(node.id, f"{base}.config.output_schema.{exc.path}", str(exc))
            else:
                if isinstance(node, SynthesizeNode) and node.config.fallback is not None:
                    try:
                        output_model.model_validate(node.config.fallback)
                    except ValidationError as exc:
                        self.add(node.id, f"{base}.config.fallback",
                                 f"the fallback does not fit output_schema: {exc.errors()[0]['msg']}")
        if isinstance(node, TransformNode):
            self.transform(i, node)
        if isinstance(node, FanOutNode):
            self.fan_out(i, node)
        if isinstance(node, ArbitrateNode):
            self.placeholder(node.id, f"{base}.inputs.answers", node.inputs.answers, "a list of answers")
        if isinstance(node, DebateNode):
            try:
                check_rule(node.config.rule, node.config.answer_rule, node.config.panel_size)
            except RuleError as exc:
                self.add(node.id, f"{base}.config.{exc.param}", str(exc))
        if isinstance(node, VoteNode):
            self.placeholder(node.id, f"{base}.inputs.answers", node.inputs.answers, "a list of answers")
            try:
                parse_rule(node.config.rule)
            except ValueError as exc:
                self.add(node.id, f"{base}.config.rule", str(exc))
        if isinstance(node, ConditionNode):
            config = node.config
            self.state_path(node.id, f"{base}.config.key", config.key)
            for j, case in enumerate(config.cases):
                self.target(node.id, f"{base}.config.cases[{j}].goto", case.goto)
                self.operand(node.id, f"{base}.config.cases[{j}].value", case.op, case.value)
            self.target(node.id, f"{base}.config.default", config.default)
            if node.output_key and node.output_key == config.key.split(".", 1)[0]:
                self.add(node.id, f"{base}.output_key", "a condition node cannot write the key it routes on")
        if isinstance(node, AwaitNode) and node.config.on_end is not None:
            self.target(node.id, f"{base}.config.on_end", node.config.on_end)
        if isinstance(node, RoundtableNode) and isinstance(node.config.agents, list):
            if not any(not agent.isDevilsAdvocate for agent in node.config.agents):
                self.add(node.id, f"{base}.config.agents", "a round table needs at least one agent that is not the "
                                                           "devil's advocate")

    def placeholder(self, node: str, path: str, text: str, what: str) -> None:
        """A template that must pass a value through whole: one bare placeholder such as `{answers}`."""
        try:
            parts = parse_template(text)
        except TemplateError:
            return  # reported by `template`
        if not (len(parts) == 1 and isinstance(parts[0], Placeholder) and not parts[0].spec):
            self.add(node, path, f"must be one placeholder giving {what}, such as '{{answers}}', not {text!r}")

    def fan_out(self, i: int, node: FanOutNode) -> None:
        base, config = f"nodes[{i}]", node.config
        branches = node.branch_count()
        if not branches:
            self.add(node.id, f"{base}.config.branches", "a fan_out node needs config.branches or config.models")
        elif config.min_successes is not None and config.min_successes > branches:
            self.add(node.id, f"{base}.config.min_successes",
                     f"min_successes {config.min_successes} is more than the node's {branches} branches")
        if node.inputs.previous is not None:
            self.placeholder(node.id, f"{base}.inputs.previous", node.inputs.previous, "an earlier fan_out's list")
        if config.revise_prompt is not None:
            if node.inputs.previous is None:
                self.add(node.id, f"{base}.config.revise_prompt", "a revise_prompt needs inputs.previous, the "
                                                                  "answers to revise")
            try:
                fields = [f for _, f, _, _ in Formatter().parse(config.revise_prompt) if f is not None]
            except ValueError as exc:
                self.add(node.id, f"{base}.config.revise_prompt", f"bad template: {exc}")
            else:
                unknown = sorted(set(fields) - set(REVISE_FIELDS))
                if unknown:
                    self.add(node.id, f"{base}.config.revise_prompt",
                             f"unknown placeholder(s) {', '.join('{' + f + '}' for f in unknown)}; a revise_prompt "
                             "takes {answers} and {question} (write '{{' and '}}' for literal braces)")

    def transform(self, i: int, node: TransformNode) -> None:
        base, config = f"nodes[{i}]", node.config
        if config.op == "pick":
            self.state_path(node.id, f"{base}.config.key", config.key)
        elif config.op == "join":
            for j, key in enumerate(config.keys):
                self.state_path(node.id, f"{base}.config.keys[{j}]", key)
        if config.op == "format" and node.inputs.template is None:
            self.add(node.id, f"{base}.inputs.template", "a format transform needs inputs.template")
        if config.op != "format" and node.inputs.template is not None:
            self.add(node.id, f"{base}.inputs.template", f"a {config.op} transform takes no template")

    def edges(self) -> None:
        conditions = {n.id for n in self.spec.nodes if isinstance(n, ConditionNode)}
        for j, edge in enumerate(self.spec.edges):
            source = edge.source
            if source not in self.ids:
                self.broken_refs = True
                self.add(source, f"edges[{j}].from", f"unknown node '{source}'{suggest(source, self.ids)}")
            elif source in conditions:
                self.add(source, f"edges[{j}].from", "a condition node routes through config.cases and "
                                                     "config.default; it takes no edges")
            self.target(source, f"edges[{j}].to", edge.target)
            if edge.when is not None:
                self.state_path(source, f"edges[{j}].when.key", edge.when.key)
                self.operand(source, f"edges[{j}].when.value", edge.when.op, edge.when.value)

    def ends(self) -> None:
        entry = self.spec.entry
        if entry not in self.ids:
            self.broken_refs = True
            self.add(entry, "entry", f"unknown node '{entry}'{suggest(entry, self.ids)}")
        for k, node_id in enumerate(self.spec.finish):
            node = self.spec.node(node_id)
            if node is None:
                self.broken_refs = True
                self.add(node_id, f"finish[{k}]", f"unknown node '{node_id}'{suggest(node_id, self.ids)}")
            elif isinstance(node, ConditionNode):
                self.add(node_id, f"finish[{k}]", f"a condition node finishes through a case with goto '{END}'")

    def topology(self) -> None:
        """Unreachable nodes and loops that can never be left."""
        routes = node_routes(self.spec)
        index = {node_id: i for i, node_id in enumerate(self.ids)}
        seen, todo = {self.spec.entry}, [self.spec.entry]
        while todo:
            for target in routes[todo.pop()].targets():
                if target != END and target not in seen:
                    seen.add(target)
                    todo.append(target)
        for i, node_id in enumerate(self.ids):
            if node_id not in seen:
                self.add(node_id, f"nodes[{i}]", f"unreachable: no route leads to it from the entry node "
                                                 f"'{self.spec.entry}'")
        for component in _cycles({n: routes[n].targets() - {END} for n in self.ids if n in seen}):
            # A loop ends only where a node may choose a route that activates nothing inside it.
            leaves = any(not (choice & component) for n in component for choice in routes[n].choices())
            if not leaves:
                members = sorted(component, key=index.__getitem__)
                first = members[0]
                listed = " → ".join(f"'{m}'" for m in members)
                self.add(first, f"nodes[{index[first]}]", f"the loop through {listed} has no exit: every route from "
                         "these nodes leads back into it; add an edge with `when` or a condition case that leaves it")


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of `graph` that contain a cycle (Tarjan's algorithm, with an explicit
    stack: a workflow of thousands of nodes must not exhaust Python's recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            succ = next((s for s in successors if s in graph), None)
            if succ is not None:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                elif succ in on_stack:
                    low[node] = min(low[node], index[succ])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(component)
    return found


def check_spec(spec: WorkflowSpec) -> list[Issue]:
    """Every problem in a parsed workflow's meaning (references, types, topology)."""
    checker = _Checker(spec)
    checker.state()
    checker.ids_unique()
    for i, node in enumerate(spec.nodes):
        checker.node(i, node)
    checker.edges()
    checker.ends()
    # Reachability and loops are only meaningful once every route names a real, unique node.
    if not checker.broken_refs:
        checker.topology()
    return checker.issues


def validate_workflow(data: Any) -> WorkflowSpec:
    """Parse and check a workflow document.

    Raises:
        WorkflowError: listing every issue, each naming its node and JSON path.
    """
    spec = parse_spec(data)
    issues = check_spec(spec)
    if issues:
        raise WorkflowError(issues)
    return spec
