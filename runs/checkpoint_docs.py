"""The document of one graph of a run in `run_checkpoints` (its layout: `runs.checkpoints`): what a save of a
checkpoint sets in it (the delta against its parent, or the whole), what a task's writes push, and the checkpoint
read back from it. No I/O: `RunSaver` sends what this builds.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import bson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from parley.core import clock
from parley.runs.survival import SavedGraph

# The writes of a task that stopped at `interrupt()` (and of the answer that resumes it): it will run again, so they
# do not say that it finished (`survives`).
PAUSE_CHANNELS = frozenset({"__interrupt__", "__resume__"}) & set(WRITES_IDX_MAP)  # LangGraph's names
# Serialized values are packed in parts (a BSON array), compressed from this size up: the items saved together
# often repeat each other (a round's `Send`s each carry the previous round's positions).
COMPRESS_FROM = 256


def fenced(query: dict, lease: int | None) -> dict:
    """`query` matching only a document no worker fenced past lease `lease` (`RunSaver.afence`): an execution whose
    run was taken over writes nothing (its update matches nothing; its upsert meets the `_id`, a duplicate key).
    Unchanged for a write that holds no lease (`None`)."""
    return query if lease is None else {**query, "lease": {"$not": {"$gt": lease}}}


def leased(lease: int | None) -> dict[str, int]:
    """The fields a write by the execution holding lease `lease` sets."""
    return {} if lease is None else {"lease": lease}


def graph_key(thread_id: str, ns: str) -> dict[str, str]:
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


class GraphDocs:
    """Builds and reads the documents of a run's graphs, with `serde`; remembers, for each graph it saved or read
    last, the lists it holds, so that the next save pushes only what a list gained (`put_updates`).

    Args:
        serde: the checkpointer's serializer.
        expire_after: seconds after a save that the TTL index may remove the document (None: never).
    """

    CACHE_MAX = 1024  # graphs whose last stored lists are remembered (see `forget`)

    def __init__(self, serde: SerializerProtocol, expire_after: float | None) -> None:
        self.serde, self.expire_after = serde, expire_after
        self._stored: OrderedDict[tuple[str, str], _Stored] = OrderedDict()
        self._lock = threading.Lock()

    def expiry(self) -> dict[str, datetime]:
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

    def remember(self, key: tuple[str, str], checkpoint_id: str, lists: dict[str, list]) -> None:
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

    def put_updates(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                     new_versions: ChannelVersions, lease: int | None = None
                     ) -> tuple[dict, dict | None, dict, dict, dict[str, list]]:
        """The updates that save `checkpoint`: (filter, update) of the delta against its parent (None when
        the parent is not known to be the stored one), (filter, update) of a full save, and the lists saved
        (copies, made as they are serialized); by the execution holding lease `lease` (`fenced`)."""
        conf = config["configurable"]
        key = graph_key(conf["thread_id"], conf.get("checkpoint_ns", ""))
        parent, checkpoint_id = conf.get("checkpoint_id"), checkpoint["id"]
        values, versions = checkpoint["channel_values"], checkpoint["channel_versions"]
        saved = self._lists(values)
        head = {
            "checkpoint_id": checkpoint_id,
            "checkpoint": self._part([{**checkpoint, "channel_values": {}}]),
            "metadata": self._part([get_checkpoint_metadata(config, metadata)]),
            **self.expiry(), **leased(lease),
        }
        resaved = parent == checkpoint_id  # the same checkpoint again (LangGraph's save at the graph's exit)
        if not resaved:
            head["parent_id"] = parent
        ids = {"ids": checkpoint_id}
        older = {"writes": {"cid": {"$lt": checkpoint_id}}}  # writes of the checkpoints before: no longer needed
        full = {"$set": {**head, "values": {_field(ch): self._encode(v, versions.get(ch)) for ch, v in values.items()}},
                "$setOnInsert": dict(key), "$addToSet": ids, "$pull": older}
        if parent is None:
            return fenced({"_id": key}, lease), None, fenced({"_id": key}, lease), full, saved
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
        return (fenced({"_id": key, "checkpoint_id": parent}, lease), delta, fenced({"_id": key}, lease), full,
                saved)

    def writes_update(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                       task_path: str, lease: int | None = None) -> tuple[dict, dict]:
        conf = config["configurable"]
        key = graph_key(conf["thread_id"], conf.get("checkpoint_ns", ""))
        checkpoint_id = conf["checkpoint_id"]
        packed = []
        for idx, (channel, value) in enumerate(writes):
            kind, data = self.serde.dumps_typed(value)
            packed.append({"idx": WRITES_IDX_MAP.get(channel, idx), "channel": channel, "t": kind, "b": data})
        entry = {"cid": checkpoint_id, "task_id": task_id, "path": task_path, "part": _pack(packed)}
        if writes and all(channel in PAUSE_CHANNELS for channel, _ in writes):
            entry["pause"] = True  # a task that stopped to wait, or the answer it waits for: not its result
        update = {"$push": {"writes": entry}, "$setOnInsert": dict(key)}
        if sets := {**self.expiry(), **leased(lease)}:
            update["$set"] = sets
        return fenced({"_id": key}, lease), update

    def tuple(self, doc: dict | None, config: RunnableConfig) -> CheckpointTuple | None:
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
        self.remember((thread_id, ns), checkpoint_id, self._lists(checkpoint["channel_values"]))
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

    def list_query(self, config: RunnableConfig | None, before: RunnableConfig | None) -> dict:
        query: dict[str, Any] = {"checkpoint_id": {"$exists": True}}
        conf = (config or {}).get("configurable", {})
        if "thread_id" in conf:
            query["thread_id"] = graph_key(conf["thread_id"], "")["thread_id"]
            if "checkpoint_ns" in conf:
                query["_id"] = graph_key(conf["thread_id"], conf["checkpoint_ns"])
        if before is not None:
            query["checkpoint_id"] = {"$lt": str(before["configurable"]["checkpoint_id"])}
        return query

def saved_query(thread_id: str, graph_namespaces: Sequence[str]) -> tuple[dict, dict]:
    return ({"_id": {"$in": [graph_key(thread_id, ns) for ns in graph_namespaces]}},
            {"checkpoint_id": 1, "ids": 1, "writes.cid": 1, "writes.task_id": 1, "writes.pause": 1})


def saved_of(graph_namespaces: Iterable[str], docs: Iterable[dict]) -> dict[str, SavedGraph]:
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
    return saved_of(namespaces_, collection.find(*saved_query(thread_id, namespaces_)))


