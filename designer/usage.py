"""Usage figures of a workflow run: tokens, cost and calls, in total, per model and per node."""

from __future__ import annotations

from typing import Any

from parley.llm.usage import UsageLedger, UsageRecord


def usage_summary(records: list[UsageRecord]) -> dict[str, Any]:
    """Tokens, cost and calls of a list of usage records, with a row per model."""
    ledger = UsageLedger(list(records))
    models = [
        {"model": model, "inputTokens": int(row["input_tokens"]), "outputTokens": int(row["output_tokens"]),
         "costUsd": round(float(row["cost"]), 8), "calls": int(row["calls"])}
        for model, row in ledger.by_model().items()
    ]
    return {
        "inputTokens": ledger.input_tokens,
        "outputTokens": ledger.total_tokens - ledger.input_tokens,
        "totalTokens": ledger.total_tokens,
        "costUsd": round(ledger.total_cost, 8),
        "calls": len(ledger.records),
        **({"toolCalls": ledger.tool_calls} if ledger.tool_calls else {}),
        "models": models,
    }


def run_usage(ledger: UsageLedger) -> dict[str, Any]:
    """A run's usage, with each node's under `nodes` (every call records the node that made it)."""
    records = ledger.records
    nodes = dict.fromkeys([*ledger.nodes, *(r.node for r in records if r.node is not None)])
    return {**usage_summary(records),
            "nodes": {node: usage_summary([r for r in records if r.node == node]) for node in nodes}}
