"""The fake sharded cluster itself (tests/fake_mongod: cluster.py, router.py, writes.py, sharding_admin.py):
real PyMongo clients through its routers — placement by `p` and zones, targeting and its metrics, the
refusals of single-document writes without the shard key, merged reads, bulk write errors, chunk moves under
concurrent writes, `$$NOW` per router, change streams, retryable writes, and the process form.

Marked `fake_server`: these tests prove the test double, not harel.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from bson import Binary, Int64, MaxKey, MinKey
from pymongo import AsyncMongoClient, InsertOne, MongoClient, ReturnDocument, UpdateOne, monitoring
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

from harel.smoke import run_smoke
from tests.fake_mongod.deployment import ClusterDeployment
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, FakeProcess
from tests.fake_mongod.raw_client import RawConnection
from tests.wire.in_process import SMOKE_TIMEOUT, open_seam, running, smoke_app
from tests.wire.test_mongosh import mongosh

pytestmark = [pytest.mark.wire, pytest.mark.fake_server]

NS = "harel.executions"
KEY = {"p": 1, "_id": 1}
PARTITIONS = 12


def bound(p: Any) -> dict[str, Any]:
    return {"p": p, "_id": MinKey()}


@pytest.fixture
def client(fake_cluster: ClusterDeployment) -> Iterator[MongoClient[dict[str, Any]]]:
    with MongoClient(fake_cluster.url, **CLIENT_OPTIONS) as opened:
        yield opened


def shard_executions(client: MongoClient[dict[str, Any]]) -> None:
    """Shard harel.executions on {p, _id}: p 4..8 in zone z1 (shard1), p 8.. in zone z2 (shard2)."""
    client.harel.executions.create_index([("p", 1), ("_id", 1)])
    client.admin.command("enableSharding", "harel")
    client.admin.command("shardCollection", NS, key=KEY)
    client.admin.command("addShardToZone", "shard1", zone="z1")
    client.admin.command("addShardToZone", "shard2", zone="z2")
    client.admin.command("updateZoneKeyRange", NS, min=bound(4), max=bound(8), zone="z1")
    client.admin.command("updateZoneKeyRange", NS, min=bound(8), max=bound(MaxKey()), zone="z2")


def insert_executions(client: MongoClient[dict[str, Any]], count: int = 24) -> None:
    client.harel.executions.insert_many(
        [{"_id": f"e{i:02d}", "p": i % PARTITIONS, "n": i} for i in range(count)]
    )


def expected_shard(p: int) -> str:
    return "shard0" if p < 4 else "shard1" if p < 8 else "shard2"


def router_counter(fake_cluster: ClusterDeployment, name: str) -> int:
    """A counter of serverStatus().metrics.query, summed over the routers (each reports its own)."""
    total = 0
    for router in fake_cluster.routers:
        with MongoClient(router.url, **CLIENT_OPTIONS) as direct:
            total += int(direct.admin.command("serverStatus")["metrics"]["query"][name])
    return total


# --- what it says it is ------------------------------------------------------------------------------


def test_routers_answer_as_mongos_with_shards_and_metrics(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    hello = client.admin.command("hello")
    shards = client.admin.command("listShards")["shards"]
    build = client.admin.command("buildInfo")
    status = client.admin.command("serverStatus")

    assert client.topology_description.topology_type_name == "Sharded"
    assert hello["msg"] == "isdbgrid" and "setName" not in hello
    assert [(s["_id"], s["state"]) for s in shards] == [("shard0", 1), ("shard1", 1), ("shard2", 1)]
    assert build["version"].startswith("8.0.")
    assert status["process"] == "mongos"
    assert status["metrics"]["query"]["updateOneNonTargetedShardedCount"] == 0
    assert fake_cluster.url.count("127.0.0.1:") == 2


def test_seven_zero_mode_says_seven_zero(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    fake_cluster.cluster.set_mode("7.0")

    assert client.admin.command("buildInfo")["version"].startswith("7.0.")


def test_unsharded_collections_live_on_the_primary_shard(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    client.harel.mailboxes.insert_many([{"_id": i, "p": i} for i in range(6)])

    assert len(fake_cluster.cluster.documents("shard0", "harel.mailboxes")) == 6
    assert fake_cluster.cluster.documents("shard1", "harel.mailboxes") == []
    assert client.harel.mailboxes.count_documents({}) == 6


# --- sharding administration and placement -------------------------------------------------------------


def test_shard_collection_and_zones_place_documents_per_p(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)
    insert_executions(client)
    cluster = fake_cluster.cluster

    for shard in ("shard0", "shard1", "shard2"):
        placed = {d["p"] for d in cluster.documents(shard, NS)}
        assert placed == {p for p in range(PARTITIONS) if expected_shard(p) == shard}
    assert [cluster.shard_of(NS, p) for p in (0, 3, 4, 7, 8, 11)] == ["shard0"] * 2 + ["shard1"] * 2 + [
        "shard2"
    ] * 2
    chunks = list(client.config.chunks.find({"ns": NS}, {"_id": 0, "min": 1, "max": 1, "shard": 1}))
    assert chunks == [
        {"min": bound(MinKey()), "max": bound(4), "shard": "shard0"},
        {"min": bound(4), "max": bound(8), "shard": "shard1"},
        {"min": bound(8), "max": bound(MaxKey()), "shard": "shard2"},
    ]
    collection = client.config.collections.find_one({"_id": NS})
    assert collection is not None and collection["key"] == KEY and collection["unique"] is False
    assert {d["tag"] for d in client.config.tags.find({"ns": NS})} == {"z1", "z2"}
    assert client.config.chunks.count_documents({"uuid": collection["uuid"]}) == 3


def test_shard_collection_rules(client: MongoClient[dict[str, Any]]) -> None:
    client.harel.full.insert_one({"_id": 1, "p": 1})
    with pytest.raises(OperationFailure) as no_index:
        client.admin.command("shardCollection", "harel.full", key=KEY)
    with pytest.raises(OperationFailure) as other_key:
        client.admin.command("shardCollection", "harel.empty", key={"tenant": 1})
    client.admin.command("shardCollection", "harel.empty", key=KEY)
    again = client.admin.command("shardCollection", "harel.empty", key=KEY)
    with pytest.raises(OperationFailure) as different:
        client.admin.command("shardCollection", "harel.empty", key={"_id": "hashed"})
    with pytest.raises(OperationFailure) as not_admin:
        client.harel.command("shardCollection", "harel.empty", key=KEY)

    assert no_index.value.code == 72 and "create an index" in str(no_index.value)
    assert other_key.value.code == 238
    assert again["ok"] == 1.0 and again["collectionsharded"] == "harel.empty"
    assert different.value.code == 23 and "already sharded" in str(different.value)
    assert not_admin.value.code == 13
    assert {"p_1__id_1", "_id_"} <= set(client.harel.empty.index_information())


def test_shard_collection_gives_every_shard_the_indexes_with_their_options(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    executions = client.harel.executions
    executions.create_index(
        [("p", 1), ("due", 1)], name="p_due", partialFilterExpression={"due": {"$gte": 0}}
    )
    executions.create_index("token", unique=True, sparse=True)
    client.admin.command("shardCollection", NS, key=KEY)
    executions.create_index(
        [("p", 1), ("due", 1)], name="p_due", partialFilterExpression={"due": {"$gte": 0}}
    )

    for engine in fake_cluster.cluster.shards.values():
        information = engine.collection("harel", "executions").index_information()
        assert information["p_due"]["partialFilterExpression"] == {"due": {"$gte": 0}}
        assert information["token_1"]["unique"] and information["token_1"]["sparse"]
        assert information["p_1__id_1"]["key"] == [("p", 1), ("_id", 1)]


def test_balancer_stopped_defers_zone_moves_until_started(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    client.admin.command("shardCollection", NS, key=KEY)
    insert_executions(client)
    client.admin.command("balancerStop")
    client.admin.command("addShardToZone", "shard2", zone="z2")
    client.admin.command("updateZoneKeyRange", NS, min=bound(8), max=bound(MaxKey()), zone="z2")
    stopped = client.admin.command("balancerStatus")
    before = len(fake_cluster.cluster.documents("shard2", NS))
    client.admin.command("balancerStart")

    assert stopped["mode"] == "off"
    assert before == 0
    assert {d["p"] for d in fake_cluster.cluster.documents("shard2", NS)} == {8, 9, 10, 11}
    assert client.admin.command("balancerStatus")["mode"] == "full"


def test_move_range_moves_documents_and_chunks(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    client.admin.command("shardCollection", NS, key=KEY)
    insert_executions(client)
    client.harel.executions.create_index("n")
    client.admin.command("moveRange", NS, min=bound(2), max=bound(5), toShard="shard1")
    with pytest.raises(OperationFailure) as unknown:
        client.admin.command("moveRange", NS, min=bound(2), max=bound(5), toShard="shard9")

    assert {d["p"] for d in fake_cluster.cluster.documents("shard1", NS)} == {2, 3, 4}
    assert client.harel.executions.count_documents({}) == 24
    assert fake_cluster.cluster.shard_of(NS, 4) == "shard1"
    assert fake_cluster.cluster.shard_of(NS, 5) == "shard0"
    assert unknown.value.code == 70
    # createIndexes through the router reached every shard of the sharded collection.
    shard1 = fake_cluster.cluster.shards["shard1"].collection("harel", "executions")
    assert "n_1" in shard1.index_information()


# --- targeting and its metrics -------------------------------------------------------------------------


def test_update_by_the_full_shard_key_is_targeted(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)
    insert_executions(client)
    fake_cluster.cluster.reset_metrics()

    result = client.harel.executions.update_one({"_id": "e05", "p": 5}, {"$inc": {"n": 100}})

    metrics = fake_cluster.cluster.metrics()
    assert result.modified_count == 1
    assert metrics["updateOneTargetedShardedCount"] == 1
    assert metrics["updateOneNonTargetedShardedCount"] == 0
    assert metrics["shardRequestsByShard"] == {"shard1": 1}
    assert router_counter(fake_cluster, "updateOneTargetedShardedCount") == 1


def test_update_one_by_id_alone_is_non_targeted_with_id(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)
    insert_executions(client)
    fake_cluster.cluster.reset_metrics()

    result = client.harel.executions.update_one({"_id": "e09"}, {"$set": {"seen": True}})

    metrics = fake_cluster.cluster.metrics()
    assert result.modified_count == 1
    assert metrics["updateOneNonTargetedShardedCount"] == 1
    assert metrics["updateOneWithoutShardKeyWithIdCount"] == 1
    assert metrics["updateOneTargetedShardedCount"] == 0
    assert metrics["shardRequests"] == 3  # broadcast to every shard
    assert fake_cluster.cluster.documents("shard2", NS)[1]["seen"] is True


def test_single_document_writes_without_the_shard_key_run_two_phase_in_eight_zero(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)
    insert_executions(client)
    fake_cluster.cluster.reset_metrics()
    executions = client.harel.executions

    highest = executions.find_one_and_update(
        {"n": {"$gte": 0}},
        {"$set": {"claimed": True}},
        sort=[("n", -1)],
        return_document=ReturnDocument.AFTER,
    )
    updated = executions.update_one({"n": 3}, {"$set": {"touched": True}})
    deleted = executions.delete_one({"n": 20})

    metrics = fake_cluster.cluster.metrics()
    assert highest is not None and highest["_id"] == "e23" and highest["claimed"] is True
    assert updated.modified_count == 1 and executions.find_one({"n": 3}, {"_id": 0, "touched": 1}) == {
        "touched": True
    }
    assert deleted.deleted_count == 1 and executions.count_documents({}) == 23
    assert metrics["findAndModifyNonTargetedShardedCount"] == 1
    assert metrics["updateOneNonTargetedShardedCount"] == 1
    assert metrics["updateOneWithoutShardKeyWithIdCount"] == 0
    assert metrics["deleteOneNonTargetedShardedCount"] == 1


def test_single_document_writes_without_the_shard_key_are_refused_in_seven_zero(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)
    insert_executions(client)
    fake_cluster.cluster.set_mode("7.0")
    executions = client.harel.executions

    with pytest.raises(OperationFailure) as find_and_modify:
        executions.find_one_and_update({"n": 3}, {"$set": {"claimed": True}})
    with pytest.raises(WriteError) as update:
        executions.update_one({"n": 3}, {"$set": {"claimed": True}})
    with pytest.raises(WriteError) as delete:
        executions.delete_one({"n": 3})
    by_id = executions.update_one({"_id": "e03"}, {"$set": {"claimed": True}})
    targeted = executions.find_one_and_update({"_id": "e03", "p": 3}, {"$set": {"again": True}})

    assert find_and_modify.value.code == 61
    assert "Query for sharded findAndModify must contain the shard key" in str(find_and_modify.value)
    assert update.value.code == 72 and "A {multi:false} update on a sharded collection" in str(update.value)
    assert delete.value.code == 72
    assert by_id.modified_count == 1  # 7.0 broadcasts an _id equality
    assert targeted is not None and targeted["claimed"] is True


def test_upsert_without_the_full_shard_key_is_refused(client: MongoClient[dict[str, Any]]) -> None:
    shard_executions(client)
    executions = client.harel.executions

    with pytest.raises(WriteError) as update:
        executions.update_one({"_id": "new"}, {"$set": {"n": 1}}, upsert=True)
    with pytest.raises(OperationFailure) as find_and_modify:
        executions.find_one_and_update({"p": 3}, {"$set": {"n": 1}}, upsert=True)
    upserted = executions.update_one({"_id": "new", "p": 3}, {"$set": {"n": 1}}, upsert=True)

    for error in (update.value, find_and_modify.value):
        assert error.code == 61
        assert "Failed to target upsert by query :: could not extract exact shard key" in str(error)
    assert upserted.upserted_id == "new"
    assert executions.find_one({"_id": "new"}) == {"_id": "new", "p": 3, "n": 1}


def test_an_update_that_would_change_p_is_refused(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)
    insert_executions(client)
    executions = client.harel.executions

    refusals = []
    for attempt in (
        lambda: executions.update_one({"_id": "e01", "p": 1}, {"$set": {"p": 9}}),
        lambda: executions.update_one({"_id": "e01", "p": 1}, [{"$set": {"p": {"$add": ["$p", 1]}}}]),
        lambda: executions.replace_one({"_id": "e01", "p": 1}, {"p": 2, "n": 0}),
        lambda: executions.update_many({"p": {"$in": [1, 2]}}, {"$inc": {"p": 1}}),
        lambda: executions.find_one_and_update({"_id": "e01", "p": 1}, {"$set": {"p": 5}}),
    ):
        with pytest.raises(OperationFailure) as refused:
            attempt()
        refusals.append(refused.value.code)
    unchanged = executions.update_one({"_id": "e01", "p": 1}, [{"$set": {"p": "$p", "n": 7}}])

    assert refusals == [66] * 5
    assert unchanged.modified_count == 1
    assert executions.find_one({"_id": "e01"}) == {"_id": "e01", "p": 1, "n": 7}


def test_an_insert_without_p_is_refused(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)

    with pytest.raises(WriteError) as refused:
        client.harel.executions.insert_one({"_id": "orphan"})

    assert refused.value.code == 61
    assert "does not contain shard key" in str(refused.value)
    assert client.harel.executions.count_documents({}) == 0


def test_in_on_one_zone_reaches_one_shard_and_a_find_without_p_scatters(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)
    insert_executions(client)
    fake_cluster.cluster.reset_metrics()

    in_zone = list(client.harel.executions.find({"p": {"$in": [4, 5, 7]}}))
    after_in = fake_cluster.cluster.metrics()
    everything = list(client.harel.executions.find({"n": {"$lt": 100}}))
    after_all = fake_cluster.cluster.metrics()

    assert sorted(d["p"] for d in in_zone) == [4, 4, 5, 5, 7, 7]
    assert after_in["scatterGatherReads"] == 0 and after_in["shardRequestsByShard"] == {"shard1": 1}
    assert len(everything) == 24
    assert after_all["scatterGatherReads"] == 1
    assert after_all["shardRequestsByCommand"]["find"] == 4


def test_sorted_merge_across_shards_with_skip_limit_projection_and_batches(
    client: MongoClient[dict[str, Any]],
) -> None:
    shard_executions(client)
    insert_executions(client, count=60)
    executions = client.harel.executions

    page = list(executions.find({}, {"_id": 0, "n": 1}, sort=[("n", -1)], skip=5, limit=7))
    batched = [d["n"] for d in executions.find({"n": {"$gte": 0}}, sort=[("p", 1), ("n", 1)], batch_size=4)]

    assert page == [{"n": n} for n in range(54, 47, -1)]
    assert batched == sorted(range(60), key=lambda n: (n % PARTITIONS, n))


def test_aggregate_count_and_distinct_merge_across_shards(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)
    insert_executions(client)
    executions = client.harel.executions
    fake_cluster.cluster.reset_metrics()

    grouped = list(
        executions.aggregate(
            [
                {"$match": {"n": {"$gte": 2}}},
                {"$group": {"_id": None, "total": {"$sum": "$n"}}},
                {"$limit": 1},
            ]
        )
    )
    targeted = list(executions.aggregate([{"$match": {"p": 9}}, {"$sort": {"n": 1}}]))
    counted = executions.count_documents({"n": {"$lt": 10}}, skip=2)
    distinct = executions.distinct("p", {"n": {"$gte": 12}})

    assert grouped == [{"_id": None, "total": sum(range(2, 24))}]
    assert [d["n"] for d in targeted] == [9, 21]
    assert counted == 8
    assert sorted(distinct) == list(range(PARTITIONS))
    assert fake_cluster.cluster.metrics()["scatterGatherReads"] == 3


def test_lookup_from_a_shard_reads_the_unsharded_collection_on_the_primary(
    client: MongoClient[dict[str, Any]],
) -> None:
    shard_executions(client)
    insert_executions(client)
    client.harel.names.insert_many([{"_id": "e09", "name": "nine"}, {"_id": "e05", "name": "five"}])

    joined = list(
        client.harel.executions.aggregate(
            [
                {"$match": {"p": 9}},
                {"$lookup": {"from": "names", "localField": "_id", "foreignField": "_id", "as": "names"}},
                {"$project": {"names.name": 1}},
            ]
        )
    )

    assert joined == [{"_id": "e09", "names": [{"name": "nine"}]}, {"_id": "e21", "names": []}]


def test_hashed_id_key_targets_one_shard_by_id(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    client.admin.command("shardCollection", "harel.hashed", key={"_id": "hashed"})
    client.harel.hashed.insert_many([{"_id": i} for i in range(30)])
    fake_cluster.cluster.reset_metrics()

    found = client.harel.hashed.find_one({"_id": 17})
    updated = client.harel.hashed.update_one({"_id": 18}, {"$set": {"x": 1}})

    holders = [s for s in fake_cluster.cluster.shards if fake_cluster.cluster.documents(s, "harel.hashed")]
    metrics = fake_cluster.cluster.metrics()
    assert found == {"_id": 17} and updated.modified_count == 1
    assert len(holders) == 3
    assert metrics["shardRequests"] == 2 and metrics["updateOneTargetedShardedCount"] == 1


def test_same_id_may_exist_on_two_shards(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)

    client.harel.executions.insert_many([{"_id": "twice", "p": 1}, {"_id": "twice", "p": 9}])

    assert [d["_id"] for d in fake_cluster.cluster.documents("shard0", NS)] == ["twice"]
    assert [d["_id"] for d in fake_cluster.cluster.documents("shard2", NS)] == ["twice"]
    assert client.harel.executions.count_documents({"_id": "twice"}) == 2


# --- bulk writes -----------------------------------------------------------------------------------------


def test_bulk_write_errors_are_mapped_back_to_the_client_statement_indexes(
    client: MongoClient[dict[str, Any]],
) -> None:
    shard_executions(client)
    executions = client.harel.executions
    executions.insert_one({"_id": "taken", "p": 9})

    with pytest.raises(BulkWriteError) as unordered:
        executions.bulk_write(
            [
                InsertOne({"_id": "a", "p": 1}),
                InsertOne({"_id": "b", "p": 5}),
                InsertOne({"_id": "taken", "p": 9}),
                InsertOne({"_id": "c", "p": 2}),
                UpdateOne({"_id": "a", "p": 1}, {"$set": {"x": 1}}),
            ],
            ordered=False,
        )
    with pytest.raises(BulkWriteError) as ordered:
        executions.insert_many(
            [{"_id": "d", "p": 0}, {"_id": "e", "p": 6}, {"_id": "taken", "p": 10}, {"_id": "f", "p": 1}],
            ordered=True,
        )

    unordered_errors = unordered.value.details["writeErrors"]
    assert [(e["index"], e["code"]) for e in unordered_errors] == [(2, 11000)]
    assert unordered.value.details["nInserted"] == 3 and unordered.value.details["nModified"] == 1
    assert [(e["index"], e["code"]) for e in ordered.value.details["writeErrors"]] == [(2, 11000)]
    assert ordered.value.details["nInserted"] == 2
    assert executions.find_one({"_id": "f"}) is None


def test_pipeline_updates_for_one_shard_go_in_one_request_and_a_p_change_fails_at_its_index(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)
    insert_executions(client)
    fake_cluster.cluster.reset_metrics()
    stamp = [{"$set": {"t": "$$NOW"}}]

    with pytest.raises(BulkWriteError) as refused:
        client.harel.executions.bulk_write(
            [
                UpdateOne({"_id": "e04", "p": 4}, stamp),
                UpdateOne({"_id": "e05", "p": 5}, stamp),
                UpdateOne({"_id": "e06", "p": 6}, [{"$set": {"p": 1}}]),
                UpdateOne({"_id": "e07", "p": 7}, stamp),
            ]
        )

    assert [(e["index"], e["code"]) for e in refused.value.details["writeErrors"]] == [(2, 66)]
    assert refused.value.details["nModified"] == 2
    metrics = fake_cluster.cluster.metrics()
    assert metrics["shardRequestsByShard"] == {"shard1": 1}
    assert metrics["updateOneTargetedShardedCount"] == 2  # counted when sent: not the refused, not the last
    stamped = {d["_id"] for d in client.harel.executions.find({"t": {"$exists": True}})}
    assert stamped == {"e04", "e05"}


# --- chunk moves while writes run ------------------------------------------------------------------------


def test_move_range_during_concurrent_updates_loses_and_doubles_nothing(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    client.admin.command("shardCollection", NS, key=KEY)
    insert_executions(client)
    stop = threading.Event()
    applied: Counter[str] = Counter()
    failures: list[BaseException] = []

    def update_loop(worker: int) -> None:
        with MongoClient(fake_cluster.url, **CLIENT_OPTIONS) as own:
            i = 0
            while not stop.is_set():
                number = (worker * 7 + i) % 24
                try:
                    result = own.harel.executions.update_one(
                        {"_id": f"e{number:02d}", "p": number % PARTITIONS}, {"$inc": {"hits": 1}}
                    )
                except BaseException as exc:
                    failures.append(exc)
                    return
                applied[f"e{number:02d}"] += result.modified_count
                i += 1

    def after_more_updates() -> None:
        seen = sum(applied.values())
        deadline = time.monotonic() + 10
        while sum(applied.values()) < seen + 20 and time.monotonic() < deadline and not failures:
            time.sleep(0.005)

    workers = [threading.Thread(target=update_loop, args=(w,)) for w in range(3)]
    for worker in workers:
        worker.start()
    moves = [(0, 6, "shard1"), (6, math.inf, "shard2"), (3, 9, "shard0"), (-math.inf, 3, "shard2")]
    for low, high, shard in moves:
        after_more_updates()
        fake_cluster.cluster.move_range(NS, low, high, shard)
    after_more_updates()
    client.admin.command("moveRange", NS, min=bound(9), max=bound(MaxKey()), toShard="shard1")
    after_more_updates()
    stop.set()
    for worker in workers:
        worker.join(timeout=30)

    stored = [d for shard in fake_cluster.cluster.shards for d in fake_cluster.cluster.documents(shard, NS)]
    assert failures == []
    assert Counter(d["_id"] for d in stored) == Counter(f"e{i:02d}" for i in range(24))
    assert {d["_id"]: d.get("hits", 0) for d in stored} == {
        f"e{i:02d}": applied[f"e{i:02d}"] for i in range(24)
    }
    assert sum(applied.values()) >= 100  # the moves ran while updates did


# --- $$NOW per router, change streams, retryable writes --------------------------------------------------


def test_two_routers_bind_now_from_their_own_clocks(fake_cluster: ClusterDeployment) -> None:
    first, second = fake_cluster.routers
    second.set_clock_offset(30)
    times = []
    for router in (first, second):
        with MongoClient(router.url, **CLIENT_OPTIONS) as direct:
            direct.harel.clock.update_one({"_id": router.port}, [{"$set": {"t": "$$NOW"}}], upsert=True)
            times.append(direct.harel.clock.find_one({"_id": router.port})["t"])
            times.append(direct.admin.command("hello")["localTime"])

    assert timedelta(seconds=29) < times[2] - times[0] < timedelta(seconds=31)
    assert timedelta(seconds=29) < times[3] - times[1] < timedelta(seconds=31)


def test_change_stream_through_the_router_sees_every_shard_with_the_shard_key(
    client: MongoClient[dict[str, Any]],
) -> None:
    shard_executions(client)
    executions = client.harel.executions
    with executions.watch([{"$match": {"documentKey.p": {"$in": [1, 9]}}}], max_await_time_ms=200) as stream:
        executions.insert_many([{"_id": "x1", "p": 1}, {"_id": "x5", "p": 5}, {"_id": "x9", "p": 9}])
        executions.update_one({"_id": "x9", "p": 9}, {"$set": {"n": 1}})
        executions.delete_one({"_id": "x1", "p": 1})
        events = [stream.next() for _ in range(4)]

    assert [(e["operationType"], e["documentKey"]) for e in events] == [
        ("insert", {"p": 1, "_id": "x1"}),
        ("insert", {"p": 9, "_id": "x9"}),
        ("update", {"p": 9, "_id": "x9"}),
        ("delete", {"p": 1, "_id": "x1"}),
    ]
    assert list(events[0]["documentKey"]) == ["p", "_id"]


def test_a_retried_write_through_the_router_is_applied_once(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)
    insert_executions(client)
    session = {"id": Binary(b"\x01" * 16, 4)}
    update = {
        "update": "executions",
        "updates": [{"q": {"_id": "e05", "p": 5}, "u": {"$inc": {"n": 100}}}],
        "lsid": session,
        "txnNumber": Int64(1),
    }
    replies = []
    for router in fake_cluster.routers:  # the retry reaches the other router, as a driver's may
        with RawConnection(router.host_port) as connection:
            replies.append(connection.command("harel", update))

    assert replies[0] == replies[1]
    assert replies[0]["n"] == 1
    assert client.harel.executions.find_one({"_id": "e05"}, {"_id": 0, "n": 1}) == {"n": 105}


class UpdatesSent(monitoring.CommandListener):
    def __init__(self) -> None:
        self.count = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.count += event.command_name == "update"

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        """Counted at start."""

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        """Counted at start."""


def test_a_driver_retry_after_a_lost_reply_is_answered_once(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    shard_executions(client)
    insert_executions(client)
    first = fake_cluster.routers[0]
    first.fail_after_apply("update")
    sent = UpdatesSent()
    with MongoClient(first.url, event_listeners=[sent], **CLIENT_OPTIONS) as through_first:
        result = through_first.harel.executions.update_one({"_id": "e10", "p": 10}, {"$inc": {"n": 100}})

    assert sent.count == 2  # the attempt whose reply was lost, and the retry
    assert result.modified_count == 1
    assert client.harel.executions.find_one({"_id": "e10"}, {"_id": 0, "n": 1}) == {"n": 110}


def test_async_client_through_the_router(fake_cluster: ClusterDeployment) -> None:
    async def scenario() -> tuple[list[int], int, dict[str, Any] | None]:
        async with AsyncMongoClient(fake_cluster.url, **CLIENT_OPTIONS) as aclient:
            await aclient.admin.command("shardCollection", NS, key=KEY)
            await aclient.admin.command("moveRange", NS, min=bound(6), max=bound(MaxKey()), toShard="shard2")
            await aclient.harel.executions.insert_many([{"_id": i, "p": i} for i in range(10)])
            found = [d["_id"] async for d in aclient.harel.executions.find({}, sort=[("_id", -1)], limit=3)]
            result = await aclient.harel.executions.update_one({"_id": 8, "p": 8}, {"$set": {"seen": 1}})
            claimed = await aclient.harel.executions.find_one_and_update({"p": 7}, {"$set": {"claimed": 1}})
            return found, result.modified_count, claimed

    found, modified, claimed = asyncio.run(scenario())

    assert found == [9, 8, 7] and modified == 1
    assert claimed == {"_id": 7, "p": 7}
    assert [d["_id"] for d in fake_cluster.cluster.documents("shard2", NS)] == [6, 7, 8, 9]
    assert fake_cluster.cluster.metrics()["findAndModifyTargetedShardedCount"] == 1


def test_mongosh_shard_helpers_and_status_on_the_cluster(
    fake_cluster: ClusterDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    client.admin.command("shardCollection", NS, key=KEY)
    insert_executions(client)
    script = (
        "sh.addShardToZone('shard2', 'z2');"
        "sh.updateZoneKeyRange('harel.executions', {p: 8, _id: MinKey}, {p: MaxKey, _id: MinKey}, 'z2');"
        "const status = sh.status();"
        "const chunks = db.getSiblingDB('config').chunks.find({shard: 'shard2'}).toArray();"
        "print(JSON.stringify({chunks: chunks.length, text: JSON.stringify(status)}));"
    )

    result = mongosh(fake_cluster.url, script)

    assert result.returncode == 0, result.stdout + result.stderr
    printed = json.loads(result.stdout.strip().splitlines()[-1])
    assert printed["chunks"] == 1
    assert "harel.executions" in printed["text"] and "shard2" in printed["text"]
    assert {d["p"] for d in fake_cluster.cluster.documents("shard2", NS)} == {8, 9, 10, 11}


def test_the_smoke_workflow_runs_through_the_routers_on_hashed_executions(
    fake_cluster: ClusterDeployment,
) -> None:
    """Today's engine, unchanged, through both routers: every command it sends is served, with the
    executions spread over the shards by the hashed `_id` and claims run as two-phase findAndModify."""
    with MongoClient(fake_cluster.url, **CLIENT_OPTIONS) as admin:
        admin.admin.command("shardCollection", "harel_smoke.executions", key={"_id": "hashed"})
    app, chart_id = smoke_app()
    seams = [open_seam(fake_cluster.url, "harel_smoke", f"cluster-{n}") for n in range(2)]
    try:
        with running([seam.worker(app) for seam in seams]):
            report = run_smoke(
                seams[0].store, seams[0].transport, app, chart_id=chart_id, timeout=SMOKE_TIMEOUT
            )
    finally:
        for seam in seams:
            seam.close()

    metrics = fake_cluster.cluster.metrics()
    holders = [
        s for s in fake_cluster.cluster.shards if fake_cluster.cluster.documents(s, "harel_smoke.executions")
    ]
    assert report.passed, report.failures
    assert len(holders) > 1
    assert metrics["findAndModifyNonTargetedShardedCount"] > 0
    assert metrics["updateOneTargetedShardedCount"] > 0


# --- the process -----------------------------------------------------------------------------------------


def test_cluster_process_starts_and_serves(fake_cluster_process: Callable[..., FakeProcess]) -> None:
    fake = fake_cluster_process("--shards", "3", "--routers", "2", "--clock-offsets", "0,30")

    with MongoClient(fake.url, **CLIENT_OPTIONS) as process_client:
        shards = process_client.admin.command("listShards")["shards"]
        process_client.admin.command("shardCollection", NS, key=KEY)
        process_client.harel.executions.insert_one({"_id": 1, "p": 1})
        found = process_client.harel.executions.find_one({"p": 1})
    fake.stop()

    assert fake.url.count("127.0.0.1:") == 2
    assert len(shards) == 3
    assert found == {"_id": 1, "p": 1}
    assert fake.process.returncode == 0
