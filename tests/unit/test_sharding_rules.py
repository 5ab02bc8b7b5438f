"""The partitioning rules of `harel check` (`harel.connection.sharding`) on recorded replies: through mongos,
`executions` must be partitioned and sharded on {p: 1, _id: 1}; the routers' clocks are compared."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harel.connection import CheckReport, Status, client_settings, evaluate
from harel.connection.sharding import ROUTER_SKEW_BOUND
from harel.errors import ShardingError
from tests.unit.recorded_replies import deployment_replies, safe_client, scenario

MONGOS_URL = "mongodb://router1:27017,router2:27017/harel"
SET_URL = "mongodb://mongo1,mongo2,mongo3/harel?replicaSet=rs0"


def batch(*documents: dict[str, Any]) -> dict[str, Any]:
    return {"cursor": {"firstBatch": list(documents), "id": 0}, "ok": 1}


def partition_map(count: int) -> dict[str, Any]:
    return batch({"_id": "partitions", "count": count, "zones": []})


def sharded_on(key: dict[str, Any]) -> dict[str, Any]:
    return batch({"_id": "harel.executions", "key": key})


def report(name: str, url: str, **replies: Any) -> CheckReport:
    recorded = dataclasses.replace(deployment_replies(scenario(name)), **replies)
    return evaluate(recorded, client_settings(safe_client(url)))


def found(report: CheckReport, check: str) -> Any:
    (finding,) = [f for f in report.findings if f.check == check]
    return finding


def test_a_partitioned_cluster_passes_and_names_p_the_key_and_the_shards() -> None:
    checked = report("mongos", MONGOS_URL)
    assert checked.passed
    assert found(checked, "sharding").found == "P = 256, executions sharded on {'p': 1, '_id': 1}"
    assert found(checked, "shards").found == "2: shard0, shard1"


@pytest.mark.parametrize(
    ("partitions", "shard_key", "found_text"),
    [
        pytest.param(batch(), batch(), "P = 1, executions not sharded (all on one shard)", id="unsharded"),
        pytest.param(
            partition_map(256), batch(), "P = 256, executions not sharded", id="partitioned-unsharded"
        ),
        pytest.param(
            partition_map(256),
            sharded_on({"chart": 1}),
            "P = 256, executions sharded on {'chart': 1}",
            id="wrong-key",
        ),
        pytest.param(
            batch({"_id": "partitions", "count": "many"}),
            batch(),
            "count must be a whole number",
            id="unreadable",
        ),
    ],
)
def test_executions_not_partitioned_as_the_engine_needs_are_refused_by_name(
    partitions: dict[str, Any], shard_key: dict[str, Any], found_text: str
) -> None:
    checked = report("mongos", MONGOS_URL, partitions=partitions, shard_key=shard_key)
    finding = found(checked, "sharding")
    assert finding.status is Status.ERROR and isinstance(finding.error, ShardingError)
    assert found_text in finding.found
    assert "harel partitions init" in finding.fix
    assert not checked.passed


def test_hashed_id_is_a_warning_from_7_1_and_an_error_before() -> None:
    hashed = sharded_on({"_id": "hashed"})
    newer = report("mongos", MONGOS_URL, partitions=batch(), shard_key=hashed)
    assert found(newer, "sharding").status is Status.WARNING and newer.passed
    assert "two-phase" in found(newer, "sharding").fix
    older = report(
        "mongos",
        MONGOS_URL,
        partitions=batch(),
        shard_key=hashed,
        build_info={"version": "7.0.12", "versionArray": [7, 0, 12, 0], "ok": 1},
    )
    assert found(older, "sharding").status is Status.ERROR
    assert "before MongoDB 7.1" in found(older, "sharding").fix


def test_shards_that_cannot_be_listed_are_a_warning_naming_the_command() -> None:
    refused = {"ok": 0, "code": 13, "codeName": "Unauthorized", "errmsg": "not authorized on admin"}
    checked = report("mongos", MONGOS_URL, shards=refused)
    assert found(checked, "shards").status is Status.WARNING
    assert "db.adminCommand({listShards: 1})" in found(checked, "shards").fix
    assert checked.passed


def test_routers_clocks_further_apart_than_the_bound_are_a_warning_with_the_skew() -> None:
    close = report("mongos", MONGOS_URL, router_clocks={"router1:27017": 0.01, "router2:27017": -0.2})
    assert found(close, "router clocks").status is Status.OK
    apart = report(
        "mongos", MONGOS_URL, router_clocks={"router1:27017": 0.0, "router2:27017": ROUTER_SKEW_BOUND + 29.0}
    )
    clocks = found(apart, "router clocks")
    assert clocks.status is Status.WARNING
    assert clocks.found == f"router2:27017 is {ROUTER_SKEW_BOUND + 29.0:.1f} s ahead of router1:27017"
    assert "$$NOW" in clocks.fix
    assert "router clocks" not in {f.check for f in report("mongos", MONGOS_URL).findings}, (
        "not heard: not judged"
    )


def test_a_replica_set_reports_p_and_needs_no_sharding() -> None:
    prepared = report("rs3", SET_URL, partitions=partition_map(256))
    assert found(prepared, "partitions").found == "P = 256 (ready to shard)"
    assert prepared.passed
    assert "sharding" not in {f.check for f in prepared.findings}
