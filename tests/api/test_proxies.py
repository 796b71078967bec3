"""X-Forwarded-For counts only from the proxies PARLEY_TRUSTED_PROXIES names (none by default).

The duel's rate limit (8 a minute per user per address) is what a forged header would dodge; the route
checks it before reading the body, so an empty body (400) costs nothing but a hit.
"""

from __future__ import annotations

import httpx
import pytest

from parley.api.main import create_app
from parley.core.settings import get_settings
from tests.support.servers import ServerThread


def statuses(url: str, key: str, forwarded: list[str]) -> list[int]:
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as client:
        return [client.post("/api/debate", json={}, headers={"X-Forwarded-For": address}).status_code
                for address in forwarded]


ROTATING = [f"203.0.113.{i}" for i in range(1, 13)]


def test_rotating_forwarded_addresses_from_loopback_are_ignored_by_default(parley, make_key):
    assert get_settings().parley_trusted_proxies == []
    assert statuses(parley.url, make_key(["debate"]), ROTATING) == [400] * 8 + [429] * 4


@pytest.fixture
def serve_with(parley_env, monkeypatch):
    """Start Parley with PARLEY_TRUSTED_PROXIES set to `proxies`; yields its URL."""
    servers: list[ServerThread] = []

    def start(proxies: str) -> str:
        monkeypatch.setenv("PARLEY_TRUSTED_PROXIES", proxies)
        get_settings.cache_clear()
        servers.append(ServerThread(create_app(get_settings())).start())
        return servers[-1].url

    yield start
    for server in servers:
        server.stop()


def test_a_trusted_proxy_forwards_the_client_address(serve_with, make_key):
    url = serve_with("10.0.0.0/8, 127.0.0.1")
    key = make_key(["debate"])
    assert statuses(url, key, ROTATING) == [400] * 12  # twelve clients, one hit each
    # One client behind the proxy is limited as a client, wherever the chain it claims starts.
    assert statuses(url, key, ["198.51.100.7"] * 8 + ["192.0.2.1, 198.51.100.7"]) == [400] * 8 + [429]


def test_a_peer_that_is_not_a_configured_proxy_is_not_believed(serve_with, make_key):
    url = serve_with("10.0.0.1")
    assert statuses(url, make_key(["debate"]), ROTATING) == [400] * 8 + [429] * 4
