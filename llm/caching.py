"""The response cache as every model call sees it: LangChain's cache interface (`langchain_core.caches.BaseCache`,
given to the chat model as `cache=`), its hits marked so the call recorder counts them as cached and free.

The cache itself is the caller's (`store.response_cache.ResponseCache` keeps answers in the database); the model
factory wraps it (`ModelFactory.chat(cache=...)`), and applies it only to calls at temperature 0 or with a seed.
Only an answer worth giving again is kept (`worth_keeping`): never an empty one, one cut short, or one that failed the
format it was asked for (a `response_format`, a structured output's schema), which a repeated call would otherwise be
served for a day instead of asking the model again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
from pydantic import BaseModel, ValidationError

from parley.llm.formats import AnswerFormat

# The key of a cached answer's `response_metadata` that says it came from the response cache (`llm.usage.CallRecorder`).
CACHE_HIT = "parley_response_cache"


# Why an answer stopped that says it is not whole (OpenAI's `finish_reason`).
CUT_SHORT = ("length", "content_filter")


def message_text(message: Any) -> str:
    """The text of a model's answer: its content, or the text parts of a content given as parts."""
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return content
    return "".join(part if isinstance(part, str) else str(part.get("text") or "") for part in content or ()
                   if isinstance(part, str) or (isinstance(part, dict) and part.get("type") == "text"))


def worth_keeping(generation: Any, *, answer_format: AnswerFormat | None = None,
                  schema: type[BaseModel] | None = None) -> bool:
    """Whether a model's answer (a `ChatGeneration`) may be kept in the response cache: it says something (text or
    tool calls, none of them malformed), was not cut short (`CUT_SHORT`), and is in the format it was asked for: JSON
    valid against `answer_format` (unless it calls tools), an instance of `schema` (in its text or its first tool
    call)."""
    message = getattr(generation, "message", None)
    if message is None or getattr(message, "invalid_tool_calls", None):
        return False
    if (getattr(message, "response_metadata", None) or {}).get("finish_reason") in CUT_SHORT:
        return False
    tool_calls, text = getattr(message, "tool_calls", None) or [], message_text(message)
    if not tool_calls and not text.strip():
        return False
    if schema is not None:
        try:
            if tool_calls:
                schema.model_validate(tool_calls[0]["args"])
            else:
                schema.model_validate_json(text)
        except (ValidationError, ValueError):
            return False
    elif answer_format is not None and not tool_calls:
        return answer_format.problem(text) is None
    return True


class MarkedCache(BaseCache):
    """`cache`, whose hits say so in each answer's `response_metadata` (`CACHE_HIT`), and which keeps only answers
    `worth_keeping` in the format they were asked for (`answer_format`, `schema`)."""

    def __init__(self, cache: BaseCache, *, answer_format: AnswerFormat | None = None,
                 schema: type[BaseModel] | None = None) -> None:
        self.cache, self.answer_format, self.schema = cache, answer_format, schema

    def _keeps(self, return_val: Sequence[Any]) -> bool:
        return bool(return_val) and all(worth_keeping(g, answer_format=self.answer_format, schema=self.schema)
                                        for g in return_val)

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
        if self._keeps(return_val):
            self.cache.update(prompt, llm_string, return_val)

    async def aupdate(self, prompt: str, llm_string: str, return_val: Sequence[Any]) -> None:
        if self._keeps(return_val):
            await self.cache.aupdate(prompt, llm_string, return_val)

    def clear(self, **kwargs: Any) -> None:
        self.cache.clear(**kwargs)

    async def aclear(self, **kwargs: Any) -> None:
        await self.cache.aclear(**kwargs)


def was_cached(message: Any) -> bool:
    """Whether a model's answer came from the response cache."""
    return bool((getattr(message, "response_metadata", None) or {}).get(CACHE_HIT))
