"""Partitioning a deployment (`harel partitions init`): give every execution its `p`, and on a sharded cluster
shard `executions` on `{p: 1, _id: 1}` with one zone per shard, then record P and the zones in `harel_meta`.

Each step looks before it acts, so a rerun with the same P changes nothing and says so; a rerun after a
shard was added spreads the zones over the shards again (the cluster's balancer then moves the partitions
whose zone moved). P itself never changes (PartitionCountChanged): every stored `p` would. The order is the
one a move from one replica set needs: `p` is backfilled while the collection is still unsharded, the
indexes exist before `shardCollection` needs the shard key's, and the map is written last, so workers that
read it find the collection as it says.

The workers read the map when they start: restart them after a first init (until then they send commands
without `p`, which a router refuses for upserts).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bson import MinKey
from pymongo import UpdateOne

from harel.errors import PartitionCountChanged, ShardingError
from harel.executions.fields import EXECUTIONS
from harel.executions.indexes import SHARD_KEY
from harel.executions.partitions import (
    META,
    Partitions,
    even_zones,
    meta_document,
    meta_find,
    parse_partitions,
)
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport

BACKFILL_BATCH = 1000


@dataclass
class InitReport:
    """What `init` found and did, step by step: (step, "done" | "unchanged", detail)."""

    partitions: Partitions
    sharded: bool
    steps: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(outcome == "done" for _, outcome, _ in self.steps)

    def document(self) -> dict[str, Any]:
        return {
            "partitions": self.partitions.count,
            "sharded": self.sharded,
            "zones": [
                {"name": z.name, "start": z.start, "stop": z.stop, "shard": z.shard}
                for z in self.partitions.zones
            ],
            "steps": [{"step": s, "outcome": o, "detail": d} for s, o, d in self.steps],
            "changed": self.changed,
        }


def stored_partitions(database: Any) -> Partitions:
    """The partitions `database`'s deployment records (P = 1 without a partition map)."""
    return parse_partitions(meta_find().one(database[META]))


def is_router(client: Any) -> bool:
    return bool(client.admin.command("hello").get("msg") == "isdbgrid")


def shard_names(client: Any) -> list[str]:
    return sorted(str(shard["_id"]) for shard in client.admin.command("listShards")["shards"])


def sharded_key(client: Any, namespace: str) -> dict[str, Any] | None:
    """The shard key of `namespace` as the config servers hold it, or None while it is unsharded."""
    found = client["config"]["collections"].find_one({"_id": namespace, "dropped": {"$ne": True}})
    return dict(found["key"]) if found is not None and "key" in found else None


def init(
    client: Any, db_name: str, count: int, *, progress: Callable[[str], None] = lambda _: None
) -> InitReport:
    database = client[db_name]
    found = meta_find().one(database[META])
    stored = parse_partitions(found).count if found is not None else count
    if stored != count:
        raise PartitionCountChanged(stored, count)
    sharded = is_router(client)
    zones = even_zones(count, shard_names(client)) if sharded else ()
    partitions = Partitions(count, zones)
    report = InitReport(partitions, sharded)
    namespace = f"{db_name}.{EXECUTIONS}"

    progress("backfilling p")
    report.steps.append(("backfill p", *_backfill(database[EXECUTIONS], partitions, progress)))
    progress("creating indexes")
    before = set(database[EXECUTIONS].index_information())
    MongoStore(client, db_name, partitions=partitions).ensure_indexes()
    MongoTransport(client, db_name, partitions=partitions, watch=False).ensure_indexes()
    after = set(database[EXECUTIONS].index_information())
    report.steps.append(("indexes", "done" if after != before else "unchanged", ", ".join(sorted(after))))
    if sharded:
        report.steps.append(("shard collection", *_shard(client, namespace)))
        report.steps.append(("zones", *_zones(client, namespace, partitions)))
    document = meta_document(partitions, time.time())
    if _same_map(meta_find().one(database[META]), document):
        report.steps.append(("partition map", "unchanged", f"P = {count}"))
    else:
        database[META].replace_one({"_id": document["_id"]}, document, upsert=True)
        report.steps.append(("partition map", "done", f"P = {count}, {len(partitions.zones)} zone(s)"))
    return report


def _backfill(executions: Any, partitions: Partitions, progress: Callable[[str], None]) -> tuple[str, str]:
    done = 0
    while True:
        batch = [
            d["_id"] for d in executions.find({"p": {"$exists": False}}, {"_id": 1}).limit(BACKFILL_BATCH)
        ]
        if not batch:
            break
        executions.bulk_write(
            [
                UpdateOne({"_id": i, "p": {"$exists": False}}, {"$set": {"p": partitions.of(i)}})
                for i in batch
            ],
            ordered=False,
        )
        done += len(batch)
        progress(f"backfilled p on {done} execution(s)")
    return ("done", f"{done} execution(s)") if done else ("unchanged", "every execution has p")


def _shard(client: Any, namespace: str) -> tuple[str, str]:
    key = sharded_key(client, namespace)
    wanted = dict(SHARD_KEY)
    if key == wanted:
        return "unchanged", f"sharded on {wanted}"
    if key is not None:
        raise ShardingError(
            f"{namespace} sharded on {key}",
            f"sharded on {wanted}",
            "a collection's shard key changes only by resharding: run `reshardCollection` with the key "
            f"{wanted} (MongoDB 5.0+), then this command again",
        )
    client.admin.command("enableSharding", namespace.split(".", 1)[0])
    client.admin.command("shardCollection", namespace, key=wanted)
    return "done", f"sharded on {wanted}"


def _zones(client: Any, namespace: str, partitions: Partitions) -> tuple[str, str]:
    wanted = [(z.name, z.start, z.stop, z.shard) for z in partitions.zones]
    stored = sorted(
        (t["tag"], t["min"]["p"], t["max"]["p"]) for t in client["config"]["tags"].find({"ns": namespace})
    )
    if stored == sorted((name, start, stop) for name, start, stop, _ in wanted):
        return "unchanged", f"{len(wanted)} zone(s)"
    for tag in client["config"]["tags"].find({"ns": namespace}):
        client.admin.command("updateZoneKeyRange", namespace, min=tag["min"], max=tag["max"], zone=None)
    for name, start, stop, shard in wanted:
        client.admin.command("addShardToZone", shard, zone=name)
        client.admin.command(
            "updateZoneKeyRange",
            namespace,
            min={"p": start, "_id": MinKey()},
            max={"p": stop, "_id": MinKey()},
            zone=name,
        )
    return "done", ", ".join(
        f"{name} = p {start}..{stop - 1} on {shard}" for name, start, stop, shard in wanted
    )


def _same_map(stored: dict[str, Any] | None, document: dict[str, Any]) -> bool:
    if stored is None:
        return False
    return all(stored.get(k) == document[k] for k in ("count", "hash", "zones"))
