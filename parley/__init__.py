"""Parley in your own code: multi-agent debates as LangGraph graphs and nodes.

The names below are Parley's public Python API (docs/python.md shows each at work). Everything else lives in
the layers under this package (`parley.graphs`, `parley.nodes`, `parley.llm`, ...), which you may import too,
but whose names may move between minor versions.

    import asyncio
    import parley

    graph = parley.build_panel_graph().compile()
    answer = asyncio.run(graph.ainvoke(parley.question_input("Monolith or microservices?")))
    print(answer["answer"])

Importing `parley` loads none of the modes: each name is imported the first time it is read, so a script that
uses the panel does not pay for the round table, and nothing here loads FastAPI, uvicorn, pymongo or the MCP
SDK (the HTTP service and the run engine are `parley.api` and `parley.runs`, imported when you ask for them).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# Each public name → the module that defines it (read on first use, see `__getattr__`).
_EXPORTS: dict[str, str] = {
    # The duel: a user's persona agent against an opponent chosen for the topic, judged.
    "build_duel_graph": "parley.graphs.duel",
    "DuelInput": "parley.graphs.duel",
    "DuelOutput": "parley.graphs.duel",
    "DuelContext": "parley.graphs.duel",
    # The panel: one request to models of distinct families, then a decision; and the panel as a node.
    "build_panel_graph": "parley.graphs.panel",
    "PanelInput": "parley.graphs.panel",
    "PanelOutput": "parley.graphs.panel",
    "PanelContext": "parley.graphs.panel",
    "panel_input": "parley.graphs.panel",
    "question_input": "parley.graphs.panel",
    "panel_node": "parley.graphs.panel",
    # The round table: persona agents and a devil's advocate argue over rounds until they converge.
    "build_round_table_graph": "parley.graphs.roundtable",
    "RoundTableInput": "parley.graphs.roundtable",
    "RoundTableOutput": "parley.graphs.roundtable",
    "RoundTableContext": "parley.graphs.roundtable",
    # Du et al.'s multi-agent debate.
    "build_multiagent_debate_graph": "parley.graphs.multiagent_debate",
    "MultiAgentDebateContext": "parley.graphs.multiagent_debate",
    # The capability nodes every mode is built from.
    "speak": "parley.nodes.speak",
    "Speaker": "parley.nodes.speak",
    "LengthRule": "parley.nodes.speak",
    "FanOut": "parley.nodes.fan_out",
    "arbitrate": "parley.nodes.arbitrate",
    "judge": "parley.nodes.judge",
    "judge_answers": "parley.nodes.judge",
    "score_convergence": "parley.nodes.convergence",
    "synthesize": "parley.nodes.synthesize",
    "select_opponent": "parley.nodes.select_opponent",
    "vote": "parley.nodes.vote",
    "rank": "parley.nodes.rank",
    "boundary": "parley.nodes.steer",
    # Designer workflows (JSON) compiled to graphs.
    "compile_workflow": "parley.designer",
    "load_example": "parley.designer",
    # Models: the per-run context every graph takes, the factory that points it at an endpoint, usage.
    "RunContext": "parley.nodes.context",
    "ModelFactory": "parley.llm.factory",
    "Settings": "parley.core.settings",
    "UsageLedger": "parley.llm.usage",
    "model_family": "parley.llm.families",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562) and keep it here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'parley' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # what type checkers and editors see: the same names, imported eagerly
    from parley.core.settings import Settings
    from parley.designer import compile_workflow, load_example
    from parley.graphs.duel import DuelContext, DuelInput, DuelOutput, build_duel_graph
    from parley.graphs.multiagent_debate import MultiAgentDebateContext, build_multiagent_debate_graph
    from parley.graphs.panel import (
        PanelContext,
        PanelInput,
        PanelOutput,
        build_panel_graph,
        panel_input,
        panel_node,
        question_input,
    )
    from parley.graphs.roundtable import (
        RoundTableContext,
        RoundTableInput,
        RoundTableOutput,
        build_round_table_graph,
    )
    from parley.llm.factory import ModelFactory
    from parley.llm.families import model_family
    from parley.llm.usage import UsageLedger
    from parley.nodes.arbitrate import arbitrate
    from parley.nodes.context import RunContext
    from parley.nodes.convergence import score_convergence
    from parley.nodes.fan_out import FanOut
    from parley.nodes.judge import judge, judge_answers
    from parley.nodes.rank import rank
    from parley.nodes.select_opponent import select_opponent
    from parley.nodes.speak import LengthRule, Speaker, speak
    from parley.nodes.steer import boundary
    from parley.nodes.synthesize import synthesize
    from parley.nodes.vote import vote
