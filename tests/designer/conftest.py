"""Designer fixtures: a run context whose models are the scripted server, and a helper running a workflow."""

from __future__ import annotations

from typing import Any

import pytest

from parley.core.settings import Settings
from parley.designer import WorkflowContext, prepare_input, stream_workflow, validate_workflow
from parley.llm.factory import ModelFactory


@pytest.fixture
def factory(llm, tmp_path) -> ModelFactory:
    """A model factory sending every model id to the scripted server (no database needed)."""
    settings = Settings(openai_base_url=llm.base_url, openai_api_key="sk-test", openai_model="openai:gpt-4o-mini",
                        parley_home=tmp_path, _env_file=None)
    return ModelFactory(settings)


@pytest.fixture
def ctx(factory) -> WorkflowContext:
    return WorkflowContext(models=factory)


async def run_workflow(document: dict[str, Any], values: dict[str, Any] | None, ctx: WorkflowContext,
                       ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run a workflow document; return its events (without `done`) and the `done` event."""
    spec = validate_workflow(document)
    events = [e async for e in stream_workflow(spec, prepare_input(spec, values), context=ctx)]
    assert events[-1]["event"] == "done"
    return events[:-1], events[-1]


def wf(nodes: list[dict], state: dict[str, Any], edges: list[dict] | None = None, *, entry: str | None = None,
       finish: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """A workflow document, compactly; `state` values are a type name or a full key declaration."""
    return {
        "name": "test",
        "state": {k: ({"type": v} if isinstance(v, str) else v) for k, v in state.items()},
        "nodes": nodes,
        "edges": edges or [],
        "entry": entry or nodes[0]["id"],
        "finish": finish if finish is not None else [],
        **extra,
    }
