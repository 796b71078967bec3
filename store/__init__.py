"""Storage: every read and write Parley makes, through pymongo, one module per resource.

`connect()` returns the database handle the rest of Parley passes around; `ensure_indexes()` runs at
start-up. The HTTP layer, the run engine and the CLI use it; graphs and nodes never do.
"""

from __future__ import annotations

from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from parley.core.limits import refuse_unstorable
from parley.store import agents, conversations, inputs, mcp_tasks, response_cache, responses, runs, tools, webhooks
from parley.store.monitor import LISTENER

Database = AsyncDatabase


def storable(value: object) -> bool:
    """Whether MongoDB can hold `value` (client-supplied data Parley keeps); `core.limits.refuse_unstorable` says
    why not."""
    return refuse_unstorable(value) is None


def connect(uri: str, db_name: str) -> tuple[AsyncMongoClient, AsyncDatabase]:
    """Open a client for `uri` (lazy: nothing is sent until the first command); its commands are counted
    (`store.monitor`)."""
    client: AsyncMongoClient = AsyncMongoClient(uri, serverSelectionTimeoutMS=3000, tz_aware=True,
                                                event_listeners=[LISTENER])
    return client, client[db_name]


async def ping(db: AsyncDatabase) -> bool:
    """True when the database answers a ping."""
    try:
        await db.command("ping")
        return True
    except PyMongoError:
        return False


# Each resource module contributes its indexes here; they are created idempotently at start-up.
INDEXES: list[tuple[str, list[tuple[str, int]], dict]] = [
    ("api_keys", [("hash", 1)], {"unique": True}),
    ("api_keys", [("workspace", 1), ("user", 1)], {}),
    ("usage", [("workspace", 1), ("createdAt", -1)], {}),
    ("usage", [("requestId", 1)], {}),
    ("workflows", [("workspace", 1), ("createdAt", -1)], {}),
    ("workflow_runs", [("workspace", 1), ("workflowId", 1), ("createdAt", -1)], {}),
    ("routers", [("workspace", 1), ("id", 1)], {"unique": True}),
    *agents.INDEXES,
    *conversations.INDEXES,
    *runs.INDEXES,
    *inputs.INDEXES,
    *mcp_tasks.INDEXES,
    *tools.INDEXES,
    *responses.INDEXES,
    *response_cache.INDEXES,
    *webhooks.INDEXES,
    ("debates", [("workspace", 1), ("user", 1), ("createdAt", -1), ("_id", -1)], {}),
    # `fail_runless` at every worker's start looks for in-progress debates: a seek, not a scan of them all.
    ("debates", [("status", 1)], {}),
]


async def ensure_indexes(db: AsyncDatabase) -> None:
    """Create every declared index (a no-op for those that exist), and bring what earlier versions stored in line."""
    for collection, keys, options in INDEXES:
        await db[collection].create_index(keys, **options)
    await runs.migrate_events(db)
