"""`GET /metrics`: the process's Prometheus metrics (every worker's in multiprocess mode); no key, like /healthz."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from parley.core.metrics import render

router = APIRouter(tags=["health"])


@router.get("/metrics", summary="Prometheus metrics: runs, model calls and latency, SSE listeners, rate limits",
            response_class=Response, responses={200: {"description": "Prometheus' text format.", "content": {
                "text/plain": {"schema": {"type": "string"}}}}})
def metrics() -> Response:
    body, content_type = render()
    return Response(body, media_type=content_type)
