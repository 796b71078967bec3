"""Prometheus metrics every Parley process records, and their exposition for `GET /metrics`.

The definitions live here, below `api/`, so the model layer (`llm/`) can record into them
without importing FastAPI. Each behaviour records through one function (`record_run`,
`record_model_call`, `sse_listener`, `record_rate_limited`, `record_db_command`); nothing else touches the
metric objects.

Several worker processes: set `PROMETHEUS_MULTIPROC_DIR` to an empty directory shared by the workers
before they start; prometheus-client then keeps each process's values in files there and `render`
sums them, so any worker answers `/metrics` for all of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    disable_created_metrics,
    multiprocess,
)

# The `_created` timestamp series would double the output, and no dashboard reads them.
disable_created_metrics()

# Model calls take from tens of milliseconds (a cached or tiny model) to minutes (a long answer on a
# CPU), so the buckets span both ends.
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320)

# The `model` label of calls to a model the deployment did not configure (see `ModelFactory.metric_label`).
OTHER_MODEL = "other"

RUNS = Counter("parley_runs", "Runs that ended, by mode (duel, panel, roundtable, workflow) and outcome.",
               ["kind", "status"])
MODEL_CALLS = Counter("parley_model_calls", "Model calls that ended, by model and outcome (ok, error).",
                      ["model", "outcome"])
MODEL_TOKENS = Counter("parley_model_tokens", "Tokens of finished model calls, by model, direction (input, output) "
                       "and kind: input tokens are `input` (read in full) or `cached` (read from the provider's "
                       "prompt cache), output tokens `output` (the answer) or `reasoning`; estimated where the "
                       "server reports none.", ["model", "direction", "kind"])
MODEL_COST = Counter("parley_model_cost_usd", "USD cost of finished model calls, by model (0 when unpriced).",
                     ["model"])
MODEL_LATENCY = Histogram("parley_model_latency_seconds", "Seconds from sending a model call to its last token.",
                          ["model"], buckets=_LATENCY_BUCKETS)
MODEL_TTFT = Histogram("parley_model_time_to_first_token_seconds",
                       "Seconds from sending a model call to its first streamed token (its latency when not "
                       "streamed).", ["model"], buckets=_LATENCY_BUCKETS)
SSE_LISTENERS = Gauge("parley_sse_listeners", "Server-Sent Events responses open now, by route.", ["route"],
                      multiprocess_mode="livesum")
RATE_LIMITED = Counter("parley_rate_limit_refusals", "Requests refused by a rate limit, by route.", ["route"])
DB_OPERATIONS = Counter("parley_db_operations", "Database commands Parley sent, by collection and command "
                        "(find, insert, update, findAndModify, delete, getMore, ...).", ["collection", "command"])
DB_BYTES = Counter("parley_db_bytes", "BSON bytes of database commands (sent) and their replies (received), by "
                   "collection and command.", ["collection", "command", "direction"])
FENCED_WRITES = Counter("parley_run_fenced_writes", "Writes of a run's execution refused because another worker took "
                        "the run over (its lease is older), by what was written (events, usage, checkpoint).",
                        ["what"])


def record_run(kind: str, status: str) -> None:
    """Count one run of `kind` (duel, panel, roundtable, workflow) ending as `status` (completed, failed…)."""
    RUNS.labels(kind=kind, status=status).inc()


def record_fenced_write(what: str) -> None:
    """Count one write of a run's execution refused by the run's fence (`store.runs.Fenced`): `what` was written."""
    FENCED_WRITES.labels(what=what).inc()


def record_model_call(
    model: str, *, ok: bool, seconds: float, first_token_seconds: float | None = None,
    input_tokens: int = 0, output_tokens: int = 0, cost: float = 0.0, cached_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> None:
    """Record one finished model call; `first_token_seconds` None means it was not streamed (TTFT = latency).
    `cached_tokens` are a part of `input_tokens`, `reasoning_tokens` of `output_tokens`: each token is counted under
    one kind, so a sum over `kind` by `direction` is the call's input or output.

    `model` is a configured model id or `OTHER_MODEL`, never a string straight from a request: each distinct
    value is a series kept for the life of the process.
    """
    MODEL_CALLS.labels(model=model, outcome="ok" if ok else "error").inc()
    MODEL_LATENCY.labels(model=model).observe(seconds)
    if ok:
        MODEL_TTFT.labels(model=model).observe(seconds if first_token_seconds is None else first_token_seconds)
        cached, reasoning = min(cached_tokens, input_tokens), min(reasoning_tokens, output_tokens)
        MODEL_TOKENS.labels(model=model, direction="input", kind="input").inc(input_tokens - cached)
        MODEL_TOKENS.labels(model=model, direction="input", kind="cached").inc(cached)
        MODEL_TOKENS.labels(model=model, direction="output", kind="output").inc(output_tokens - reasoning)
        MODEL_TOKENS.labels(model=model, direction="output", kind="reasoning").inc(reasoning)
        MODEL_COST.labels(model=model).inc(cost)


@contextmanager
def sse_listener(route: str) -> Iterator[None]:
    """Count an open Server-Sent Events response on `route` for as long as the block runs."""
    gauge = SSE_LISTENERS.labels(route=route)
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()


def record_rate_limited(route: str) -> None:
    RATE_LIMITED.labels(route=route).inc()


def record_db_command(collection: str, command: str, *, sent: int, received: int) -> None:
    """Count one database command and its bytes each way; `collection` and `command` come from bounded sets
    (`store.monitor`), never straight from the wire."""
    DB_OPERATIONS.labels(collection=collection, command=command).inc()
    DB_BYTES.labels(collection=collection, command=command, direction="sent").inc(sent)
    DB_BYTES.labels(collection=collection, command=command, direction="received").inc(received)


def render() -> tuple[bytes, str]:
    """The metrics in Prometheus' text format and its content type; every worker's when multiprocess."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
