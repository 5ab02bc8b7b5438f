"""Benchmark 7: what one event costs a sharded cluster, in requests from the routers to the shards.

The fake cluster of the test suite (tests/fake_mongod: a router in front of three shards, each a fake
`mongod` on mongomock) partitioned as `harel partitions init` leaves it (P = 256, one zone per shard). One
worker runs the smoke workload through the first router, the client that starts and watches the run uses
the second, so the first router's own `serverStatus().metrics.query` counts the worker's commands alone:
every request it sent a shard (one per command that reached one shard, one per shard reached otherwise),
the single-document writes without their shard key, the reads that reached more than one shard. A real
mongos reports the MongoDB-named counters in the same place; the shard requests are the fake's own count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pymongo import MongoClient

from bench import smoke_workload
from bench.report import Row
from harel.backend import open_backend
from harel.executions.partitions import DEFAULT_SHARDED_COUNT
from harel.partitioning import init
from harel.smoke import run_smoke
from harel.worker import Worker, WorkerConfig
from tests.fake_mongod.deployment import start_cluster
from tests.fake_mongod.fixtures import CLIENT_OPTIONS

SHARDS = 3
TARGET = 4.5  # shard requests per processed event
SETTLE_SECONDS = 0.5
SMOKE_TIMEOUT = 60.0
NON_TARGETED = (
    "updateOneNonTargetedShardedCount",
    "findAndModifyNonTargetedShardedCount",
    "deleteOneNonTargetedShardedCount",
    "updateOneWithoutShardKeyWithIdCount",
)


@dataclass(frozen=True)
class ShardedCost:
    shards: int
    passed: bool
    processed: int
    shard_requests: int
    by_command: dict[str, int]
    non_targeted: dict[str, int]
    scatter_reads: int

    @property
    def per_event(self) -> float:
        return self.shard_requests / self.processed if self.processed else float("nan")


def _query_metrics(url: str) -> dict[str, Any]:
    with MongoClient(url, **CLIENT_OPTIONS) as client:
        return dict(client.admin.command("serverStatus")["metrics"]["query"])


def measure(shards: int = SHARDS) -> ShardedCost:
    deployment = start_cluster(shards, routers=2)
    worker_router, client_router = (router.url for router in deployment.routers)
    try:
        with MongoClient(worker_router, **CLIENT_OPTIONS) as admin:
            init(admin, "harel", DEFAULT_SHARDED_COUNT)
        app, chart_id = smoke_workload.bench_app()
        backend = open_backend(worker_router, deadline=15.0)
        client = open_backend(client_router, deadline=15.0)
        worker = Worker(
            backend.store,
            backend.transport,
            app,
            config=WorkerConfig(concurrency=1),
            heartbeats=backend.heartbeats,
        )
        worker.start()
        try:
            time.sleep(SETTLE_SECONDS)  # its change stream open, its first idle claims sent
            deployment.cluster.reset_metrics()
            report = run_smoke(client.store, client.transport, app, chart_id=chart_id, timeout=SMOKE_TIMEOUT)
        finally:
            worker.stop(drain_seconds=5.0)
        counted = _query_metrics(worker_router)
        backend.close()
        client.close()
    finally:
        deployment.stop()
    return ShardedCost(
        shards=shards,
        passed=report.passed,
        processed=worker.counters["processed"],
        shard_requests=int(counted["shardRequests"]),
        by_command={name: int(n) for name, n in counted["shardRequestsByCommand"].items()},
        non_targeted={name: int(counted[name]) for name in NON_TARGETED},
        scatter_reads=int(counted["scatterGatherReads"]),
    )


def rows(result: ShardedCost) -> list[Row]:
    where = (
        f"smoke workflow on the fake cluster ({result.shards} shards, P = {DEFAULT_SHARDED_COUNT}), "
        f"{result.processed} events processed by one worker"
    )
    if not result.passed:
        where += "; THE SMOKE RUN FAILED"
    commands = ", ".join(f"{name} {n}" for name, n in sorted(result.by_command.items()))
    return [
        Row(
            7,
            "shard requests per processed event (the worker's router)",
            f"{result.per_event:.2f}",
            note=(
                f"{where}; {commands}; the change stream's getMores are not counted (the fake serves them "
                f"from one change log; a real router sends one to every shard); target ≤ {TARGET}"
            ),
        ),
        Row(
            7,
            "· single-document writes without their shard key",
            str(sum(result.non_targeted.values())),
            note=", ".join(f"{name} {n}" for name, n in result.non_targeted.items()) + "; target 0",
        ),
        Row(7, "· reads that reached more than one shard", str(result.scatter_reads), note="target 0"),
    ]
