"""The response cache (opt-in per request, `parley eval --cache`): answers of model calls kept for a while, so an
identical call (model, messages, parameters) is answered from the database instead of the model.

    {_id: sha256 of (scope, user, llm string, prompt), scope, user?, answers: [chat message dicts], createdAt,
     expiresAt}

It is LangChain's cache interface (`langchain_core.caches.BaseCache`, async `alookup`/`aupdate`), keyed as LangChain
keys it: the prompt is the call's messages, the llm string its model and every parameter (temperature, output cap,
reasoning effort, tools, response format, ...). A `scope` (a workspace) keeps one workspace's answers from another's,
and a `user` one user's from another's in the same workspace (an answer served from the cache comes back in
milliseconds: shared, it would tell a user what another asked, and leak the answer); a cache without a user is shared
by the workspace, as a request may ask (`responseCache: "workspace"`).
An answer is deleted `RESPONSE_CACHE_TTL_SECONDS` after it was stored (a TTL index; reads skip an expired one).
Which calls may use it (temperature 0 or a seed) is the model factory's rule (`llm.factory.ModelFactory.chat`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
from langchain_core.messages import message_to_dict, messages_from_dict
from langchain_core.outputs import ChatGeneration
from pymongo.asynchronous.database import AsyncDatabase

from parley.core import clock
from parley.core.limits import RESPONSE_CACHE_TTL_SECONDS

# What a request asks for to share its answers with every user of its workspace (`responseCache`, `parley_cache`);
# `true` keeps them the user's own.
SHARED = "workspace"

INDEXES: list[tuple[str, list[tuple[str, int]], dict]] = [
    ("response_cache", [("expiresAt", 1)], {"expireAfterSeconds": 0}),
]


class ResponseCache(BaseCache):
    """Model answers in the `response_cache` collection, per `scope` and `user`, for `ttl_seconds` after they were
    stored.

    Args:
        db: Parley's database.
        scope: whose answers these are (a workspace): a lookup finds only answers stored under the same scope.
        user: the user of `scope` whose answers these are; None: every user of it shares them.
        ttl_seconds: how long an answer is kept.

    Only the async methods work (Parley calls models asynchronously); the sync ones raise `NotImplementedError`.
    """

    def __init__(self, db: AsyncDatabase, *, scope: str, user: str | None = None,
                 ttl_seconds: float = RESPONSE_CACHE_TTL_SECONDS) -> None:
        self.db, self.scope, self.user, self.ttl = db, scope, user, timedelta(seconds=ttl_seconds)

    def _key(self, prompt: str, llm_string: str) -> str:
        digest = hashlib.sha256()
        for part in (self.scope, "*" if self.user is None else f"user:{self.user}", llm_string, prompt):
            digest.update(part.encode())
            digest.update(b"\0")
        return digest.hexdigest()

    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        doc = await self.db.response_cache.find_one({"_id": self._key(prompt, llm_string),
                                                     "expiresAt": {"$gt": clock.now()}})
        if doc is None:
            return None
        return [ChatGeneration(message=message) for message in messages_from_dict(doc["answers"])]

    async def aupdate(self, prompt: str, llm_string: str, return_val: Sequence[Any]) -> None:
        answers = [message_to_dict(g.message) for g in return_val if isinstance(g, ChatGeneration)]
        if len(answers) != len(return_val):
            return  # only chat answers are kept (Parley makes no other calls)
        at = clock.now()
        await self.db.response_cache.replace_one(
            {"_id": self._key(prompt, llm_string)},
            {"scope": self.scope, **({"user": self.user} if self.user is not None else {}), "answers": answers,
             "createdAt": at, "expiresAt": at + self.ttl}, upsert=True)

    async def aclear(self, **kwargs: Any) -> None:
        await self.db.response_cache.delete_many({"scope": self.scope, "user": self.user})

    def lookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        raise NotImplementedError("the response cache is read asynchronously (alookup)")

    def update(self, prompt: str, llm_string: str, return_val: Sequence[Any]) -> None:
        raise NotImplementedError("the response cache is written asynchronously (aupdate)")

    def clear(self, **kwargs: Any) -> None:
        raise NotImplementedError("the response cache is cleared asynchronously (aclear)")
