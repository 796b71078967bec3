"""What Parley asks of its database: every command its clients send, counted by collection and command.

`LISTENER` is a pymongo command listener; every client Parley builds registers it (`event_listeners=`):
`store.connect`, the run checkpointer's (`runs.checkpoints.mongodb_saver`) and the rate limiter's
(`api.ratelimit`). Each command that ends (answered or failed) is recorded in `parley_db_operations_total`
and `parley_db_bytes_total` (`core.metrics.record_db_command`), its bytes those of its BSON each way.

Labels are bounded: a collection outside `COLLECTIONS` counts as `other`, a command outside `COMMANDS`
as `other` (commands on no collection, such as `ping` or `endSessions`, have the collection `other` too).
"""

from __future__ import annotations

import bson
from pymongo import monitoring

from parley.core.metrics import record_db_command

OTHER = "other"

# Every collection Parley reads or writes: its own (store/*.py, the run checkpointer's among them) and the rate
# limiter's. A test checks that each collection named in store/*.py is here.
COLLECTIONS = frozenset({
    "agent_documents", "agent_memories", "agents", "api_keys", "conversation_messages", "conversations",
    "counters", "debate_rounds", "debates", "idempotency_keys", "mcp_tasks", "migrations", "response_cache",
    "responses", "routers", "run_checkpoints", "run_events", "run_inputs", "run_usage", "runs", "stored_bytes",
    "tool_grants", "tool_servers", "usage", "webhook_deliveries", "webhooks", "workflow_runs", "workflows", "workspaces",
    "ratelimit_counters", "ratelimit_windows",  # limits' MongoDB storage, named in api/ratelimit.py
})

# The commands whose first value names a collection, and the few that carry it under `collection`.
COMMANDS = frozenset({
    "find", "getMore", "insert", "update", "delete", "findAndModify", "aggregate", "count", "distinct",
    "createIndexes", "listIndexes", "dropIndexes", "drop", "create", "killCursors",
})


def _labels(command: str, body: dict) -> tuple[str, str]:
    if command not in COMMANDS:
        return OTHER, OTHER
    name = body.get("collection") if command == "getMore" else body.get(command)
    return (name if isinstance(name, str) and name in COLLECTIONS else OTHER), command


class CommandCounter(monitoring.CommandListener):
    """Count each command once it ends, with the bytes it sent and received.

    A command's collection is known only when it starts; it is kept until its reply (or failure) comes,
    keyed by the connection and request id pymongo gives both events. Called from the event loop (async
    clients) and from worker threads (the synchronous ones): each step is one dict operation.
    """

    PENDING_MAX = 10_000  # a command whose end never came is forgotten past this many

    def __init__(self) -> None:
        self._pending: dict[tuple, tuple[str, str, int]] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        collection, command = _labels(event.command_name, event.command)
        if len(self._pending) >= self.PENDING_MAX:
            self._pending.clear()
        self._pending[(event.connection_id, event.request_id)] = (
            collection, command, len(bson.encode(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._end(event, len(bson.encode(event.reply)))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._end(event, 0)

    def _end(self, event: monitoring.CommandSucceededEvent | monitoring.CommandFailedEvent, received: int) -> None:
        started = self._pending.pop((event.connection_id, event.request_id), None)
        if started is not None:
            collection, command, sent = started
            record_db_command(collection, command, sent=sent, received=received)


LISTENER = CommandCounter()
