"""The partitioning rules: on a sharded cluster, whether `executions` is split so that every hot command
reaches one shard (docs/sharding.md); on a replica set, P as recorded.

Pure, like `rules`: from the replies of three reads `checking` sends on every deployment (the partition map
in `harel_meta`, `executions`' entry in `config.collections`, `listShards`), a replica set answering the
last two with nothing or a refusal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harel.connection.deployment import Shape, Topology, failure_reason, succeeded
from harel.connection.report import Finding, ok, violation, warning
from harel.errors import PartitionsUnreadable, ShardingError
from harel.executions.indexes import SHARD_KEY
from harel.executions.partitions import parse_partitions

PARTITIONS_CHECK = "partitions"
CLOCKS_CHECK = "router clocks"
# `$$NOW` is the clock of the router that runs a command: a lease taken through one router and judged
# through another is off by their skew, and so is a timer. Leases last 30 s by default.
ROUTER_SKEW_BOUND = 1.0
SHARDS_CHECK = "shards"
WANTED_KEY = dict(SHARD_KEY)
HASHED_ID = {"_id": "hashed"}
# From 7.1 a findAndModify without the shard key is accepted on a sharded collection (run on every shard
# in turn, as a two-phase write); before, it is refused, and so would be every claim.
WRITES_WITHOUT_SHARD_KEY = (7, 1)
_INIT = (
    "run `harel partitions init --partitions 256` through mongos (docs/sharding.md), then restart the workers"
)


def first_batch(reply: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if reply is None or not succeeded(reply):
        return []
    return list((reply.get("cursor") or {}).get("firstBatch") or [])


def partitioning(
    shape: Shape,
    partitions: Mapping[str, Any] | None,
    shard_key: Mapping[str, Any] | None,
    shards: Mapping[str, Any] | None,
    version: tuple[int, int] | None,
    router_clocks: Mapping[str, float] | None = None,
) -> Sequence[Finding]:
    stored = first_batch(partitions)
    try:
        count = parse_partitions(stored[0] if stored else None).count
    except PartitionsUnreadable as error:
        return (violation(ShardingError, str(error), "a readable partition map", _INIT),)
    if shape.topology is not Topology.SHARDED:
        found = f"P = {count}" + (" (ready to shard)" if count > 1 else " (one replica set)")
        return (ok(PARTITIONS_CHECK, found, "any P on a replica set"),)
    entries = first_batch(shard_key)
    key = dict(entries[0].get("key") or {}) if entries else None
    clocks = () if router_clocks is None else (_clocks_finding(router_clocks),)
    return (_partition_finding(count, key, version), _shards_finding(shards), *clocks)


def _partition_finding(count: int, key: dict[str, Any] | None, version: tuple[int, int] | None) -> Finding:
    required = f"P > 1 and executions sharded on {WANTED_KEY}"
    if count > 1 and key == WANTED_KEY:
        return ok(ShardingError.check, f"P = {count}, executions sharded on {key}", required)
    if count > 1:
        found = f"P = {count}, executions " + (f"sharded on {key}" if key else "not sharded")
        return violation(ShardingError, found, required, _INIT)
    if key == HASHED_ID and version is not None and version >= WRITES_WITHOUT_SHARD_KEY:
        return warning(
            ShardingError.check,
            f"executions sharded on {key}, not partitioned (P = 1)",
            required,
            "accepted: every claim runs on every shard in turn (a two-phase write, MongoDB 7.1+); " + _INIT,
        )
    if key == HASHED_ID:
        return violation(
            ShardingError,
            f"executions sharded on {key} on MongoDB {'.'.join(map(str, version)) if version else 'unknown'}",
            required,
            "before MongoDB 7.1 a findAndModify without the shard key is refused, so every claim would be; "
            + _INIT,
        )
    found = "P = 1, executions " + (f"sharded on {key}" if key else "not sharded (all on one shard)")
    return violation(ShardingError, found, required, _INIT)


def _shards_finding(shards: Mapping[str, Any] | None) -> Finding:
    if shards is not None and succeeded(shards):
        names = sorted(str(s.get("_id")) for s in shards.get("shards") or ())
        return ok(SHARDS_CHECK, f"{len(names)}: {', '.join(names)}", "listed")
    because = failure_reason(shards) if shards is not None else "not asked"
    return warning(
        SHARDS_CHECK,
        f"unknown ({because})",
        "listed",
        "listing them takes the clusterMonitor role, which the app user needs for nothing else; an "
        "administrator can run: db.adminCommand({listShards: 1})",
    )


def _clocks_finding(offsets: Mapping[str, float]) -> Finding:
    required = f"routers' clocks within {ROUTER_SKEW_BOUND:g} s of each other"
    if len(offsets) < 2:
        return ok(CLOCKS_CHECK, f"{len(offsets)} router heard: nothing to compare", required)
    ahead = max(offsets, key=lambda host: offsets[host])
    behind = min(offsets, key=lambda host: offsets[host])
    skew = offsets[ahead] - offsets[behind]
    if skew <= ROUTER_SKEW_BOUND:
        return ok(CLOCKS_CHECK, f"{len(offsets)} routers within {skew:.3f} s", required)
    return warning(
        CLOCKS_CHECK,
        f"{ahead} is {skew:.1f} s ahead of {behind}",
        required,
        "synchronise the routers' clocks (NTP, chrony): each command's $$NOW is its router's clock, so a lease "
        "or a timer set through one router and judged through another is off by the skew",
    )
