"""API keys: stored as SHA-256 hashes, never in plaintext."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from datetime import UTC, datetime

from pymongo.asynchronous.database import AsyncDatabase

SCOPES = ("debate", "chat", "conversations", "workflows", "readonly", "admin")
KEY_PREFIX = "pk_"


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
        "createdAt": datetime.now(UTC),
        "revoked": False,
    }
    await db.api_keys.insert_one(record)
    return record, plaintext


async def find_key(db: AsyncDatabase, *, plaintext: str) -> dict | None:
    """Return the live key record matching `plaintext`, or None."""
    digest = hash_key(plaintext)
    record = await db.api_keys.find_one({"hash": digest})
    # The lookup is by hash; the constant-time comparison guards against a store that matched loosely.
    if record is None or record.get("revoked") or not hmac.compare_digest(record["hash"], digest):
        return None
    return record
