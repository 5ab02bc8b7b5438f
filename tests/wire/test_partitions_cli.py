"""`harel partitions init | show` and `harel check` through the fake mongos (three shards), as a platform
team runs them: the CLI in its own process, over sockets."""

from __future__ import annotations

import json

import pytest
from pymongo import MongoClient

from tests.fake_mongod.deployment import ClusterDeployment
from tests.fake_mongod.fixtures import CLIENT_OPTIONS
from tests.wire.processes import run_harel

pytestmark = pytest.mark.wire

SHARD_KEY = {"p": 1, "_id": 1}


def findings(url: str) -> dict[str, dict[str, str]]:
    done = run_harel("check", url, "--json")
    return {f["check"]: f for f in json.loads(done.stdout)["findings"]}


def test_check_refuses_an_unpartitioned_cluster_by_name_and_passes_it_once_partitioned(
    fake_cluster: ClusterDeployment,
) -> None:
    url = fake_cluster.url
    with MongoClient(url, **CLIENT_OPTIONS) as client:
        client.harel.executions.insert_one({"_id": "stored-before", "chart": "order@1", "wake_at": None})
    before = run_harel("check", url)
    assert before.returncode == 1, before.stdout + before.stderr
    assert "sharding" in before.stdout and "ERROR" in before.stdout
    assert "P = 1, executions not sharded (all on one shard)" in before.stdout
    assert "harel partitions init" in before.stdout

    first = run_harel("partitions", "init", "--partitions", "64", "--url", url, "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    steps = {s["step"]: s for s in report["steps"]}
    assert report["sharded"] and report["changed"] and report["partitions"] == 64
    assert steps["backfill p"]["detail"] == "1 execution(s)"
    assert [(z["start"], z["stop"], z["shard"]) for z in report["zones"]] == [
        (0, 21, "shard0"),
        (21, 42, "shard1"),
        (42, 64, "shard2"),
    ]

    again = run_harel("partitions", "init", "--partitions", "64", "--url", url, "--json")
    assert again.returncode == 0, again.stderr
    assert not json.loads(again.stdout)["changed"], "a rerun changes nothing"
    assert {s["outcome"] for s in json.loads(again.stdout)["steps"]} == {"unchanged"}

    checked = findings(url)
    assert checked["sharding"]["status"] == "ok"
    assert checked["sharding"]["found"] == f"P = 64, executions sharded on {SHARD_KEY}"
    assert checked["shards"]["found"] == "3: shard0, shard1, shard2"
    assert checked["router clocks"]["status"] == "ok"
    with MongoClient(url, **CLIENT_OPTIONS) as client:
        stored = client.harel.executions.find_one({"_id": "stored-before"})
        assert stored is not None and 0 <= stored["p"] < 64
        assert client.config.collections.find_one({"_id": "harel.executions"})["key"] == SHARD_KEY
        tags = sorted((t["tag"], t["min"]["p"], t["max"]["p"]) for t in client.config.tags.find())
        assert tags == [("harel-shard0", 0, 21), ("harel-shard1", 21, 42), ("harel-shard2", 42, 64)]

    shown = run_harel("partitions", "show", "--url", url)
    assert shown.returncode == 0 and "P = 64" in shown.stdout and "harel-shard2" in shown.stdout

    changed = run_harel("partitions", "init", "--partitions", "128", "--url", url)
    assert changed.returncode != 0
    assert "partitioned with P = 64, not 128" in changed.stderr


def test_check_refuses_executions_sharded_on_another_key(fake_cluster: ClusterDeployment) -> None:
    with MongoClient(fake_cluster.url, **CLIENT_OPTIONS) as client:
        client.admin.command("shardCollection", "harel.executions", key={"_id": "hashed"})
    checked = findings(fake_cluster.url)
    assert checked["sharding"]["status"] == "warning", "hashed _id on 8.0: accepted, every claim broadcast"
    refused = run_harel("partitions", "init", "--url", fake_cluster.url)
    assert refused.returncode != 0
    assert "sharded on {'_id': 'hashed'}" in refused.stderr and "reshardCollection" in refused.stderr


def test_check_warns_of_routers_whose_clocks_disagree(fake_cluster: ClusterDeployment) -> None:
    fake_cluster.routers[1].set_clock_offset(30.0)
    checked = findings(fake_cluster.url)
    assert checked["router clocks"]["status"] == "warning"
    assert "s ahead of" in checked["router clocks"]["found"]
