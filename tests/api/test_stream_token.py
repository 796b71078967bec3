"""A duel's stream token (`?token=` of its events URL) works while the duel runs and PARLEY_STREAM_TOKEN_GRACE
seconds after it ended; expired, it is answered as a wrong token is (the duel contract: 401 Unauthorized)."""

from __future__ import annotations

import httpx
import pytest

from parley.api.main import create_app
from parley.core.settings import get_settings
from tests.support.duel import script_duel
from tests.support.servers import ServerThread
from tests.support.sse import iter_sse, parse_sse

BODY = {"topic": "Should remote work be the default?", "userProfile": {"name": "Ada"}, "rounds": 1}


@pytest.fixture
def serve_with_grace(parley_env, monkeypatch):
    servers: list[ServerThread] = []

    def start(grace: str | None) -> httpx.Client:
        """A Parley with that PARLEY_STREAM_TOKEN_GRACE (its default when None)."""
        if grace is None:
            monkeypatch.delenv("PARLEY_STREAM_TOKEN_GRACE", raising=False)
        else:
            monkeypatch.setenv("PARLEY_STREAM_TOKEN_GRACE", grace)
        get_settings.cache_clear()
        servers.append(ServerThread(create_app(get_settings())).start())
        return httpx.Client(base_url=servers[-1].url, timeout=60)

    yield start
    for server in servers:
        server.stop()


def run_duel_checking_the_token_midway(http: httpx.Client, key: str, llm) -> tuple[str, str]:
    """Run a duel whose opponent waits at a gate; while it waits, follow it with the token alone. Return the
    debate's id and events URL once it has ended."""
    script_duel(llm, opponent_turn={"hold": "opponent"})
    auth = {"Authorization": f"Bearer {key}"}
    with http.stream("POST", "/api/debate", json=BODY, headers=auth) as resp:
        events = iter_sse(resp.iter_lines())
        debate_id = next(events).json()["id"]
        url = http.get(f"/api/debate/{debate_id}", headers=auth).json()["eventsUrl"]
        llm.wait_held("opponent")
        with http.stream("GET", url) as followed:  # no key: the token stands in for it
            assert followed.status_code == 200
            assert next(iter_sse(followed.iter_lines())).event == "init"
        llm.release("opponent")
        assert [e.event for e in events][-1] == "done"
    return debate_id, url


def test_an_ended_duels_token_expires_after_the_grace_period(serve_with_grace, make_key, llm):
    http = serve_with_grace("0")
    key = make_key(["debate"])
    debate_id, url = run_duel_checking_the_token_midway(http, key, llm)
    expired = http.get(url)
    assert expired.status_code == 401 and expired.json() == {"error": "Unauthorized"}  # as a wrong token
    assert http.get(url.replace("token=", "token=x")).json() == {"error": "Unauthorized"}
    # The owner's key still replays it.
    replay = http.get(f"/api/debate/{debate_id}/events", headers={"Authorization": f"Bearer {key}"})
    assert replay.status_code == 200 and parse_sse(replay.text)[-1].event == "done"


def test_by_default_the_token_replays_the_duel_for_an_hour_after_it_ended(serve_with_grace, make_key, llm):
    http = serve_with_grace(None)
    assert get_settings().parley_stream_token_grace == 3600
    _, url = run_duel_checking_the_token_midway(http, make_key(["debate"]), llm)
    replay = http.get(url)
    assert replay.status_code == 200 and parse_sse(replay.text)[-1].event == "done"
