"""Shared HTTP plumbing: MongoDB-backed rate limits and the SSE response helper."""

from __future__ import annotations

import httpx
from fastapi import APIRouter

from parley.api.main import create_app
from parley.api.ratelimit import RateLimiter
from parley.api.sse import Event, sse_response
from tests.support.servers import ServerThread


async def test_moving_window_limit_is_shared_between_limiters(parley_env):
    first = RateLimiter(parley_env.mongodb_uri, parley_env.mongodb_db)
    second = RateLimiter(parley_env.mongodb_uri, parley_env.mongodb_db)  # another Parley process
    decisions = [await (first if i % 2 else second).hit("3/minute", "route", "alice") for i in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    assert 1 <= decisions[-1].retry_after <= 60
    assert (await first.hit("3/minute", "route", "bob")).allowed


def test_sse_events_carry_ids_and_json(parley_env):
    app = create_app(parley_env)
    probe = APIRouter()

    @probe.get("/_sse")
    async def stream():
        async def events():
            yield Event("init", {"id": "x", "topic": "远程工作"}, seq=0)
            yield Event("done", {}, seq=1)

        return sse_response(events())

    app.include_router(probe)
    with ServerThread(app) as server:
        resp = httpx.get(server.url + "/_sse")
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["cache-control"] == "no-cache"
    assert 'event: init\r\ndata: {"id":"x","topic":"远程工作"}\r\nid: 0' in resp.text or \
        'id: 0\r\nevent: init\r\ndata: {"id":"x","topic":"远程工作"}' in resp.text
    assert "event: done" in resp.text
