"""LangGraph checkpoints of runs (thread id = run id): what is saved, and which of a run's events survive a crash.

A resumed run does not re-run the tasks whose results LangGraph saved; it runs the others again, and
they send their events again. `survives` tells the two apart from an event's origin (the task that sent
it, and the checkpoint that task started from, at every level of nested graphs) and what was saved.
`EventBarrier` makes LangGraph save a task's results (its writes, and the checkpoint that holds them) only
after its events are stored, so that no event of a finished task is ever lost with a worker.

`RunSaver` is the checkpointer, and it keeps only what a resume needs. A run never goes back in time
(nothing in Parley lists a thread's history or starts from an older checkpoint: no `aget_state_history`,
no `checkpoint_id` in a run's config), and LangGraph resumes a graph from its latest checkpoint and the
writes saved against it; `survives` needs, besides, the ids of every checkpoint ever saved (a task that
started from one is known to have run from a saved step). So each graph of a run (per thread and
namespace) is one document of `run_checkpoints`:

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
    expiresAt      the TTL index's date: a run whose end never removed it (a crash, say) is removed then (none
                   while the run waits for a person, `akeep`)

where a part is serialized values (`[[type, bytes], ...]` as BSON), zlib-compressed from `COMPRESS_FROM`
bytes up: `{z: bytes}`, else `{p: bytes}`.

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
import zlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import bson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import DuplicateKeyError

from parley.core import clock
from parley.nodes.events import Origin
from parley.runs.events import Signal
from parley.store.monitor import LISTENER

NS_SEP = "|"
COLLECTION = "run_checkpoints"
# A finished run's checkpoints are deleted at its end; the TTL index removes those a crash left behind, once
# no resume can want them: twice the run deadline after their last save (a run is stopped at its deadline),
# and never sooner than this.
ORPHANS_KEPT_SECONDS = 86_400.0
# The writes of a task that stopped at `interrupt()` (and of the answer that resumes it): it will run again, so they
# do not say that it finished (`survives`).
PAUSE_CHANNELS = frozenset({"__interrupt__", "__resume__"}) & set(WRITES_IDX_MAP)  # LangGraph's names
# Serialized values are packed in parts (a BSON array), compressed from this size up: the items saved together
# often repeat each other (a round's `Send`s each carry the previous round's positions).
COMPRESS_FROM = 256


class EventBarrier:
    """Holds back LangGraph's saving of a task's results until every event sent before them is stored.

    A run's events reach the engine the moment a node sends them (`nodes.events.EVENT_SINK`), and a task's
    results are saved after it returns: waiting for the events received so far covers all of the task's,
    so a task whose results were saved never has an event that was lost with its worker.
    """

    def __init__(self) -> None:
        self.received = self.stored = 0
        self.open = False  # nothing more will be stored: waiting would be forever
        self.waiting = 0  # saves waiting now
        self.on_wait: Callable[[], None] = lambda: None  # told when a save starts waiting (to store at once)
        self._changed = Signal()

    def received_one(self) -> None:
        self.received += 1

    def stored_upto(self, count: int) -> None:
        self.stored = max(self.stored, count)
        self._changed.notify()

    def release(self) -> None:
        self.open = True
        self._changed.notify()

    async def wait(self) -> None:
        target = self.received
        if self.stored >= target or self.open:
            return
        self.waiting += 1
        self.on_wait()
        try:
            while self.stored < target and not self.open:
                await self._changed.wait()
        finally:
            self.waiting -= 1


@dataclass
class SavedGraph:
    """What was saved of one graph of a run (the run's own, or one nested in a task): its checkpoints, the
    latest of them, and the tasks whose results were saved against it."""

    ids: set[str] = field(default_factory=set)
    latest: str | None = None
    written: dict[str, set[str]] = field(default_factory=dict)


def _key(thread_id: str, ns: str) -> dict[str, str]:
    if not isinstance(thread_id, str) or not isinstance(ns, str):  # an operator document must not widen a query
        raise ValueError("thread_id and checkpoint_ns must be strings")
    return {"thread_id": thread_id, "checkpoint_ns": ns}


def _field(channel: str) -> str:
    """A channel's name as a field name (MongoDB reads `.` as a path and a leading `$` as an operator)."""
    escaped = channel.replace("%", "%25").replace(".", "%2E")
    return "%24" + escaped[1:] if escaped.startswith("$") else escaped


def _channel(name: str) -> str:
    return name.replace("%2E", ".").replace("%24", "$").replace("%25", "%")


def _pack(items: list) -> dict[str, bytes]:
    data = bson.encode({"i": items})
    return {"z": zlib.compress(data, 1)} if len(data) >= COMPRESS_FROM else {"p": data}


def _unpack(part: dict[str, bytes]) -> list:
    return bson.decode(zlib.decompress(part["z"]) if "z" in part else part["p"])["i"]


def _extends(value: list, before: list) -> bool:
    """Whether `value` is `before` with items appended (items that cannot be compared count as changed)."""
    try:
        return len(value) >= len(before) and bool(value[:len(before)] == before)
    except Exception:
        return False


@dataclass
class _Stored:
    """What this process last stored (or read) of one graph: the checkpoint id, and a copy of each list
    channel's value then, to send only the items appended since."""

    checkpoint_id: str
    lists: dict[str, list]


class RunSaver(BaseCheckpointSaver):
    """A LangGraph checkpointer on MongoDB that keeps, per graph of a thread, the latest checkpoint, the
    writes against it and the ids of every checkpoint saved (see the module's docstring), and saves a
    run's task results only after the events sent before them (each run that registers an `EventBarrier`
    under its thread id in `barriers`).

    The async interface (the one the run engine's graphs call) uses an `AsyncMongoClient`, so it never
    blocks the event loop; the sync one a `MongoClient` made when first used. Older checkpoints are not
    kept, so `get_tuple` of an earlier checkpoint id finds nothing and `list` yields the latest only, and a
    graph with a `DeltaChannel` (which rebuilds its value from the writes of every ancestor) is refused.
    """

    CACHE_MAX = 1024  # graphs whose last stored lists are remembered (see `forget`)

    def __init__(self, uri: str, db_name: str, *, expire_after: float | None = None,
                 serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.uri, self.db_name, self.expire_after = uri, db_name, expire_after
        self.aclient: AsyncMongoClient = AsyncMongoClient(uri, serverSelectionTimeoutMS=3000, tz_aware=True,
                                                          event_listeners=[LISTENER])
        self.acollection = self.aclient[db_name][COLLECTION]
        self._client: MongoClient | None = None
        self.barriers: dict[str, EventBarrier] = {}
        self._stored: OrderedDict[tuple[str, str], _Stored] = OrderedDict()
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

    # --- what is stored -----------------------------------------------------------------------

    def _expiry(self) -> dict[str, datetime]:
        if self.expire_after is None:
            return {}
        return {"expiresAt": clock.now() + timedelta(seconds=self.expire_after)}

    def _part(self, values: Iterable[Any]) -> dict[str, bytes]:
        return _pack([list(self.serde.dumps_typed(value)) for value in values])

    def _unpart(self, part: dict[str, bytes]) -> list:
        return [self.serde.loads_typed((kind, data)) for kind, data in _unpack(part)]

    def _encode(self, value: Any, version: Any) -> dict[str, Any]:
        if type(value) is list:
            return {"v": version, "list": True, "parts": [self._part(value)]}
        return {"v": version, "parts": [self._part([value])]}

    def _decode(self, stored: dict[str, Any]) -> Any:
        items = [item for part in stored["parts"] for item in self._unpart(part)]
        return items if stored.get("list") else items[0]

    @staticmethod
    def _lists(values: Mapping[str, Any]) -> dict[str, list]:
        """A copy of each list among `values` (a channel may extend its list in place later)."""
        return {channel: list(value) for channel, value in values.items() if type(value) is list}

    def _remember(self, key: tuple[str, str], checkpoint_id: str, lists: dict[str, list]) -> None:
        with self._lock:
            self._stored[key] = _Stored(checkpoint_id, lists)
            self._stored.move_to_end(key)
            while len(self._stored) > self.CACHE_MAX:
                self._stored.popitem(last=False)

    def forget(self, thread_id: str) -> None:
        """Drop what this process remembers of the thread's graphs (its run ended here, or went elsewhere):
        the next save of one, if any, sends its lists whole."""
        with self._lock:
            for key in [k for k in self._stored if k[0] == thread_id]:
                del self._stored[key]

    def _put_updates(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                     new_versions: ChannelVersions) -> tuple[dict, dict | None, dict, dict, dict[str, list]]:
        """The updates that save `checkpoint`: (filter, update) of the delta against its parent (None when
        the parent is not known to be the stored one), (filter, update) of a full save, and the lists saved
        (copies, made as they are serialized)."""
        conf = config["configurable"]
        key = _key(conf["thread_id"], conf.get("checkpoint_ns", ""))
        parent, checkpoint_id = conf.get("checkpoint_id"), checkpoint["id"]
        values, versions = checkpoint["channel_values"], checkpoint["channel_versions"]
        saved = self._lists(values)
        head = {
            "checkpoint_id": checkpoint_id,
            "checkpoint": self._part([{**checkpoint, "channel_values": {}}]),
            "metadata": self._part([get_checkpoint_metadata(config, metadata)]),
            **self._expiry(),
        }
        resaved = parent == checkpoint_id  # the same checkpoint again (LangGraph's save at the graph's exit)
        if not resaved:
            head["parent_id"] = parent
        ids = {"ids": checkpoint_id}
        older = {"writes": {"cid": {"$lt": checkpoint_id}}}  # writes of the checkpoints before: no longer needed
        full = {"$set": {**head, "values": {_field(ch): self._encode(v, versions.get(ch)) for ch, v in values.items()}},
                "$setOnInsert": dict(key), "$addToSet": ids, "$pull": older}
        if parent is None:
            return {"_id": key}, None, {"_id": key}, full, saved
        with self._lock:
            stored = self._stored.get((key["thread_id"], key["checkpoint_ns"]))
        lists = stored.lists if stored is not None and stored.checkpoint_id == parent else {}
        sets, unsets, pushes = dict(head), {}, {}
        for channel, version in new_versions.items():
            name = "values." + _field(channel)
            if channel not in values:
                unsets[name] = ""
                continue
            value, before = values[channel], lists.get(channel)
            if type(value) is list and before is not None and _extends(value, before):
                sets[name + ".v"] = version
                if len(value) > len(before):
                    pushes[name + ".parts"] = self._part(value[len(before):])
            else:
                sets[name] = self._encode(value, version)
        delta: dict[str, Any] = {"$set": sets, "$pull": older}
        if unsets:
            delta["$unset"] = unsets
        if not resaved:
            pushes["ids"] = checkpoint_id
        if pushes:
            delta["$push"] = pushes
        return {"_id": key, "checkpoint_id": parent}, delta, {"_id": key}, full, saved

    def _writes_update(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                       task_path: str) -> tuple[dict, dict]:
        conf = config["configurable"]
        key = _key(conf["thread_id"], conf.get("checkpoint_ns", ""))
        checkpoint_id = conf["checkpoint_id"]
        packed = []
        for idx, (channel, value) in enumerate(writes):
            kind, data = self.serde.dumps_typed(value)
            packed.append({"idx": WRITES_IDX_MAP.get(channel, idx), "channel": channel, "t": kind, "b": data})
        entry = {"cid": checkpoint_id, "task_id": task_id, "path": task_path, "part": _pack(packed)}
        if writes and all(channel in PAUSE_CHANNELS for channel, _ in writes):
            entry["pause"] = True  # a task that stopped to wait, or the answer it waits for: not its result
        update = {"$push": {"writes": entry}, "$setOnInsert": dict(key)}
        if expiry := self._expiry():
            update["$set"] = expiry
        return {"_id": key}, update

    def _tuple(self, doc: dict | None, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint tuple of a stored graph (None if it has no checkpoint, or not the one asked for)."""
        if doc is None or not doc.get("checkpoint_id"):
            return None
        asked = config["configurable"].get("checkpoint_id")
        checkpoint_id = doc["checkpoint_id"]
        if asked and asked != checkpoint_id:
            return None  # an older checkpoint: not kept
        checkpoint = self._unpart(doc["checkpoint"])[0]
        versions = checkpoint["channel_versions"]
        checkpoint["channel_values"] = {
            channel: self._decode(stored) for channel, stored in
            ((_channel(name), stored) for name, stored in (doc.get("values") or {}).items())
            if channel in versions and versions[channel] == stored["v"]
        }
        thread_id, ns = doc["thread_id"], doc["checkpoint_ns"]
        self._remember((thread_id, ns), checkpoint_id, self._lists(checkpoint["channel_values"]))
        parent = doc.get("parent_id")
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}},
            checkpoint=checkpoint,
            metadata=self._unpart(doc["metadata"])[0],
            parent_config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
            if parent else None,
            pending_writes=self._pending(doc),
        )

    def _pending(self, doc: dict) -> list[tuple[str, str, Any]]:
        """The writes against the latest checkpoint, as LangGraph's savers give them: one per (task, index),
        the first for a regular write and the last for a special one (an error, an interrupt: they may be
        saved again), in `writes_sort_key` order."""
        chosen: dict[tuple, dict] = {}
        for entry in doc.get("writes") or ():
            if entry["cid"] != doc["checkpoint_id"]:
                continue
            for write in _unpack(entry["part"]):
                slot = (entry["path"], entry["task_id"], write["idx"])
                if slot not in chosen or write["idx"] < 0:
                    chosen[slot] = write
        return [(task_id, w["channel"], self.serde.loads_typed((w["t"], w["b"])))
                for (_, task_id, _), w in sorted(chosen.items(), key=lambda item: writes_sort_key(*item[0]))]

    def _list_query(self, config: RunnableConfig | None, before: RunnableConfig | None) -> dict:
        query: dict[str, Any] = {"checkpoint_id": {"$exists": True}}
        conf = (config or {}).get("configurable", {})
        if "thread_id" in conf:
            query["thread_id"] = _key(conf["thread_id"], "")["thread_id"]
            if "checkpoint_ns" in conf:
                query["_id"] = _key(conf["thread_id"], conf["checkpoint_ns"])
        if before is not None:
            query["checkpoint_id"] = {"$lt": str(before["configurable"]["checkpoint_id"])}
        return query

    def _listed(self, docs: Iterable[dict], filter: dict[str, Any] | None,
                limit: int | None) -> Iterator[CheckpointTuple]:
        count = 0
        for doc in sorted(docs, key=lambda d: d["checkpoint_id"], reverse=True):
            if limit is not None and count >= limit:
                return
            found = self._tuple(doc, {"configurable": {}})
            if found is None or any(found.metadata.get(k) != v for k, v in (filter or {}).items()):
                continue
            count += 1
            yield found

    # --- the sync interface -------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        doc = self.collection.find_one({"_id": _key(conf["thread_id"], conf.get("checkpoint_ns", ""))})
        return self._tuple(doc, config)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """The latest checkpoint of each graph `config` names (older ones are not kept), newest first."""
        yield from self._listed(list(self.collection.find(self._list_query(config, before))), filter, limit)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        query, delta, full_query, full, saved = self._put_updates(config, checkpoint, metadata, new_versions)
        if delta is None or not self.collection.update_one(query, delta).matched_count:
            self._upsert(full_query, full)
        self._remember((query["_id"]["thread_id"], query["_id"]["checkpoint_ns"]), checkpoint["id"], saved)
        return self._saved_config(config, checkpoint)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        self._upsert(*self._writes_update(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self.forget(thread_id)
        self.collection.delete_many({"thread_id": _key(thread_id, "")["thread_id"]})

    def saved(self, thread_id: str, graph_namespaces: Iterable[str]) -> dict[str, SavedGraph]:
        """What is saved of each of the thread's graphs in `graph_namespaces` (one read)."""
        return read_saved(self.collection, thread_id, graph_namespaces)

    # --- the async interface ------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        doc = await self.acollection.find_one({"_id": _key(conf["thread_id"], conf.get("checkpoint_ns", ""))})
        return self._tuple(doc, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        """The latest checkpoint of each graph `config` names (older ones are not kept), newest first."""
        docs = await self.acollection.find(self._list_query(config, before)).to_list()
        for found in self._listed(docs, filter, limit):
            yield found

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        # Serialized at once (a channel may change its list in place meanwhile), sent after the events.
        query, delta, full_query, full, saved = self._put_updates(config, checkpoint, metadata, new_versions)
        await self._barrier(config)
        if delta is None or not (await self.acollection.update_one(query, delta)).matched_count:
            try:
                await self.acollection.update_one(full_query, full, upsert=True)
            except DuplicateKeyError:  # see `_upsert`
                await self.acollection.update_one(full_query, full, upsert=True)
        self._remember((query["_id"]["thread_id"], query["_id"]["checkpoint_ns"]), checkpoint["id"], saved)
        return self._saved_config(config, checkpoint)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        query, update = self._writes_update(config, writes, task_id, task_path)
        await self._barrier(config)
        try:
            await self.acollection.update_one(query, update, upsert=True)
        except DuplicateKeyError:  # see `_upsert`
            await self.acollection.update_one(query, update, upsert=True)

    async def adelete_thread(self, thread_id: str) -> None:
        self.forget(thread_id)
        await self.acollection.delete_many({"thread_id": _key(thread_id, "")["thread_id"]})

    async def akeep(self, thread_id: str) -> None:
        """Keep a thread's checkpoints until its run goes on (its next save sets their expiry again): a run that
        waits for a person may wait for days, longer than the TTL that removes a crashed run's."""
        await self.acollection.update_many({"thread_id": _key(thread_id, "")["thread_id"]},
                                           {"$unset": {"expiresAt": ""}})

    async def asaved(self, thread_id: str, graph_namespaces: Iterable[str]) -> dict[str, SavedGraph]:
        """What is saved of each of the thread's graphs in `graph_namespaces` (one read)."""
        namespaces_ = list(graph_namespaces)
        docs = await self.acollection.find(*_saved_query(thread_id, namespaces_)).to_list()
        return _saved(namespaces_, docs)

    # --- the rest -----------------------------------------------------------------------------

    async def _barrier(self, config: RunnableConfig) -> None:
        barrier = self.barriers.get(config.get("configurable", {}).get("thread_id"))
        if barrier is not None:
            await barrier.wait()

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


def _saved_query(thread_id: str, graph_namespaces: Sequence[str]) -> tuple[dict, dict]:
    return ({"_id": {"$in": [_key(thread_id, ns) for ns in graph_namespaces]}},
            {"checkpoint_id": 1, "ids": 1, "writes.cid": 1, "writes.task_id": 1, "writes.pause": 1})


def _saved(graph_namespaces: Iterable[str], docs: Iterable[dict]) -> dict[str, SavedGraph]:
    by_ns = {doc["_id"]["checkpoint_ns"]: doc for doc in docs}
    saved = {}
    for ns in graph_namespaces:
        graph = saved[ns] = SavedGraph()
        doc = by_ns.get(ns)
        if doc is None or not doc.get("checkpoint_id"):
            continue
        graph.ids, graph.latest = set(doc.get("ids") or ()), doc["checkpoint_id"]
        graph.written[graph.latest] = {w["task_id"] for w in doc.get("writes") or ()
                                       if w["cid"] == graph.latest and not w.get("pause")}
    return saved


def read_saved(collection: Any, thread_id: str, graph_namespaces: Iterable[str]) -> dict[str, SavedGraph]:
    """What a `run_checkpoints` collection (pymongo's sync `Collection`) holds of each of the thread's graphs in
    `graph_namespaces`."""
    namespaces_ = list(graph_namespaces)
    return _saved(namespaces_, collection.find(*_saved_query(thread_id, namespaces_)))


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


def namespaces(origins: Iterable[Origin]) -> set[str]:
    """Every graph namespace the tasks behind `origins` ran in."""
    out = set()
    for origin in origins:
        segments = origin.task.split(NS_SEP)
        out.update(NS_SEP.join(segments[:depth]) for depth in range(len(segments)))
    return out


async def saved_graphs(saver: RunSaver, thread_id: str, graph_namespaces: Iterable[str]) -> dict[str, SavedGraph]:
    """What `saver` holds of each of the thread's graphs in `graph_namespaces`."""
    return await saver.asaved(thread_id, graph_namespaces)


def survives(origin: Origin | None, saved: dict[str, SavedGraph]) -> bool:
    """Whether an event sent by the task `origin` stands once the run resumes from what is `saved`.

    Walking from the outermost graph in: a task that started from a checkpoint that was never saved will
    run again under a new id (its events are void); one whose checkpoint has a saved successor finished its
    step, and so did one whose own result was saved (its events stand, nested ones included); any other will
    run again with the same id, and then what its nested graph saved decides for the events sent inside it.
    Events sent outside any task (`origin` None) always stand.
    """
    if origin is None:
        return True
    started_from = dict(origin.checkpoints)
    segments = origin.task.split(NS_SEP)
    for depth, segment in enumerate(segments):
        ns = NS_SEP.join(segments[:depth])
        graph, checkpoint_id = saved.get(ns), started_from.get(ns)
        if graph is None or checkpoint_id not in graph.ids:
            return False
        if checkpoint_id != graph.latest:
            return True
        if segment.rpartition(":")[2] in graph.written.get(checkpoint_id, set()):
            return True
    return False
