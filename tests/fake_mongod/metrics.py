"""What a router counts, reported in `serverStatus().metrics.query` and by `FakeCluster.metrics()`.

MongoDB's own names (a real mongos reports them in the same place, so one assertion reads both):
`updateOneTargetedShardedCount`, `updateOneNonTargetedShardedCount`, `findAndModifyTargetedShardedCount`,
`findAndModifyNonTargetedShardedCount`, `deleteOneTargetedShardedCount`, `deleteOneNonTargetedShardedCount`,
`updateOneWithoutShardKeyWithIdCount`. The fake's own, which no MongoDB reports: `scatterGatherReads` (a
find, aggregate, count or distinct on a sharded collection that reached more than one shard),
`scatterGatherWrites` (a multi-document update or delete statement that did), `shardRequests` (every
request the router sent a shard, for any namespace), `shardRequestsByCommand` and `shardRequestsByShard`.
A write statement is counted when the router sends it, so the statements an ordered batch never reached
are not.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bson import Int64

MONGODB_COUNTERS = (
    "updateOneTargetedShardedCount",
    "updateOneNonTargetedShardedCount",
    "findAndModifyTargetedShardedCount",
    "findAndModifyNonTargetedShardedCount",
    "deleteOneTargetedShardedCount",
    "deleteOneNonTargetedShardedCount",
    "updateOneWithoutShardKeyWithIdCount",
)
FAKE_COUNTERS = ("scatterGatherReads", "scatterGatherWrites", "shardRequests")


class RouterMetrics:
    """One router's counters (callers hold the cluster's execution lock)."""

    def __init__(self) -> None:
        self.counters: Counter[str] = Counter()
        self.by_command: Counter[str] = Counter()
        self.by_shard: Counter[str] = Counter()

    def count(self, name: str) -> None:
        self.counters[name] += 1

    def sent(self, command: str, shard: str) -> None:
        self.counters["shardRequests"] += 1
        self.by_command[command] += 1
        self.by_shard[shard] += 1

    def reset(self) -> None:
        self.counters.clear()
        self.by_command.clear()
        self.by_shard.clear()


def query_metrics(routers: list[RouterMetrics]) -> dict[str, Any]:
    """The counters of `routers` summed, in `serverStatus().metrics.query`'s shape (Int64 values)."""
    counters: Counter[str] = Counter()
    by_command: Counter[str] = Counter()
    by_shard: Counter[str] = Counter()
    for router in routers:
        counters.update(router.counters)
        by_command.update(router.by_command)
        by_shard.update(router.by_shard)
    reply: dict[str, Any] = {name: Int64(counters[name]) for name in MONGODB_COUNTERS + FAKE_COUNTERS}
    reply["shardRequestsByCommand"] = {name: Int64(n) for name, n in sorted(by_command.items())}
    reply["shardRequestsByShard"] = {name: Int64(n) for name, n in sorted(by_shard.items())}
    return reply
