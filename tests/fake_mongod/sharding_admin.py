"""The sharding administration commands a router answers on the `admin` database, with mongos's reply
shapes and, where known, its error codes: `listShards`, `enableSharding`, `shardCollection`,
`addShardToZone`, `removeShardFromZone`, `updateZoneKeyRange`, `balancerStatus`, `balancerStart`,
`balancerStop`, `moveRange`, `flushRouterConfig`. A zone named by no shard, and overlapping zone ranges, are
refused with BadValue (2): the fake's code, a real config server's may differ. Callers hold the cluster's
execution lock."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from bson import Int64

from harel_dev.errors import CommandError, not_modelled

from .chunks import COMPOUND_KEY, SHARD_KEYS, ShardedCollection, ZoneRange, same_key
from .cluster import FakeCluster

ADMIN_COMMANDS = frozenset(
    {
        "listShards",
        "enableSharding",
        "enablesharding",
        "shardCollection",
        "shardcollection",
        "addShardToZone",
        "removeShardFromZone",
        "updateZoneKeyRange",
        "balancerStatus",
        "balancerStart",
        "balancerStop",
        "moveRange",
        "flushRouterConfig",
    }
)
ALREADY_INITIALIZED = 23
INVALID_NAMESPACE = 73


def run_admin_command(cluster: FakeCluster, name: str, db: str, command: dict[str, Any]) -> dict[str, Any]:
    if db != "admin":
        raise CommandError(13, f"{name} may only be run against the admin database.")
    handlers: dict[str, Callable[[FakeCluster, dict[str, Any]], dict[str, Any]]] = {
        "listShards": _list_shards,
        "enableSharding": _enable_sharding,
        "enablesharding": _enable_sharding,
        "shardCollection": _shard_collection,
        "shardcollection": _shard_collection,
        "addShardToZone": _add_shard_to_zone,
        "removeShardFromZone": _remove_shard_from_zone,
        "updateZoneKeyRange": _update_zone_key_range,
        "balancerStatus": _balancer_status,
        "balancerStart": _balancer_start,
        "balancerStop": _balancer_stop,
        "moveRange": _move_range,
        "flushRouterConfig": lambda _cluster, _command: {"flushed": True, "ok": 1.0},
    }
    return handlers[name](cluster, command)


def _list_shards(cluster: FakeCluster, command: dict[str, Any]) -> dict[str, Any]:
    return {"shards": [cluster.shard_document(name) for name in cluster.shards], "ok": 1.0}


def _enable_sharding(cluster: FakeCluster, command: dict[str, Any]) -> dict[str, Any]:
    db = next(iter(command.values()))
    if not isinstance(db, str) or not db or "." in db:
        raise CommandError(INVALID_NAMESPACE, f"invalid db name specified: {db!r}")
    return {"ok": 1.0}


def _namespace(command: dict[str, Any]) -> str:
    namespace = next(iter(command.values()))
    if not isinstance(namespace, str) or "." not in namespace.strip("."):
        raise CommandError(INVALID_NAMESPACE, f"Invalid namespace specified '{namespace}'")
    return namespace


def _shard_collection(cluster: FakeCluster, command: dict[str, Any]) -> dict[str, Any]:
    namespace = _namespace(command)
    key = command.get("key")
    if not any(same_key(key, modelled) for modelled in SHARD_KEYS):
        raise not_modelled(
            f"the shard key {key!r}: the fake cluster shards on {{p: 1, _id: 1}} or {{_id: 'hashed'}} only"
        )
    if command.get("unique"):
        raise not_modelled("unique shard keys")
    existing = cluster.sharded(namespace)
    if existing is not None:
        if not same_key(existing.key, key):
            raise CommandError(
                ALREADY_INITIALIZED,
                f"sharding already enabled for collection {namespace} with key {existing.key}: already sharded",
            )
    else:
        assert isinstance(key, dict)
        cluster.shard_collection(namespace, key)
    return {"collectionsharded": namespace, "ok": 1.0}


def _shard_name(cluster: FakeCluster, command: dict[str, Any]) -> str:
    shard = next(iter(command.values()))
    if shard not in cluster.shards:
        raise CommandError(70, f"Shard {shard} not found")
    return str(shard)


def _zone_name(command: dict[str, Any]) -> str:
    zone = command.get("zone")
    if not isinstance(zone, str) or not zone:
        raise CommandError(2, "zone must be a non-empty string")
    return zone


def _add_shard_to_zone(cluster: FakeCluster, command: dict[str, Any]) -> dict[str, Any]:
    cluster.shard_zones[_shard_name(cluster, command)].add(_zone_name(command))
    cluster.balance()
    return {"ok": 1.0}


def _remove_shard_from_zone(cluster: FakeCluster, command: dict[str, Any]) -> dict[str, Any]:
    cluster.shard_zones[_shard_name(cluster, command)].discard(_zone_name(command))
    return {"ok": 1.0}


def _update_zone_key_range(cluster: FakeCluster, command: dict[str, Any]) -> dict[str, Any]:
    namespace = _namespace(command)
    shape = cluster.sharded(namespace) or ShardedCollection(namespace, COMPOUND_KEY, [])
    low, high = _bounds(shape, command)
    ranges = cluster.zone_ranges.setdefault(namespace, [])
    zone = command.get("zone")
    if zone is None:
        ranges[:] = [r for r in ranges if (r.low, r.high) != (low, high)]
        return {"ok": 1.0}
    zone = _zone_name(command)
    if not any(zone in zones for zones in cluster.shard_zones.values()):
        raise CommandError(2, f"zone {zone} does not exist: no shard is in it (addShardToZone first)")
    for other in ranges:
        if (other.low, other.high) != (low, high) and other.low < high and low < other.high:
            raise CommandError(2, f"zone range of {namespace} overlaps the range of zone {other.zone}")
    ranges[:] = [r for r in ranges if (r.low, r.high) != (low, high)] + [ZoneRange(low, high, zone)]
    cluster.balance()
    return {"ok": 1.0}


def _bounds(collection: ShardedCollection, command: dict[str, Any]) -> tuple[float, float]:
    try:
        low = collection.parse_bound(command.get("min"), "min")
        high = collection.parse_bound(command.get("max"), "max")
    except ValueError as exc:
        raise CommandError(2, str(exc)) from None
    if low >= high:
        raise CommandError(2, "min must be less than max")
    return low, high


def _balancer_status(cluster: FakeCluster, command: dict[str, Any]) -> dict[str, Any]:
    return {
        "mode": "full" if cluster.balancer_enabled else "off",
        "inBalancerRound": False,
        "numBalancerRounds": Int64(cluster.balancer_rounds),
        "ok": 1.0,
    }


def _balancer_start(cluster: FakeCluster, command: dict[str, Any]) -> dict[str, Any]:
    cluster.balancer_enabled = True
    cluster.balance()
    return {"ok": 1.0}


def _balancer_stop(cluster: FakeCluster, command: dict[str, Any]) -> dict[str, Any]:
    cluster.balancer_enabled = False
    return {"ok": 1.0}


def _move_range(cluster: FakeCluster, command: dict[str, Any]) -> dict[str, Any]:
    collection = cluster.require_sharded(_namespace(command))
    shard = command.get("toShard")
    if shard not in cluster.shards:
        raise CommandError(70, f"Shard {shard} not found")
    if "min" not in command:
        raise not_modelled("moveRange without min (give min, and max or not)")
    try:
        low = collection.parse_bound(command["min"], "min")
        high = (
            collection.parse_bound(command["max"], "max")
            if "max" in command
            else next((c.high for c in collection.chunks if c.holds(low)), math.inf)
        )
    except ValueError as exc:
        raise CommandError(2, str(exc)) from None
    cluster.move(collection, low, high, str(shard))
    return {"ok": 1.0}
