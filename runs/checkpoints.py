"""The LangGraph checkpointer of runs (thread id = run id), `RunSaver`; which events survive a crash is
`runs.survival`'s.

`RunSaver` sends and reads what `runs.checkpoint_docs.GraphDocs` builds, and keeps only what a resume needs. A run never
goes back in time (nothing in Parley lists a thread's history or starts from an older checkpoint: no
`aget_state_history`, no `checkpoint_id` in a run's config), and LangGraph resumes a graph from its latest checkpoint
and the writes saved against it; `survives` needs, besides, the ids of every checkpoint ever saved (a task that started
from one is known to have run from a saved step). So each graph of a run (per thread and namespace) is one document of
`run_checkpoints`:

    _id            {thread_id, checkpoint_ns}
    thread_id, checkpoint_ns
    checkpoint_id  the latest checkpoint's id;  parent_id  its parent's
    checkpoint     part: the latest checkpoint without its channel values (versions, ids, ...)
    metadata       part
    values         {channel: {v: version, parts: [part, ...], list?: true}}: a list's items, in order, or
                   the value alone
    ids            every checkpoint id saved, oldest first
    writes         [{cid, task_id, path, part}]: a task's writes (part of [{idx, channel, t, b}]) against
                   checkpoint `cid`, one entry per `put_writes`
    lease          the number of the lease of the execution that saved last (`store.runs.lease_of`); a worker that
                   takes the run over raises it to its own (`RunSaver.afence`) before it reads, and a save or
                   writes of an execution holding an older lease are refused (`store.runs.Fenced`)
    expiresAt      the TTL index's date: a run whose end never removed it (a crash, say) is removed then (none
                   while the run waits for a person, `akeep`)

where a part is serialized values (`[[type, bytes], ...]` as BSON), zlib-compressed from
`checkpoint_docs.COMPRESS_FROM` bytes up: `{z: bytes}`, else `{p: bytes}`.

A checkpoint is saved with one update that sets only the channels whose version changed (as LangGraph's
own Postgres saver stores blobs), and a list that grew by appending (a transcript: `operator.add`) gets
only its new items pushed, so the transcript is sent once, not in every checkpoint; what is saved together
is compressed together. Writes are pushed with one update each (writes that arrive before their
checkpoint, as they may while LangGraph saves in the background, wait in the array for it; those of older
checkpoints are pulled by the next save). `adelete_thread` removes a run's documents with one delete.
(`checkpoints` and `checkpoint_writes`, langgraph-checkpoint-mongodb's collections that earlier versions
used, are no longer read or written.)
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import DuplicateKeyError

from parley.runs.checkpoint_docs import GraphDocs, graph_key, read_saved, saved_of, saved_query
from parley.runs.survival import EventBarrier, SavedGraph
from parley.store.monitor import LISTENER
from parley.store.runs import Fenced

COLLECTION = "run_checkpoints"
# A finished run's checkpoints are deleted at its end; the TTL index removes those a crash left behind, once
# no resume can want them: twice the run deadline after their last save (a run is stopped at its deadline),
# and never sooner than this.
ORPHANS_KEPT_SECONDS = 86_400.0


@dataclass(frozen=True)
class RunLease:
    """The lease the execution of a run in this process holds (`number`, `store.runs.lease_of`), which its saves
    and writes carry, and what to do when one is refused (`lost`: the execution stops at once)."""

    number: int | None
    lost: Callable[[], None]


class RunSaver(BaseCheckpointSaver):
    """A LangGraph checkpointer on MongoDB that keeps, per graph of a thread, the latest checkpoint, the
    writes against it and the ids of every checkpoint saved (see the module's docstring), and saves a
    run's task results only after the events sent before them (each run that registers an `EventBarrier`
    under its thread id in `barriers`), and with the lease its execution holds (each run that registers a
    `RunLease` in `leases`): once another worker took the run over (`afence`), they are refused (`Fenced`).

    The async interface (the one the run engine's graphs call) uses an `AsyncMongoClient`, so it never
    blocks the event loop; the sync one a `MongoClient` made when first used. Older checkpoints are not
    kept, so `get_tuple` of an earlier checkpoint id finds nothing and `list` yields the latest only, and a
    graph with a `DeltaChannel` (which rebuilds its value from the writes of every ancestor) is refused.
    """

    def __init__(self, uri: str, db_name: str, *, expire_after: float | None = None,
                 serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.uri, self.db_name, self.expire_after = uri, db_name, expire_after
        self.aclient: AsyncMongoClient = AsyncMongoClient(uri, serverSelectionTimeoutMS=3000, tz_aware=True,
                                                          event_listeners=[LISTENER])
        self.acollection = self.aclient[db_name][COLLECTION]
        self._client: MongoClient | None = None
        self.barriers: dict[str, EventBarrier] = {}
        self.leases: dict[str, RunLease] = {}
        self.docs = GraphDocs(self.serde, expire_after)
        self._lock = threading.Lock()

    @property
    def collection(self):
        """The collection, for the sync interface."""
        with self._lock:
            if self._client is None:
                self._client = MongoClient(self.uri, serverSelectionTimeoutMS=3000, tz_aware=True,
                                           event_listeners=[LISTENER])
        return self._client[self.db_name][COLLECTION]

    def close(self) -> None:
        """Close the sync client (the async one: `aclose`)."""
        if self._client is not None:
            self._client.close()

    async def aclose(self) -> None:
        await self.aclient.close()
        self.close()

    def forget(self, thread_id: str) -> None:
        """Drop what this process remembers of the thread's graphs (`GraphDocs.forget`)."""
        self.docs.forget(thread_id)

    def _listed(self, docs: Iterable[dict], filter: dict[str, Any] | None,
                limit: int | None) -> Iterator[CheckpointTuple]:
        count = 0
        for doc in sorted(docs, key=lambda d: d["checkpoint_id"], reverse=True):
            if limit is not None and count >= limit:
                return
            found = self.docs.tuple(doc, {"configurable": {}})
            if found is None or any(found.metadata.get(k) != v for k, v in (filter or {}).items()):
                continue
            count += 1
            yield found

    # --- the sync interface -------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        doc = self.collection.find_one({"_id": graph_key(conf["thread_id"], conf.get("checkpoint_ns", ""))})
        return self.docs.tuple(doc, config)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """The latest checkpoint of each graph `config` names (older ones are not kept), newest first."""
        yield from self._listed(list(self.collection.find(self.docs.list_query(config, before))), filter, limit)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        query, delta, full_query, full, saved = self.docs.put_updates(config, checkpoint, metadata, new_versions)
        if delta is None or not self.collection.update_one(query, delta).matched_count:
            self._upsert(full_query, full)
        self.docs.remember((query["_id"]["thread_id"], query["_id"]["checkpoint_ns"]), checkpoint["id"], saved)
        return self._saved_config(config, checkpoint)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        self._upsert(*self.docs.writes_update(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self.forget(thread_id)
        self.collection.delete_many({"thread_id": graph_key(thread_id, "")["thread_id"]})

    def saved(self, thread_id: str, graph_namespaces: Iterable[str]) -> dict[str, SavedGraph]:
        """What is saved of each of the thread's graphs in `graph_namespaces` (one read)."""
        return read_saved(self.collection, thread_id, graph_namespaces)

    # --- the async interface ------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        doc = await self.acollection.find_one({"_id": graph_key(conf["thread_id"], conf.get("checkpoint_ns", ""))})
        return self.docs.tuple(doc, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        """The latest checkpoint of each graph `config` names (older ones are not kept), newest first."""
        docs = await self.acollection.find(self.docs.list_query(config, before)).to_list()
        for found in self._listed(docs, filter, limit):
            yield found

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        # Serialized at once (a channel may change its list in place meanwhile), sent after the events.
        lease = self._lease(config)
        query, delta, full_query, full, saved = self.docs.put_updates(config, checkpoint, metadata, new_versions,
                                                                      lease and lease.number)
        await self._barrier(config)
        if delta is None or not (await self.acollection.update_one(query, delta)).matched_count:
            await self._aupsert(config, full_query, full)
        self.docs.remember((query["_id"]["thread_id"], query["_id"]["checkpoint_ns"]), checkpoint["id"], saved)
        return self._saved_config(config, checkpoint)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        lease = self._lease(config)
        query, update = self.docs.writes_update(config, writes, task_id, task_path, lease and lease.number)
        await self._barrier(config)
        await self._aupsert(config, query, update)

    async def adelete_thread(self, thread_id: str) -> None:
        self.forget(thread_id)
        await self.acollection.delete_many({"thread_id": graph_key(thread_id, "")["thread_id"]})

    async def afence(self, thread_id: str, lease: int) -> None:
        """Refuse from now on every save and writes of the thread's graphs by an execution holding a lease older
        than `lease` (a worker taking the run over does this before it reads them): one update."""
        await self.acollection.update_many({"thread_id": graph_key(thread_id, "")["thread_id"]},
                                           {"$max": {"lease": lease}})

    async def akeep(self, thread_id: str) -> None:
        """Keep a thread's checkpoints until its run goes on (its next save sets their expiry again): a run that
        waits for a person may wait for days, longer than the TTL that removes a crashed run's."""
        await self.acollection.update_many({"thread_id": graph_key(thread_id, "")["thread_id"]},
                                           {"$unset": {"expiresAt": ""}})

    async def asaved(self, thread_id: str, graph_namespaces: Iterable[str]) -> dict[str, SavedGraph]:
        """What is saved of each of the thread's graphs in `graph_namespaces` (one read)."""
        namespaces_ = list(graph_namespaces)
        docs = await self.acollection.find(*saved_query(thread_id, namespaces_)).to_list()
        return saved_of(namespaces_, docs)

    # --- the rest -----------------------------------------------------------------------------

    async def _barrier(self, config: RunnableConfig) -> None:
        barrier = self.barriers.get(config.get("configurable", {}).get("thread_id"))
        if barrier is not None:
            await barrier.wait()

    def _lease(self, config: RunnableConfig) -> RunLease | None:
        return self.leases.get(config.get("configurable", {}).get("thread_id"))

    async def _aupsert(self, config: RunnableConfig, query: dict, update: dict) -> None:
        """`_upsert`'s async twin; an upsert that meets the `_id` twice was fenced (`afence`): `Fenced`."""
        try:
            await self.acollection.update_one(query, update, upsert=True)
        except DuplicateKeyError:
            try:
                await self.acollection.update_one(query, update, upsert=True)
            except DuplicateKeyError:
                lease = self._lease(config)
                if lease is None or lease.number is None:
                    raise
                lease.lost()  # logged and counted there
                raise Fenced(f"run {config['configurable']['thread_id']}: checkpoint refused, another worker holds "
                             "the run") from None

    def _upsert(self, query: dict, update: dict) -> None:
        """Upsert once more if it fails on the `_id`: a graph's document is created by its first save or by the
        first writes against it, whichever comes first, and the other then finds it."""
        try:
            self.collection.update_one(query, update, upsert=True)
        except DuplicateKeyError:
            self.collection.update_one(query, update, upsert=True)

    @staticmethod
    def _saved_config(config: RunnableConfig, checkpoint: Checkpoint) -> RunnableConfig:
        conf = config["configurable"]
        return {"configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": conf.get("checkpoint_ns", ""),
                                 "checkpoint_id": checkpoint["id"]}}

    def get_delta_channel_history(self, *, config: RunnableConfig,
                                  channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        if channels:
            raise NotImplementedError("RunSaver keeps no ancestors: a DeltaChannel cannot be rebuilt from it")
        return {}

    async def aget_delta_channel_history(self, *, config: RunnableConfig,
                                         channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        return self.get_delta_channel_history(config=config, channels=channels)


def expire_after(settings: Any) -> float | None:
    """Seconds after its last save that a run's checkpoints may be removed by the TTL index (None: kept,
    `PARLEY_RUN_KEEP_CHECKPOINTS`)."""
    if settings.parley_run_keep_checkpoints:
        return None
    return max(2 * settings.parley_run_deadline, ORPHANS_KEPT_SECONDS)


def mongodb_saver(uri: str, db_name: str, *, expire_after: float | None = None) -> RunSaver:
    """The run checkpointer on Parley's database (collection `run_checkpoints`), its commands counted
    (`store.monitor`). Nothing is sent until the first save or read."""
    return RunSaver(uri, db_name, expire_after=expire_after)


