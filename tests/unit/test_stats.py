"""The deployment statistics a worker exports on /metrics: what each gauge counts, read at most once per TTL."""

from __future__ import annotations

import time

from harel.executions.partitions import Partitions, Zone
from harel.heartbeat import MongoHeartbeats
from harel.metrics import STATS_TTL_SECONDS, Metrics
from harel.model import Event, Execution, ExecutionStatus
from harel.servertime import ServerClock
from harel.stats import UNSERVED_AFTER_SECONDS, DeploymentStats
from harel.store.mongo import MongoStore
from harel.transport.base import Failure
from harel.transport.mongo import MongoTransport
from harel_dev.embedded import EmbeddedClient


class Clock:
    def __init__(self) -> None:
        self.now = round(time.time(), 3)

    def __call__(self) -> float:
        return self.now


def execution(execution_id: str, chart: str = "order", **fields: object) -> Execution:
    return Execution(id=execution_id, definition_id=chart, definition_version=1, **fields)


def test_each_gauge_counts_what_it_says() -> None:
    server = Clock()
    client = EmbeddedClient(server)
    clock = ServerClock(local=server, monotonic=server)
    store, transport = MongoStore(client), MongoTransport(client, clock=clock, watch=False)
    metrics = Metrics()
    monotonic = [0.0]
    stats = DeploymentStats(client, "harel", metrics, clock, 5.0, monotonic=lambda: monotonic[0])

    store.create(execution("waiting"), [Event(id="w1", name="go"), Event(id="w2", name="go")], now=server.now)
    store.create(execution("unserved", "billing"), [Event(id="u1", name="go")], now=server.now)
    store.create(execution("parked"), [Event(id="p1", name="boom")], now=server.now)
    server.now += 1
    claim = transport.claim(["order@1"], 30.0, server.now + 60)
    assert claim is not None and claim.execution_id == "waiting"
    transport.release(claim)
    poisoned = transport.claim(["order@1"], 30.0, server.now + 60)
    while poisoned is not None and poisoned.execution_id != "parked":
        transport.release(poisoned)
        poisoned = transport.claim(["order@1"], 30.0, server.now + 60)
    assert poisoned is not None
    transport.fail(poisoned, Failure(poisoned.pending[0], "RuntimeError: boom", 8, True, 0.0))
    done = execution("done", status=ExecutionStatus.COMPLETED)
    store.commit(done, emits=[("waiting", Event(id="out", name="go"))], spawns=[("done/x", "f.x", {})])
    client["harel"]["backups"].insert_one(
        {
            "_id": "compose/local",
            "last_attempt": {
                "run_id": "r2",
                "started_at": 5.0,
                "finished_at": 9.0,
                "outcome": "failed",
                "target": "dir:/b",
            },
            "last_success": {
                "run_id": "r1",
                "started_at": 1.0,
                "finished_at": 2.0,
                "outcome": "succeeded",
                "target": "dir:/b",
            },
        }
    )
    server.now += UNSERVED_AFTER_SECONDS + 1
    MongoHeartbeats(client).beat("w-1", {"charts": ["order@1"]}, {})  # a live worker serves order@1

    stats.refresh()
    sample = metrics.registry.get_sample_value
    assert sample("harel_mailbox_events") == 4, "two waiting, one unserved, one behind the dead letter"
    assert sample("harel_mailbox_oldest_due_age_seconds") == UNSERVED_AFTER_SECONDS + 2
    assert sample("harel_executions", {"status": "running"}) == 3
    assert sample("harel_executions", {"status": "completed"}) == 1
    assert sample("harel_parked_executions") == 1
    assert sample("harel_unserved_executions") == 1, "billing@1 has no live worker; order@1 has"
    assert sample("harel_pending_relays", {"kind": "outbox"}) == 1
    assert sample("harel_pending_relays", {"kind": "spawn"}) == 1
    assert sample("harel_last_backup_timestamp_seconds") == 2.0

    client["harel"]["executions"].delete_many({})
    monotonic[0] += STATS_TTL_SECONDS / 2
    stats.refresh()
    assert sample("harel_mailbox_events") == 4, "read at most once per TTL"
    monotonic[0] += STATS_TTL_SECONDS
    stats.refresh()
    assert sample("harel_mailbox_events") == 0


def test_a_partitioned_deployment_counts_its_backlog_per_zone_and_shard() -> None:
    partitions = Partitions(8, (Zone("harel-shard0", 0, 4, "shard0"), Zone("harel-shard1", 4, 8, "shard1")))
    server = Clock()
    client = EmbeddedClient(server)
    store = MongoStore(client, partitions=partitions)
    metrics = Metrics()
    stats = DeploymentStats(client, "harel", metrics, ServerClock(local=server, monotonic=server), 5.0)
    zone_metrics = Metrics()
    partitioned = DeploymentStats(
        client, "harel", zone_metrics, ServerClock(local=server, monotonic=server), 5.0, partitions=partitions
    )
    waiting: dict[str, int] = {"harel-shard0": 0, "harel-shard1": 0}
    for n in range(12):
        execution_id = f"order-{n}"
        events = [Event(id=f"{execution_id}-{k}", name="go") for k in range(n % 3 + 1)]
        store.create(execution(execution_id), events, now=server.now)
        zone = "harel-shard0" if partitions.of(execution_id) < 4 else "harel-shard1"
        waiting[zone] += len(events)
    assert waiting["harel-shard0"] > 0 and waiting["harel-shard1"] > 0, "both zones hold some"

    partitioned.refresh()
    stats.refresh()
    read = zone_metrics.registry.get_sample_value
    assert {
        zone: read("harel_zone_mailbox_events", {"zone": zone, "shard": zone.removeprefix("harel-")})
        for zone in waiting
    } == waiting
    assert read("harel_mailbox_events") == sum(waiting.values())
    assert (
        metrics.registry.get_sample_value("harel_zone_mailbox_events", {"zone": "all", "shard": ""}) is None
    ), "one partition: no zone gauge"
