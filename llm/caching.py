"""The response cache as every model call sees it: LangChain's cache interface (`langchain_core.caches.BaseCache`,
given to the chat model as `cache=`), its hits marked so the call recorder counts them as cached and free.

The cache itself is the caller's (`store.response_cache.ResponseCache` keeps answers in the database); the model
factory wraps it (`ModelFactory.chat(cache=...)`), and applies it only to calls at temperature 0 or with a seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.caches import RETURN_VAL_TYPE, BaseCache

# The key of a cached answer's `response_metadata` that says it came from the response cache (`llm.usage.CallRecorder`).
CACHE_HIT = "parley_response_cache"


class MarkedCache(BaseCache):
    """`cache`, whose hits say so in each answer's `response_metadata` (`CACHE_HIT`)."""

    def __init__(self, cache: BaseCache) -> None:
        self.cache = cache

    @staticmethod
    def _marked(found: RETURN_VAL_TYPE | None) -> RETURN_VAL_TYPE | None:
        for generation in found or ():
            message = getattr(generation, "message", None)
            if message is not None:
                message.response_metadata = {**message.response_metadata, CACHE_HIT: True}
        return found

    def lookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        return self._marked(self.cache.lookup(prompt, llm_string))

    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        return self._marked(await self.cache.alookup(prompt, llm_string))

    def update(self, prompt: str, llm_string: str, return_val: Sequence[Any]) -> None:
        self.cache.update(prompt, llm_string, return_val)

    async def aupdate(self, prompt: str, llm_string: str, return_val: Sequence[Any]) -> None:
        await self.cache.aupdate(prompt, llm_string, return_val)

    def clear(self, **kwargs: Any) -> None:
        self.cache.clear(**kwargs)

    async def aclear(self, **kwargs: Any) -> None:
        await self.cache.aclear(**kwargs)


def was_cached(message: Any) -> bool:
    """Whether a model's answer came from the response cache."""
    return bool((getattr(message, "response_metadata", None) or {}).get(CACHE_HIT))
