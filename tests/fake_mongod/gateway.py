"""How a router reaches its shards: one counted request to one shard's engine, and a shard's cursor read
to its end (a router materialises every result and serves `getMore` from its own cursor; draining a shard's
cursor counts as one request). Callers hold the cluster's execution lock."""

from __future__ import annotations

from typing import Any

from harel_dev.engine import Engine

from .cluster import FakeCluster
from .metrics import RouterMetrics

Reply = dict[str, Any]


class ShardGateway:
    def __init__(self, cluster: FakeCluster, metrics: RouterMetrics) -> None:
        self.cluster = cluster
        self.metrics = metrics

    def send(self, shard: str, name: str, db: str, command: dict[str, Any]) -> Reply:
        self.metrics.sent(name, shard)
        return self.cluster.engine(shard).execute(name, db, {name: command[name], **command})

    def read(
        self, shard: str, name: str, db: str, command: dict[str, Any]
    ) -> tuple[str, list[dict[str, Any]]]:
        """Every document a cursor-returning command gives on `shard`, with the cursor's namespace."""
        return drain(self.cluster.engine(shard), db, self.send(shard, name, db, command))

    def peek(self, shard: str, db: str, find: dict[str, Any]) -> list[dict[str, Any]]:
        """A `find` the fake runs for its own checks (what an update would match), not counted: a real
        router sends no such request."""
        engine = self.cluster.engine(shard)
        return drain(engine, db, engine.execute("find", db, find))[1]


def drain(engine: Engine, db: str, reply: Reply) -> tuple[str, list[dict[str, Any]]]:
    """The cursor's namespace and every document of the cursor in `reply` (from `engine`), read to its end."""
    cursor = reply["cursor"]
    documents = list(cursor["firstBatch"])
    cursor_id = int(cursor["id"])
    while cursor_id:
        more = engine.execute("getMore", db, {"getMore": cursor_id})["cursor"]
        documents += more["nextBatch"]
        cursor_id = int(more["id"])
    return str(cursor["ns"]), documents
