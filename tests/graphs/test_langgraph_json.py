"""`langgraph.json` names the compiled graphs, so the same graphs run on LangGraph Server."""

import importlib.util
import json
import sys
from pathlib import Path

from langgraph.graph.state import CompiledStateGraph

ROOT = Path(__file__).resolve().parents[2]


def test_every_listed_graph_is_a_compiled_graph():
    config = json.loads((ROOT / "langgraph.json").read_text())
    assert set(config["graphs"]) == {"duel", "panel", "roundtable"}
    for name, target in config["graphs"].items():
        path, attr = target.split(":")
        spec = importlib.util.spec_from_file_location(f"lg_{name}", ROOT / path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # as LangGraph Server does: type hints resolve through it
        spec.loader.exec_module(module)
        graph = getattr(module, attr)
        assert isinstance(graph, CompiledStateGraph) and graph.name == name
