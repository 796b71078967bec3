"""Opaque page cursors for lists sorted newest first by (`createdAt`, `_id`)."""

from __future__ import annotations

import base64
import json
from datetime import datetime


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
