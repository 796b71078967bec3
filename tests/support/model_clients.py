"""A fixture that drops langchain-openai's cached HTTP clients before a test.

langchain-openai caches one `httpx.AsyncClient` per (base_url, timeout) for the whole process, bound to
the event loop that first used it. Tests start a fresh event loop for every Parley server thread, so a
client cached by an earlier test fails with "Event loop is closed". Import this fixture into a test
module to use it (it is autouse).
"""

from __future__ import annotations

import pytest
from langchain_openai.chat_models import _client_utils


@pytest.fixture(autouse=True)
def fresh_model_clients():
    _client_utils._cached_async_httpx_client.cache_clear()
    _client_utils._cached_sync_httpx_client.cache_clear()
    yield
    _client_utils._cached_async_httpx_client.cache_clear()
    _client_utils._cached_sync_httpx_client.cache_clear()
