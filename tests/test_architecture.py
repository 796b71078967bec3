"""docs/architecture.md's node table tells the truth: each capability node's row names the graphs that really use it
(read off the compiled graphs: their nodes and routers, through `nodes.capability`), and each is used by two or more.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

from parley.designer import compile_workflow
from parley.evals.judge import judge_graph
from parley.graphs.duel import graph as duel_graph
from parley.graphs.multiagent_debate import graph as debate_graph
from parley.graphs.panel import graph as panel_graph
from parley.graphs.roundtable import graph as roundtable_graph
from parley.nodes.arbitrate import arbitrate
from parley.nodes.capability import CAPABILITIES, capability_of
from parley.nodes.convergence import score_convergence
from parley.nodes.fan_out import FanOut
from parley.nodes.judge import judge
from parley.nodes.select_opponent import select_opponent
from parley.nodes.speak import speak
from parley.nodes.steer import boundary
from parley.nodes.synthesize import synthesize
from tests.designer.conftest import wf

ROOT = Path(__file__).resolve().parents[1]
FACTORIES = {"speak": speak, "select_opponent": select_opponent, "fan_out": FanOut, "arbitrate": arbitrate,
             "judge": judge, "score_convergence": score_convergence, "synthesize": synthesize, "boundary": boundary}

# One workflow with each capability node type the designer offers, beside the shipped examples.
CAPABILITY_WORKFLOW = wf(
    [{"id": "cast", "type": "select_opponent", "config": {"user_profile": {"name": "Ada"}}, "output_key": "opponent"},
     {"id": "say", "type": "llm", "inputs": {"prompt": "Answer {topic}"}, "output_key": "answer"},
     {"id": "settle", "type": "arbitrate", "inputs": {"answers": "{answers}"}, "output_key": "best"},
     {"id": "verdict", "type": "judge", "inputs": {"topic": "{topic}", "messages": "{turns}", "user_profile": "Ada",
                                                   "opponent_profile": "Bo"}, "output_key": "judged"},
     {"id": "sum", "type": "synthesize", "config": {"output_schema": {
         "type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}},
      "inputs": {"prompt": "Sum up {answer}"}, "output_key": "verdict"},
     {"id": "score", "type": "score_convergence", "inputs": {"transcript": "{outcome.transcript}"},
      "output_key": "convergence"},
     {"id": "review", "type": "await", "config": {"on_end": "__end__"}}],
    {"topic": "string", "question": "string", "opponent": "object", "answer": "string", "answers": "array",
     "best": "string", "turns": "array", "judged": "object", "verdict": "object", "outcome": "object", "convergence": "object"},
    [{"from": "cast", "to": "say"}, {"from": "say", "to": "settle"}, {"from": "settle", "to": "verdict"},
     {"from": "verdict", "to": "sum"}, {"from": "sum", "to": "score"}, {"from": "score", "to": "review"}],
    entry="cast", finish=["review"],
)


def workflows() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((ROOT / "designer" / "examples").glob("*.json"))]


def nested_graph(fn):
    """The compiled graph a node runs as its own steps (a designer capability node's `nested_graph`, on it or on
    what it wraps); None for a mode nested whole, which is not counted."""
    while fn is not None:
        if (graph := getattr(fn, "nested_graph", None)) is not None:
            return graph
        fn = getattr(fn, "__wrapped__", None)
    return None


def capabilities_in(compiled) -> set[str]:
    """The capabilities a compiled graph's nodes and routers are, with those of the graphs a node wraps (a mode
    nested whole is not looked into)."""
    builder = compiled.builder
    functions = [spec.runnable for spec in builder.nodes.values()]
    functions += [branch.path for branches in builder.branches.values() for branch in branches.values()]
    found = set()
    for runnable in functions:
        for fn in (getattr(runnable, "afunc", None), getattr(runnable, "func", None), runnable):
            if (name := capability_of(fn)) is not None:
                found.add(name)
            if (nested := nested_graph(fn)) is not None:
                found |= capabilities_in(nested)
    return found


def used_by() -> dict[str, set[str]]:
    graphs = {"duel": [duel_graph], "panel": [panel_graph], "roundtable": [roundtable_graph],
              "multiagent_debate": [debate_graph], "evals": [judge_graph],
              "designer": [compile_workflow(doc) for doc in [*workflows(), CAPABILITY_WORKFLOW]]}
    users: dict[str, set[str]] = {name: set() for name in CAPABILITIES}
    for graph_name, compiled in graphs.items():
        for one in compiled:
            for capability in capabilities_in(one):
                users[capability].add(graph_name)
    return users


def table_rows() -> list[tuple[str, str, set[str]]]:
    """(node, module, graphs) of each row of the architecture page's node table."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text.split("<!-- node-table", 1)[1].split("<!-- /node-table -->", 1)[0]
    rows = []
    for line in table.splitlines()[3:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3:
            continue
        node = re.match(r"`([^`]+)`", cells[0]).group(1)
        module = cells[1].strip("`")
        graphs = {re.sub(r"\(.*?\)", "", g).strip() for g in re.sub(r"\(.*?\)", "", cells[2]).split(",")}
        rows.append((node, module, graphs - {""}))
    return rows


def module_path(factory) -> str:
    return str(Path(inspect.getsourcefile(factory)).relative_to(ROOT))


def test_every_capability_node_is_used_by_two_graphs_or_more():
    users = used_by()
    assert {name: graphs for name, graphs in users.items() if len(graphs) < 2} == {}


def test_the_node_table_names_the_graphs_that_use_each_capability_node():
    users = used_by()
    rows = {(node, module): graphs for node, module, graphs in table_rows()}
    for name, factory in FACTORIES.items():
        assert rows.get((name, module_path(factory))) == users[name], name


def test_a_node_that_is_not_marked_is_no_capability():
    """What the check reads can be wrong: a plain function is no capability, and a wrapper counts as what it wraps."""

    def plain(state):
        return state

    def wrapper(state):
        return state

    assert capability_of(plain) is None
    wrapper.__wrapped__ = speak(name="say", prompt=lambda state, ctx: [], speaker={"id": "x", "name": "x"},
                                writes="out")
    assert capability_of(wrapper) == "speak"
