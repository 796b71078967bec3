"""Opaque page cursors for lists sorted newest first by (`createdAt`, `_id`)."""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any

from pymongo import DESCENDING
from pymongo.asynchronous.collection import AsyncCollection


def encode_cursor(record: dict) -> str:
    """The cursor of the page that starts after `record`."""
    payload = json.dumps([record["createdAt"].isoformat(), record["_id"]])
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """Read a cursor made by `encode_cursor`; ValueError when it is not one."""
    try:
        created, record_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return datetime.fromisoformat(created), str(record_id)
    except (ValueError, TypeError) as exc:
        raise ValueError("cursor is not one this API returned") from exc


def older_than(cursor: str) -> dict:
    """The query part selecting what comes after `cursor` in newest-first order."""
    created, record_id = decode_cursor(cursor)
    return {"$or": [{"createdAt": {"$lt": created}}, {"createdAt": created, "_id": {"$lt": record_id}}]}


async def newest_first(collection: AsyncCollection, parts: list[dict[str, Any]], *, limit: int,
                       cursor: str | None = None, projection: dict[str, Any] | None = None,
                       ) -> tuple[list[dict], str | None]:
    """One page of the records of `collection` matching every query of `parts`, newest first by (`createdAt`,
    `_id`), after `cursor`: the page and the cursor of the next (None at the end).

    Raises:
        ValueError: `cursor` is not one this API returned.
    """
    parts = [*parts, older_than(cursor)] if cursor else list(parts)
    query = parts[0] if len(parts) == 1 else {"$and": parts}
    rows = await collection.find(query, projection).sort(
        [("createdAt", DESCENDING), ("_id", DESCENDING)]).limit(limit + 1).to_list()
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, encode_cursor(rows[-1]) if more and rows else None
