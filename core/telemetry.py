"""Tracing: the LangChain/LangGraph config that names a run and tags every span it makes.

LangChain and LangGraph send traces themselves when told to by environment variables (LangSmith:
`LANGSMITH_TRACING=true`, `LANGSMITH_API_KEY`, `LANGSMITH_PROJECT`; OpenTelemetry through LangSmith's
exporter: `LANGSMITH_OTEL_ENABLED=true` or `LANGSMITH_TRACING_MODE=otel`, `OTEL_EXPORTER_OTLP_ENDPOINT`;
see the README). Parley only adds what identifies a run: pass `trace_config(...)` as the `config` of
the graph call, and its metadata is inherited by every child run, so each span (graph, node, model
call) carries `parley_run_id`; the OpenTelemetry exporter writes it as `langsmith.metadata.parley_run_id`.
"""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig

RUN_ID_KEY = "parley_run_id"


def trace_config(run_id: str, kind: str, workspace: str, user: str) -> RunnableConfig:
    """The config for one run's graph call: a readable root name, tags to filter by, and the run's identity.

    Args:
        run_id: the run's id (a duel's debate id, a panel's completion id, a workflow run id …).
        kind: `duel`, `panel`, `roundtable` or `workflow`.
        workspace: the workspace the run is billed to.
        user: the user who started it.
    """
    return {
        "run_name": f"parley.{kind}",
        "tags": ["parley", f"parley:{kind}"],
        "metadata": {RUN_ID_KEY: run_id, "parley_kind": kind, "parley_workspace": workspace, "parley_user": user},
    }
