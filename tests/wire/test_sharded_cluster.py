"""The engine on a sharded cluster: the fake mongos in front of three fake shards (`tests.fake_mongod`,
`fake_cluster`), partitioned by `harel partitions init` (P = 256, one zone per shard). The routers count
what a real mongos counts (`serverStatus().metrics.query`), so each test reads, after its run, that the hot
path sent no single-document write without its shard key and no read to more than one shard."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from pymongo import MongoClient

from harel.app import App
from harel.backend import Backend, open_backend
from harel.client import start_execution
from harel.executions.partitions import DEFAULT_SHARDED_COUNT
from harel.model import ExecutionStatus
from harel.partitioning import init
from harel.smoke import check, gather, register_smoke, run_smoke
from harel.worker import Worker, WorkerConfig
from tests.audit import audit
from tests.fake_mongod.deployment import ClusterDeployment
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, Deployment
from tests.wire import test_ordering
from tests.wire.processes import WorkerProcesses, wait_until

pytestmark = pytest.mark.wire

DB = "harel"
NON_TARGETED = (
    "updateOneNonTargetedShardedCount",
    "findAndModifyNonTargetedShardedCount",
    "deleteOneNonTargetedShardedCount",
    "updateOneWithoutShardKeyWithIdCount",
)


def partitioned(deployment: ClusterDeployment, count: int = DEFAULT_SHARDED_COUNT) -> None:
    with MongoClient(deployment.url, **CLIENT_OPTIONS) as client:
        init(client, DB, count)


def hot_path_metrics(deployment: ClusterDeployment) -> dict[str, Any]:
    return {
        name: int(value)
        for name, value in deployment.cluster.metrics().items()
        if not isinstance(value, dict)
    }


@contextmanager
def worker_on(deployment: ClusterDeployment, app: App, **config: Any) -> Iterator[tuple[Backend, Worker]]:
    backend = open_backend(deployment.url, deadline=15.0)
    worker = Worker(
        backend.store,
        backend.transport,
        app,
        config=WorkerConfig(**config),
        heartbeats=backend.heartbeats,
    )
    worker.start()
    try:
        yield backend, worker
    finally:
        worker.stop(drain_seconds=5.0)
        backend.close()


def test_the_smoke_workflow_runs_with_every_hot_command_on_one_shard(fake_cluster: ClusterDeployment) -> None:
    partitioned(fake_cluster)
    app = App("smoke")
    chart_id = register_smoke(app, region_timer=0.3, final_timer=0.3)
    with worker_on(fake_cluster, app, concurrency=2) as (backend, worker):
        time.sleep(0.3)  # the worker settles on its change stream: what follows is the hot path
        fake_cluster.cluster.reset_metrics()
        report = run_smoke(backend.store, backend.transport, app, chart_id=chart_id, timeout=30)
        counted = hot_path_metrics(fake_cluster)
        processed = worker.counters["processed"]
    assert report.passed, report.failures
    assert {name: counted[name] for name in NON_TARGETED} == dict.fromkeys(NON_TARGETED, 0)
    assert counted["scatterGatherReads"] == 0 and counted["scatterGatherWrites"] == 0
    assert counted["findAndModifyTargetedShardedCount"] > 0 and counted["updateOneTargetedShardedCount"] > 0
    assert processed > 0


def non_targeted_writes(deployment: ClusterDeployment) -> dict[str, int]:
    counted = hot_path_metrics(deployment)
    return {name: counted[name] for name in NON_TARGETED}


@pytest.fixture
def sharded(fake_cluster: ClusterDeployment) -> Deployment:
    """The fake cluster partitioned, as the ordering tests take a deployment (database `harel`)."""
    partitioned(fake_cluster)
    fake_cluster.cluster.reset_metrics()
    return Deployment(fake_cluster.url, DB, fake=None)


@pytest.fixture
def cluster_admin(sharded: Deployment) -> Iterator[MongoClient[Any]]:
    with MongoClient(sharded.url, appName="wire-admin", **CLIENT_OPTIONS) as client:
        yield client


def test_a_later_event_never_overtakes_a_slow_earlier_one_across_three_shards(
    sharded: Deployment,
    cluster_admin: MongoClient[Any],
    worker_processes: WorkerProcesses,
    fake_cluster: ClusterDeployment,
) -> None:
    """tests/wire/test_ordering.py's e1/e2 run (3 worker processes x 2 consumers, 100 executions) through
    the routers: every single-document write carried its shard key."""
    test_ordering.test_a_later_event_never_overtakes_a_slow_earlier_one(
        sharded, cluster_admin, worker_processes
    )
    assert non_targeted_writes(fake_cluster) == dict.fromkeys(NON_TARGETED, 0)
    shards = fake_cluster.cluster.metrics()["shardRequestsByShard"]
    assert len([shard for shard, n in shards.items() if n > 0]) == 3, (
        f"the executions live on every shard: {shards}"
    )


@pytest.mark.semantics("sem-order-per-sender", "sem-region-results", "sem-region-join")
def test_a_regions_last_event_reaches_its_parent_before_its_done_on_a_sharded_cluster(
    sharded: Deployment,
    cluster_admin: MongoClient[Any],
    worker_processes: WorkerProcesses,
    fake_cluster: ClusterDeployment,
) -> None:
    """The approval run of tests/wire/test_ordering.py through the routers: a root and its regions share
    a partition, so the join, the votes and the regions' `done` never leave one shard."""
    test_ordering.test_a_regions_last_event_reaches_its_parent_before_its_done(
        sharded, cluster_admin, worker_processes
    )
    assert non_targeted_writes(fake_cluster) == dict.fromkeys(NON_TARGETED, 0)


def test_partitions_moved_between_shards_mid_run_lose_and_double_nothing(
    fake_cluster: ClusterDeployment,
) -> None:
    """While 30 smoke runs (fork, three regions, timers, join) go through two workers, the partitions of the
    first two zones move to other shards (the workers' zone map goes stale): every run still passes the smoke
    check, and across the shards every execution is stored once, with nothing left in a mailbox, outbox,
    lease or dead letter."""
    partitioned(fake_cluster)
    namespace = f"{DB}.executions"
    app = App("smoke")
    chart_id = register_smoke(app, region_timer=0.3, final_timer=0.3)
    with worker_on(fake_cluster, app, concurrency=2) as (backend, _), worker_on(fake_cluster, app) as _:
        roots = [
            start_execution(backend.store, backend.transport, app, chart_id, execution_id=f"moved-{n:02d}")[
                0
            ].id
            for n in range(30)
        ]
        time.sleep(0.2)
        fake_cluster.cluster.move_range(namespace, 0, 85, "shard2")
        time.sleep(0.3)
        fake_cluster.cluster.move_range(namespace, 85, 170, "shard0")
        assert fake_cluster.cluster.shard_of(namespace, 0) == "shard2"
        assert fake_cluster.cluster.shard_of(namespace, 100) == "shard0"
        wait_until(lambda: all(finished(backend, root) for root in roots), 60.0, "every smoke run to finish")
        for root in roots:
            report = check(gather(backend.store, root, 60.0))
            assert report.passed, (root, report.failures)
    stored = [
        d
        for shard in ("shard0", "shard1", "shard2")
        for d in fake_cluster.cluster.documents(shard, namespace)
    ]
    audited = audit(stored)
    assert audited.failures == []
    assert audited.executions == 4 * len(roots), "each root and its three regions, once"


def finished(backend: Backend, execution_id: str) -> bool:
    exe = backend.store.load(execution_id)
    return exe is not None and exe.status is not ExecutionStatus.RUNNING
