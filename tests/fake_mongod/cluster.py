"""The fake cluster's state: its shards, the sharded collections' chunk maps, zones, the balancer, and the
routers' metrics; the test API (`move_range`, `shard_of`, `documents`, `metrics`, `reset`).

Each shard (`shard0`..`shardN-1`) is an in-process harel-dev `Engine`. They share one execution lock and one
change log: a router holds the lock for the whole of a client's command, so a command spanning shards sees
and leaves one consistent state, and a chunk move (under the same lock) is never seen half done; and the
events of every shard land in one log in the order they happened, so a change stream through a router is
the shards' streams already merged. Unsharded collections live on the primary shard, `shard0`.

The config server's collections (`config.shards`, `config.collections`, `config.chunks`, `config.tags`,
`config.databases`, `config.settings`, `config.version`) are written from this state into a separate engine before each read,
so a real mongosh or PyMongo admin script can inspect them.

Placement happens at once: `moveRange` and `move_range` move documents when called, and with the balancer
enabled (the default) a zone range whose chunks sit on a shard outside the zone moves them to the zone's
first shard when the range is defined (a real balancer takes its time, in rounds). The balancer only enforces
zones; it never evens out chunk counts. A move copies the documents (without change events, as a real
migration's writes are hidden from change streams), deletes them from the source and updates the chunk map.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from bson import ObjectId, Timestamp

from harel_dev.changes import ChangeLog
from harel_dev.engine import Engine
from harel_dev.errors import CommandError
from harel_dev.retryable import RetryRecords

from . import bson_order
from .chunks import COMPOUND_KEY, PARTITION, ShardedCollection, ZoneRange, initial_chunks
from .metrics import RouterMetrics, query_metrics

MODES = ("7.0", "8.0")
PRIMARY_SHARD = "shard0"
ILLEGAL_OPERATION = 20
SHARD_NOT_FOUND = 70
_SYSTEM_DATABASES = frozenset({"admin", "config", "local"})

# The options an index keeps on every shard, as `createIndexes` takes them.
INDEX_OPTIONS = ("unique", "sparse", "partialFilterExpression", "expireAfterSeconds")


class FakeCluster:
    """N shards behind any number of routers (`router.Router`), all in this process. `mode` is the
    MongoDB version whose rules single-document writes without the shard key follow: "8.0" (the default)
    accepts them as the two-phase protocol, "7.0" refuses them."""

    def __init__(self, shard_count: int = 3, *, mode: str = "8.0") -> None:
        if shard_count < 1:
            raise ValueError(f"a cluster needs at least one shard, got {shard_count}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        bson_order.install()
        self.mode = mode
        self._initial_mode = mode
        self.lock = threading.Lock()
        self.changes = ChangeLog(self.lock, time.time)
        self.shards: dict[str, Engine] = {
            f"shard{index}": Engine(time.time, self.lock, change_log=self.changes)
            for index in range(shard_count)
        }
        self.retries = RetryRecords()
        self.collections: dict[str, ShardedCollection] = {}
        self.shard_zones: dict[str, set[str]] = {name: set() for name in self.shards}
        self.zone_ranges: dict[str, list[ZoneRange]] = {}
        self.balancer_enabled = True
        self.balancer_rounds = 0
        self.router_metrics: list[RouterMetrics] = []
        self._config = Engine()
        self._cluster_id = ObjectId()

    # --- test API ------------------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """Every router's counters summed: what `serverStatus().metrics.query` reports on one router."""
        with self.lock:
            return query_metrics(self.router_metrics)

    def reset_metrics(self) -> None:
        with self.lock:
            for metrics in self.router_metrics:
                metrics.reset()

    def set_mode(self, mode: str) -> None:
        """Follow another version's rules from now on ("7.0" or "8.0"; `reset` restores the constructor's)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        with self.lock:
            self.mode = mode

    def reset(self) -> None:
        """Empty every shard and forget the sharding state, zones, metrics, retry records; balancer on, the
        constructor's mode."""
        with self.lock:
            self.mode = self._initial_mode
            for engine in self.shards.values():
                engine.reset()
            self._config.reset()
            self.retries.clear()
            self.collections.clear()
            self.shard_zones = {name: set() for name in self.shards}
            self.zone_ranges.clear()
            self.balancer_enabled = True
            self.balancer_rounds = 0
            for metrics in self.router_metrics:
                metrics.reset()

    def move_range(self, namespace: str, p_from: float, p_to: float, shard: str) -> None:
        """Move the chunks of `p_from <= p < p_to` (±math.inf for MinKey/MaxKey) of a sharded collection
        to `shard` at once, as `moveRange` does, while other commands run."""
        with self.lock:
            self.move(self.require_sharded(namespace), p_from, p_to, shard)

    def shard_of(self, namespace: str, p: float) -> str:
        """The shard owning partition `p` of a sharded collection."""
        with self.lock:
            return self.require_sharded(namespace).owner(float(p))

    def documents(self, shard: str, namespace: str) -> list[dict[str, Any]]:
        """Every document of `namespace` stored on `shard`, for audits."""
        db, name = namespace.split(".", 1)
        with self.lock:
            return list(self.engine(shard).collection(db, name).find())

    # --- state (callers hold the lock) ---------------------------------------------------------------

    @property
    def primary(self) -> Engine:
        return self.shards[PRIMARY_SHARD]

    def engine(self, shard: str) -> Engine:
        if shard not in self.shards:
            raise CommandError(SHARD_NOT_FOUND, f"Shard {shard} not found")
        return self.shards[shard]

    def sharded(self, namespace: str) -> ShardedCollection | None:
        return self.collections.get(namespace)

    def require_sharded(self, namespace: str) -> ShardedCollection:
        collection = self.collections.get(namespace)
        if collection is None:
            raise CommandError(118, f"Collection {namespace} is not sharded.")
        return collection

    def shard_collection(self, namespace: str, key: dict[str, Any]) -> None:
        """Shard `namespace` on `key` (checked by the caller): its indexes on every shard, every chunk on
        the primary shard (spread for a hashed key), then the zones applied."""
        db, name = namespace.split(".", 1)
        primary = self.primary.collection(db, name)
        indexes = [
            {"name": index_name, "key": dict(info["key"])}
            | {option: info[option] for option in INDEX_OPTIONS if option in info}
            for index_name, info in primary.index_information().items()
            if index_name != "_id_"
        ]
        if not any(list(index["key"].items())[: len(key)] == list(key.items()) for index in indexes):
            if primary.find_one() is not None:
                raise CommandError(
                    72,
                    "Please create an index that starts with the proposed shard key before sharding the "
                    "collection.",
                )
            indexes.append({"name": "_".join(f"{f}_{v}" for f, v in key.items()), "key": dict(key)})
        for engine in self.shards.values():
            engine.execute("createIndexes", db, {"createIndexes": name, "indexes": indexes, "$db": db})
        collection = ShardedCollection(
            namespace, dict(key), initial_chunks(key, list(self.shards), PRIMARY_SHARD)
        )
        self.collections[namespace] = collection
        self.changes.set_document_key(namespace, collection.key_fields)
        if collection.hashed and len(self.shards) > 1:
            self._spread_hashed(collection)
        self.balance()

    def forget(self, namespace: str) -> None:
        """The collection was dropped: it is unsharded again (its zone ranges stay, as on a real cluster)."""
        if self.collections.pop(namespace, None) is not None:
            self.changes.set_document_key(namespace, ())

    def move(self, collection: ShardedCollection, low: float, high: float, shard: str) -> None:
        """Move the documents of `[low, high)` to `shard`, then give it the chunks."""
        if collection.hashed:
            raise CommandError(ILLEGAL_OPERATION, "the fake cluster moves ranges of {p: 1, _id: 1} only")
        if low >= high:
            raise CommandError(2, "the range's min must be below its max")
        db, name = collection.namespace.split(".", 1)
        target = self.engine(shard).collection(db, name)
        in_range: dict[str, Any] = {}
        if low != -math.inf:
            in_range["$gte"] = low
        if high != math.inf:
            in_range["$lt"] = high
        query = {PARTITION: in_range} if in_range else {}
        moving = {
            source: list(self.shards[source].collection(db, name).find(query))
            for source in sorted(collection.shards())
            if source != shard
        }
        for source, documents in moving.items():
            clash = [
                d["_id"] for d in documents if target.find_one({"_id": d["_id"]}, {"_id": 1}) is not None
            ]
            if clash:
                raise CommandError(
                    11000,
                    f"moving {collection.namespace} from {source} to {shard}: _id {clash[0]!r} is on both",
                )
        for source, documents in moving.items():
            if documents:
                target.insert_many(documents)
                self.shards[source].collection(db, name).delete_many(
                    {"_id": {"$in": [d["_id"] for d in documents]}}
                )
        collection.assign(low, high, shard)

    def balance(self) -> None:
        """With the balancer enabled: every chunk of a zone range onto a shard of that zone."""
        if not self.balancer_enabled:
            return
        self.balancer_rounds += 1
        for namespace, ranges in self.zone_ranges.items():
            collection = self.collections.get(namespace)
            if collection is None or collection.hashed:
                continue
            for zone_range in ranges:
                members = sorted(s for s, zones in self.shard_zones.items() if zone_range.zone in zones)
                if not members:
                    continue
                collection.split(zone_range.low)
                collection.split(zone_range.high)
                for chunk in list(collection.chunks):
                    inside = zone_range.low <= chunk.low and chunk.high <= zone_range.high
                    if inside and chunk.shard not in members:
                        self.move(collection, chunk.low, chunk.high, members[0])

    def config_engine(self) -> Engine:
        """The config server's collections, written from the current state."""
        self._config.reset()
        config = self._config.collection("config", "shards")
        for name, zones in self.shard_zones.items():
            config.insert_one(self._shard_document(name, zones))
        listed = self.primary.execute("listDatabases", "admin", {"listDatabases": 1, "nameOnly": True})
        names = {entry["name"] for entry in listed["databases"]} | {
            ns.split(".", 1)[0] for ns in self.collections
        }
        databases = sorted(names - _SYSTEM_DATABASES)
        for db in databases:
            self._config.collection("config", "databases").insert_one(
                {"_id": db, "primary": PRIMARY_SHARD, "partitioned": True}
            )
        for namespace, collection in sorted(self.collections.items()):
            self._config.collection("config", "collections").insert_one(
                {
                    "_id": namespace,
                    "lastmodEpoch": collection.epoch,
                    "timestamp": Timestamp(int(collection.epoch.generation_time.timestamp()), 1),
                    "uuid": collection.uuid,
                    "key": dict(collection.key),
                    "unique": False,
                    "noBalance": False,
                }
            )
            for version, chunk in enumerate(collection.chunks, start=1):
                self._config.collection("config", "chunks").insert_one(
                    {
                        "_id": chunk.id,
                        "uuid": collection.uuid,
                        "ns": namespace,
                        "min": collection.bound(chunk.low),
                        "max": collection.bound(chunk.high),
                        "shard": chunk.shard,
                        "lastmod": Timestamp(1, version),
                    }
                )
        for namespace, ranges in sorted(self.zone_ranges.items()):
            bounds = self.collections.get(namespace) or ShardedCollection(namespace, COMPOUND_KEY, [])
            for zone_range in ranges:
                self._config.collection("config", "tags").insert_one(
                    {
                        "_id": zone_range.id,
                        "ns": namespace,
                        "min": bounds.bound(zone_range.low),
                        "max": bounds.bound(zone_range.high),
                        "tag": zone_range.zone,
                    }
                )
        self._config.collection("config", "version").insert_one(
            {"_id": 1, "minCompatibleVersion": 5, "currentVersion": 6, "clusterId": self._cluster_id}
        )
        self._config.collection("config", "settings").insert_one(
            {
                "_id": "balancer",
                "mode": "full" if self.balancer_enabled else "off",
                "stopped": not self.balancer_enabled,
            }
        )
        return self._config

    def shard_document(self, name: str) -> dict[str, Any]:
        return self._shard_document(name, self.shard_zones[name])

    def _shard_document(self, name: str, zones: set[str]) -> dict[str, Any]:
        document: dict[str, Any] = {
            "_id": name,
            "host": f"{name}/{name}.fake-cluster.invalid:27018",
            "state": 1,
        }
        if zones:
            document["tags"] = sorted(zones)
        document["topologyTime"] = Timestamp(1, 1)
        return document

    def _spread_hashed(self, collection: ShardedCollection) -> None:
        """A hashed collection's documents (already on the primary) onto the shards owning their hashes."""
        db, name = collection.namespace.split(".", 1)
        source = self.primary.collection(db, name)
        for document in list(source.find()):
            value = collection.key_value(document)
            assert value is not None
            owner = collection.owner(value)
            if owner != PRIMARY_SHARD:
                self.shards[owner].collection(db, name).insert_one(document)
                source.delete_one({"_id": document["_id"]})
