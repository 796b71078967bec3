"""`trace_config`: a handler given with it (a tracer, in real use) sees the run's identity on every model call."""

from __future__ import annotations

from langchain_core.callbacks import BaseCallbackHandler

from parley.core.telemetry import trace_config
from parley.graphs.panel import PanelContext, build_panel_graph
from parley.llm.factory import ModelFactory


class Seen(BaseCallbackHandler):
    run_inline = True

    def __init__(self) -> None:
        self.models: list[tuple[dict, object]] = []
        self.roots: list[str] = []

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kwargs) -> None:
        if parent_run_id is None:
            self.roots.append(kwargs.get("name"))

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None, metadata=None, **kwargs):
        self.models.append((dict(metadata or {}), parent_run_id))


def test_trace_config_names_tags_and_identifies_the_run():
    config = trace_config("run_1", "panel", "acme", "ada")
    assert config["run_name"] == "parley.panel" and set(config["tags"]) == {"parley", "parley:panel"}
    assert config["metadata"] == {"parley_run_id": "run_1", "parley_kind": "panel", "parley_workspace": "acme",
                                  "parley_user": "ada"}


async def test_every_model_call_of_a_graph_run_carries_the_run_id(parley_env, llm):
    seen = Seen()
    graph = build_panel_graph().compile()
    state = {"messages": [{"role": "user", "content": "CAP?"}], "mode": "debate",
             "models": ["openai:gpt-5", "anthropic:claude-sonnet-4-5", "google:gemini-2.5-pro"],
             "arbitrators": ["anthropic:claude-opus-4-5"]}
    config = {**trace_config("run_42", "panel", "acme", "ada"), "callbacks": [seen]}
    await graph.ainvoke(state, config, context=PanelContext(models=ModelFactory(parley_env)))
    assert len(seen.models) == 4  # three panelists and the arbitrator
    assert all(meta["parley_run_id"] == "run_42" and parent is not None for meta, parent in seen.models)
    assert seen.roots == ["parley.panel"]
