"""A fake mongos: a `FakeMongod` in the mongos role (`hello` with `msg: "isdbgrid"`, no `setName`) that
routes every data command to the shards of a `FakeCluster` instead of running it itself.

The router binds `$$NOW` (and answers `hello.localTime`) from its own clock, before it targets: two routers
with different clock offsets in front of the same shards give `$$NOW` values that far apart. It holds the
cluster's execution lock for the whole of a command. Retryable writes are recorded by the cluster (one record
for every router, as shards keep them on a real cluster), so a retry through another router is answered once.

Reads: a command on an unsharded collection goes to the primary shard; on a sharded one, to the targeted
shards (`targeting.py`). A `find` reaching several shards is sent to each with its filter and sort (and the
limit plus skip as its limit); the router merges, sorts, skips, limits and projects. An `aggregate` reaching
several shards (or reading another collection: `$lookup`, `$graphLookup`, `$unionWith` of an unsharded one,
which lives on the primary shard) pulls the documents matching its first `$match` from each and runs the rest
of the pipeline once on their union at the router, which is what a real mongos's merge gives for the stages the engine uses
(`$group`, `$sort`, `$limit`) but not how it splits the work. `count` and `distinct` are summed and united.
Every result is materialised at the router and served by its own cursors.

Writes on a sharded collection: `writes.py`. `createIndexes`, `dropIndexes` and `drop` of a sharded
collection go to every shard. Change streams are served by the router over the shards' common change log:
merged in the order the writes happened, `documentKey` with the shard key's fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bson import Int64
from mongomock import aggregate

from harel_dev.change_streams import ChangeStreams, opens_change_stream
from harel_dev.cursors import CursorRegistry
from harel_dev.engine import WRITES
from harel_dev.errors import RETRYABLE_WRITE_COMMANDS, not_modelled
from harel_dev.now import Clock, bind_command, server_now
from harel_dev.server import Reply

from .chunks import ShardedCollection
from .cluster import PRIMARY_SHARD, FakeCluster
from .gateway import ShardGateway, drain
from .metrics import RouterMetrics, query_metrics
from .server import FakeMongod
from .sharding_admin import ADMIN_COMMANDS, run_admin_command
from .targeting import target
from .topology import Role, RoleTopology
from .writes import ShardedWrites

VERSIONS = {"8.0": ("8.0.4", 25), "7.0": ("7.0.14", 21)}  # mode -> (version, maxWireVersion)
_CURSOR_COMMANDS = frozenset({"find", "aggregate", "listIndexes", "listCollections"})
_CURSOR_OPTIONS = ("batchSize", "singleBatch")
# Stages reading another collection: run at the router, where an unsharded one is the primary shard's.
_JOINS = frozenset({"$lookup", "$graphLookup", "$unionWith"})


@dataclass
class RouterTopology(RoleTopology):
    """A mongos of the cluster's version (`mode()`), which serves change streams."""

    mode: Callable[[], str] = lambda: "8.0"

    def _admit_change_stream(self) -> None:
        """A router serves change streams on any collection."""

    def hello(self, command: dict[str, Any], connection_id: int) -> dict[str, Any]:
        return super().hello(command, connection_id) | {"maxWireVersion": VERSIONS[self.mode()][1]}

    def build_info(self) -> dict[str, Any]:
        version = VERSIONS[self.mode()][0]
        major, minor, patch = (int(part) for part in version.split("."))
        return super().build_info() | {"version": version, "versionArray": [major, minor, patch, 0]}

    def server_status(self, connections: int) -> dict[str, Any]:
        return super().server_status(connections) | {"version": VERSIONS[self.mode()][0]}


class Router(FakeMongod):
    """One mongos of `cluster` on 127.0.0.1; `latency_ms` and `clock_offset` as for `FakeMongod`."""

    def __init__(
        self, cluster: FakeCluster, *, port: int = 0, latency_ms: float = 0.0, clock_offset: float = 0.0
    ) -> None:
        self.cluster = cluster
        self.metrics = RouterMetrics()
        super().__init__(
            Role.MONGOS, port=port, latency_ms=latency_ms, clock_offset=clock_offset, engine=cluster.primary
        )
        self._retries = cluster.retries
        self._cursors = CursorRegistry()
        self._streams = ChangeStreams(cluster.changes, self._cursors.new_id, self._lookup)
        self._gateway = ShardGateway(cluster, self.metrics)
        self._writes = ShardedWrites(self._gateway)
        cluster.router_metrics.append(self.metrics)

    def _new_topology(self, set_name: str, clock: Clock) -> RoleTopology:
        return RouterTopology(set_name, me="", clock=clock, role=Role.MONGOS, mode=lambda: self.cluster.mode)

    def reset(self) -> None:
        """The router's own state (cursors, fail points, clock offset); `FakeCluster.reset` does the data."""
        super().reset()
        with self._execution_lock:
            self._cursors.clear()
            self._streams.clear()

    # --- commands ------------------------------------------------------------------------------------

    def _server_command(self, name: str, db: str, command: dict[str, Any]) -> Reply:
        if name in ADMIN_COMMANDS:
            with self._execution_lock:
                return run_admin_command(self.cluster, name, db, command)
        reply = super()._server_command(name, db, command)
        if name == "serverStatus":
            with self._execution_lock:
                reply["metrics"] = {"query": query_metrics([self.metrics])}
        return reply

    def _run(self, name: str, db: str, command: dict[str, Any]) -> Reply:
        bound = bind_command(command, server_now(self._clock()))
        if name in RETRYABLE_WRITE_COMMANDS and "txnNumber" in command:
            return self._retries.run(bound, lambda: self._route(name, db, bound))
        return self._route(name, db, bound)

    def _route(self, name: str, db: str, command: dict[str, Any]) -> Reply:
        if name == "getMore":
            return self._get_more(command)
        if name == "killCursors":
            return self._kill_cursors(command)
        if db == "config":
            return self._config_read(name, command)
        if name == "dropDatabase":
            for shard in self.cluster.shards:
                self._gateway.send(shard, name, db, command)
            for namespace in [ns for ns in self.cluster.collections if ns.split(".", 1)[0] == db]:
                self.cluster.forget(namespace)
            return {"ok": 1.0}
        subject = command[name]
        if name == "listDatabases" or not isinstance(subject, str):
            return self._on_one(PRIMARY_SHARD, name, db, command)
        namespace = f"{db}.{subject}"
        if opens_change_stream(name, command):
            return self._open_stream(namespace, command)
        sharded = self.cluster.sharded(namespace)
        if sharded is None or name in ("create", "listIndexes", "listCollections"):
            return self._on_one(PRIMARY_SHARD, name, db, command)
        if name in ("drop", "createIndexes", "dropIndexes"):
            replies = [self._gateway.send(shard, name, db, command) for shard in self.cluster.shards]
            if name == "drop":
                self.cluster.forget(namespace)
            return replies[0]
        if name in ("insert", "update", "delete"):
            return self._writes.write(name, db, command, sharded)
        if name in ("findAndModify", "findandmodify"):
            return self._writes.find_and_modify(db, command, sharded)
        if command.get("explain"):
            raise not_modelled("explain through the fake cluster's router")
        readers = {
            "find": self._find,
            "aggregate": self._aggregate,
            "count": self._count,
            "distinct": self._distinct,
        }
        return readers[name](db, command, sharded)

    def _on_one(self, shard: str, name: str, db: str, command: dict[str, Any]) -> Reply:
        """The command on one shard, its cursor (if any) materialised at the router."""
        if name not in _CURSOR_COMMANDS:
            return self._gateway.send(shard, name, db, command)
        if name == "find":
            limit = int(command.get("limit") or 0)
            sent = {key: value for key, value in command.items() if key not in _CURSOR_OPTIONS}
            namespace, documents = self._gateway.read(shard, name, db, sent | {"limit": abs(limit)})
            single_batch = bool(command.get("singleBatch")) or limit < 0
            return self._cursor(namespace, documents, command.get("batchSize"), single_batch)
        namespace, documents = self._gateway.read(shard, name, db, {**command, "cursor": {}})
        return self._cursor(namespace, documents, (command.get("cursor") or {}).get("batchSize"))

    def _cursor(
        self, namespace: str, documents: list[dict[str, Any]], batch_size: Any, single_batch: bool = False
    ) -> Reply:
        return {"cursor": self._cursors.open(namespace, documents, batch_size, single_batch), "ok": 1.0}

    def _scatter(self, shards: list[str]) -> None:
        if len(shards) > 1:
            self.metrics.count("scatterGatherReads")

    # --- reads of a sharded collection ---------------------------------------------------------------

    def _find(self, db: str, command: dict[str, Any], collection: ShardedCollection) -> Reply:
        shards = target(command.get("filter") or {}, collection)
        if len(shards) == 1:
            return self._on_one(shards[0], "find", db, command)
        self._scatter(shards)
        limit, skip = abs(int(command.get("limit") or 0)), int(command.get("skip") or 0)
        dropped = {*_CURSOR_OPTIONS, "projection", "skip", "limit"}
        sent = {key: value for key, value in command.items() if key not in dropped}
        if limit:
            sent["limit"] = skip + limit
        documents: list[dict[str, Any]] = []
        for shard in shards:
            documents += self._gateway.read(shard, "find", db, sent)[1]
        stages: list[dict[str, Any]] = []
        if command.get("sort"):
            stages.append({"$sort": command["sort"]})
        if skip:
            stages.append({"$skip": skip})
        if limit:
            stages.append({"$limit": limit})
        if command.get("projection"):
            stages.append({"$project": command["projection"]})
        merged = list(aggregate.process_pipeline(documents, None, stages, None)) if stages else documents
        single_batch = bool(command.get("singleBatch")) or int(command.get("limit") or 0) < 0
        return self._cursor(f"{db}.{command['find']}", merged, command.get("batchSize"), single_batch)

    def _aggregate(self, db: str, command: dict[str, Any], collection: ShardedCollection) -> Reply:
        pipeline = list(command.get("pipeline") or [])
        first = (
            pipeline[0]
            if pipeline and isinstance(pipeline[0], dict) and set(pipeline[0]) == {"$match"}
            else None
        )
        shards = target(first["$match"] if first else {}, collection)
        joined = [_joined(stage) for stage in pipeline if isinstance(stage, dict) and _JOINS & set(stage)]
        if len(shards) == 1 and not joined:
            return self._on_one(shards[0], "aggregate", db, command)
        if any(isinstance(stage, dict) and ({"$out", "$merge"} & set(stage)) for stage in pipeline):
            raise not_modelled("$out and $merge through the fake cluster's router")
        if any(self.cluster.sharded(f"{db}.{name}") for name in joined):
            raise not_modelled("$lookup, $graphLookup and $unionWith of a sharded collection")
        self._scatter(shards)
        name = command["aggregate"]
        documents: list[dict[str, Any]] = []
        for shard in shards:
            pulled = {"aggregate": name, "pipeline": [first] if first else [], "cursor": {}}
            documents += self._gateway.read(shard, "aggregate", db, pulled)[1]
        rest = pipeline[1:] if first else pipeline
        database = self.cluster.primary.collection(db, name).database
        merged = list(aggregate.process_pipeline(documents, database, rest, None))
        return self._cursor(f"{db}.{name}", merged, (command.get("cursor") or {}).get("batchSize"))

    def _count(self, db: str, command: dict[str, Any], collection: ShardedCollection) -> Reply:
        query = command.get("query") or {}
        shards = target(query, collection)
        if len(shards) == 1:
            return self._gateway.send(shards[0], "count", db, command)
        self._scatter(shards)
        sent = {"count": command["count"], "query": query}
        total = sum(int(self._gateway.send(shard, "count", db, sent)["n"]) for shard in shards)
        n = max(0, total - int(command.get("skip") or 0))
        limit = abs(int(command.get("limit") or 0))
        return {"n": min(n, limit) if limit else n, "ok": 1.0}

    def _distinct(self, db: str, command: dict[str, Any], collection: ShardedCollection) -> Reply:
        shards = target(command.get("query") or {}, collection)
        if len(shards) == 1:
            return self._gateway.send(shards[0], "distinct", db, command)
        self._scatter(shards)
        values: list[Any] = []
        for shard in shards:
            values += [
                v for v in self._gateway.send(shard, "distinct", db, command)["values"] if v not in values
            ]
        return {"values": values, "ok": 1.0}

    # --- cursors and change streams ------------------------------------------------------------------

    def _get_more(self, command: dict[str, Any]) -> Reply:
        cursor_id = int(command["getMore"])
        if self._streams.holds(cursor_id):
            max_time_ms = command.get("maxTimeMS")
            cursor = self._streams.get_more(
                cursor_id, command.get("batchSize"), None if max_time_ms is None else int(max_time_ms)
            )
            return {"cursor": cursor, "ok": 1.0}
        return {"cursor": self._cursors.get_more(cursor_id, command.get("batchSize")), "ok": 1.0}

    def _kill_cursors(self, command: dict[str, Any]) -> Reply:
        cursor_ids = [int(i) for i in command.get("cursors", [])]
        streams = self._streams.kill(cursor_ids)
        reply = self._cursors.kill([cursor_id for cursor_id in cursor_ids if cursor_id not in streams])
        reply["cursorsKilled"] = [Int64(cursor_id) for cursor_id in streams] + reply["cursorsKilled"]
        return {**reply, "ok": 1.0}

    def _open_stream(self, namespace: str, command: dict[str, Any]) -> Reply:
        """A stream over every shard's events (one cursor per shard on a real cluster: counted so)."""
        sharded = self.cluster.sharded(namespace)
        for shard in sorted(sharded.shards()) if sharded else [PRIMARY_SHARD]:
            self.metrics.sent("aggregate", shard)
        batch_size = (command.get("cursor") or {}).get("batchSize")
        return {"cursor": self._streams.open(namespace, command["pipeline"], batch_size), "ok": 1.0}

    def _lookup(self, namespace: str, key: Any) -> dict[str, Any] | None:
        """updateLookup: the document with this `_id` on whichever shard holds it now."""
        db, name = namespace.split(".", 1)
        for engine in self.cluster.shards.values():
            found: dict[str, Any] | None = engine.collection(db, name).find_one({"_id": key})
            if found is not None:
                return found
        return None

    def _config_read(self, name: str, command: dict[str, Any]) -> Reply:
        if name in WRITES:
            raise not_modelled("writes to the config database (use the sharding commands)")
        engine = self.cluster.config_engine()
        if name not in _CURSOR_COMMANDS:
            return engine.execute(name, "config", command)
        batch_size = (
            command.get("batchSize") if name == "find" else (command.get("cursor") or {}).get("batchSize")
        )
        sent = {key: value for key, value in command.items() if key not in _CURSOR_OPTIONS}
        if name != "find":
            sent["cursor"] = {}
        namespace, documents = drain(engine, "config", engine.execute(name, "config", sent))
        return self._cursor(namespace, documents, batch_size)


def _joined(stage: dict[str, Any]) -> str:
    """The collection a `$lookup`, `$graphLookup` or `$unionWith` stage reads."""
    name, options = next((key, value) for key, value in stage.items() if key in _JOINS)
    if name == "$unionWith" and isinstance(options, str):
        return options
    return str(options.get("coll" if name == "$unionWith" else "from"))
