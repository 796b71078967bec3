"""API keys: stored as SHA-256 hashes, never in plaintext; listed and revoked by id (`parley keys`)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from datetime import UTC, datetime, timedelta

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase

from parley.core import clock
from parley.store.group import Group

SCOPES = ("debate", "chat", "conversations", "workflows", "readonly", "admin")
KEY_PREFIX = "pk_"
# A key's `lastUsedAt` is written at most this often, so authenticating is not a write per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


async def create_key(db: AsyncDatabase, *, user: str, workspace: str, scopes: list[str]) -> tuple[dict, str]:
    """Store a new key for `user` in `workspace`; return its record and the plaintext (shown once)."""
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(unknown)}; choose from {', '.join(SCOPES)}")
    if not user or not workspace:
        raise ValueError("user and workspace must be non-empty")
    plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
    record = {
        "_id": "key_" + uuid.uuid4().hex[:16],
        "hash": hash_key(plaintext),
        "prefix": plaintext[:10],
        "user": user,
        "workspace": workspace,
        "scopes": sorted(set(scopes)),
        "createdAt": clock.now(),
        "revoked": False,
    }
    await db.api_keys.insert_one(record)
    return record, plaintext


async def _find_by_hash(db: AsyncDatabase, digests: list[str]) -> list[dict | None]:
    found = {row["hash"]: row async for row in db.api_keys.find({"hash": {"$in": list(dict.fromkeys(digests))}})}
    return [dict(found[d]) if d in found else None for d in digests]


# The keys of concurrent requests are looked up in one command (`store.group`).
_lookups: Group[str, dict | None] = Group("look keys up", send=_find_by_hash)


async def find_key(db: AsyncDatabase, *, plaintext: str) -> dict | None:
    """Return the live (not revoked) key record matching `plaintext`, or None; note that it was used.

    Nothing caches the answer: a key revoked a moment ago is refused on its next request (a lookup is sent after
    it is asked for, with the other requests' that came meanwhile).
    """
    digest = hash_key(plaintext)
    record = await _lookups(db, digest)
    # The lookup is by hash; the constant-time comparison guards against a store that matched loosely.
    if record is None or record.get("revoked") or not hmac.compare_digest(record["hash"], digest):
        return None
    used = clock.now()
    last = record.get("lastUsedAt")
    if last is None or used - _aware(last) >= LAST_USED_RESOLUTION:
        await db.api_keys.update_one({"_id": record["_id"]}, {"$set": {"lastUsedAt": used}})
        record["lastUsedAt"] = used
    return record


async def list_keys(db: AsyncDatabase, *, workspace: str | None = None, user: str | None = None) -> list[dict]:
    """Every key (revoked ones too), oldest first, optionally of one workspace and/or user; never their hashes."""
    query = {k: v for k, v in (("workspace", workspace), ("user", user)) if v is not None}
    return await db.api_keys.find(query, {"hash": 0}).sort([("createdAt", 1), ("_id", 1)]).to_list()


async def revoke_key(db: AsyncDatabase, *, key_id: str) -> tuple[dict | None, bool]:
    """Revoke the key `key_id`. Return its record (None when there is no such key, never its hash) and whether
    this call revoked it (False when it had been revoked before)."""
    revoked = await db.api_keys.find_one_and_update(
        {"_id": key_id, "revoked": {"$ne": True}}, {"$set": {"revoked": True, "revokedAt": clock.now()}},
        projection={"hash": 0}, return_document=ReturnDocument.AFTER)
    if revoked is not None:
        return revoked, True
    return await db.api_keys.find_one({"_id": key_id}, {"hash": 0}), False


def _aware(moment: datetime) -> datetime:
    # pymongo hands back naive UTC datetimes unless the client was made tz_aware.
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
