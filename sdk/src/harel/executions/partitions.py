"""Partitions: how the executions of a sharded deployment are split, so that every command reaches one shard.

Every execution belongs to partition `p` = the first 8 bytes of the BLAKE2b digest of its *root* execution
id (big-endian), modulo P. A region's child execution has its parent's `p`, so a root, its regions and
everything they send each other live on one shard. The function is part of the data format: `_id` is
unique per shard only, and a document is found again only because its `p` follows from its id. P is fixed
when a deployment is partitioned (`harel partitions init`) and recorded once, in the `harel_meta` document
`{_id: "partitions", count: P, zones: [...]}`; without that document P = 1 and nothing changes: no `p` in
any document, filter or index (tests/wire/test_single_partition_unchanged.py holds it).

With P > 1 the collection is sharded on `{p: 1, _id: 1}` and:

- every command on one execution carries its full shard key (`keyed`: the filter's `_id` gains its `p`),
  upserts included, so a router sends it to one shard;
- every command that looks for work (a claim, a relay take-over, the seed's timer sweep) carries
  `p: {$in: window}` (`within`), a window being at most `WINDOW_LIMIT` partitions of one zone: the
  partitions of one zone live on one shard, so the command is targeted too. A window is that narrow so a
  claim's sort on `wake_at` is served by a merge of one index range per partition and chart, which MongoDB
  plans only up to 200 of (`internalQueryMaxScansToExplode`), not by a sort in memory.

A zone is one contiguous range of partitions placed on one shard (zone sharding). A stale zone map in a
worker costs a command that reaches two shards, never correctness: the execution's lease and the commit's
CAS are the safety, partitions only decide where a worker looks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from harel.commands import Find, Write
from harel.errors import PartitionsUnreadable, UnknownZone
from harel.ids import is_child_id

META = "harel_meta"  # unsharded: the partition count and the zone map
PARTITIONS_ID = "partitions"
HASH = "blake2b-64 of the root id, big-endian, mod P"
DEFAULT_SHARDED_COUNT = 256
MAX_COUNT = 4096
WINDOW_LIMIT = 200

Command = TypeVar("Command", Find, Write)


def root_id(execution_id: str) -> str:
    """The root execution of `execution_id`: a child's id is its parent's with `/<region>@<version>` added,
    and a root id may not end in that form (`harel.ids.check_root_id`)."""
    while is_child_id(execution_id):
        execution_id = execution_id.rsplit("/", 1)[0]
    return execution_id


def partition_of(execution_id: str, count: int) -> int:
    digest = hashlib.blake2b(root_id(execution_id).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


@dataclass(frozen=True)
class Zone:
    """Partitions `start` (inclusive) to `stop` (exclusive), placed on one shard."""

    name: str
    start: int
    stop: int
    shard: str | None = None

    def __contains__(self, partition: object) -> bool:
        return isinstance(partition, int) and self.start <= partition < self.stop


@dataclass(frozen=True)
class Partitions:
    """P and the zone map of one deployment. `Partitions()` is one replica set: P = 1, every helper the
    identity."""

    count: int = 1
    zones: tuple[Zone, ...] = ()

    def __post_init__(self) -> None:
        if not self.zones:
            object.__setattr__(self, "zones", (Zone("all", 0, self.count),))

    @property
    def single(self) -> bool:
        return self.count == 1

    def of(self, execution_id: str) -> int:
        return partition_of(execution_id, self.count)

    def key(self, execution_id: str) -> dict[str, Any]:
        """The full shard key of one execution, as a filter."""
        if self.single:
            return {"_id": execution_id}
        return {"p": self.of(execution_id), "_id": execution_id}

    def keyed(self, command: Command) -> Command:
        """`command` on one execution (its filter names the `_id`) with that execution's full shard key."""
        if self.single:
            return command
        return dataclasses.replace(command, filter=self._keyed_filter(command.filter))

    def keyed_pipeline(self, pipeline: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """An aggregation on one execution (a first `$match` on `_id`) with its full shard key."""
        stages = [dict(stage) for stage in pipeline]
        if not self.single:
            stages[0] = {"$match": self._keyed_filter(stages[0]["$match"])}
        return stages

    def _keyed_filter(self, filter_: Mapping[str, Any]) -> dict[str, Any]:
        execution_id = filter_["_id"]
        if not isinstance(execution_id, str):
            raise TypeError(f"a keyed command names one execution by its `_id`, not {execution_id!r}")
        return {"p": self.of(execution_id), **filter_}

    def windows(self, width: int, zones: Sequence[Zone] | None = None) -> list[tuple[int, ...]]:
        """The partitions of `zones` (default: all) in runs of at most `width`, none across two zones."""
        found: list[tuple[int, ...]] = []
        step = max(1, width)
        for zone in zones if zones is not None else self.zones:
            for start in range(zone.start, zone.stop, step):
                found.append(tuple(range(start, min(start + step, zone.stop))))
        return found

    def within(self, command: Command, window: Sequence[int]) -> Command:
        """`command` looking for work in the partitions of `window` only."""
        if self.single:
            return command
        return dataclasses.replace(command, filter={"p": {"$in": list(window)}, **command.filter})

    def served(self, names: Sequence[str]) -> tuple[Zone, ...]:
        """The zones called `names` (all of them when `names` is empty); UnknownZone names those the zone
        map does not have."""
        if not names:
            return self.zones
        known = {zone.name: zone for zone in self.zones}
        missing = [name for name in names if name not in known]
        if missing:
            raise UnknownZone(missing, list(known))
        return tuple(known[name] for name in names)


SINGLE = Partitions()


def meta_find() -> Find:
    return Find({"_id": PARTITIONS_ID})


def parse_partitions(document: Mapping[str, Any] | None) -> Partitions:
    """The deployment's partitions from its `harel_meta` document (none: one replica set, P = 1)."""
    if document is None:
        return SINGLE
    count = document.get("count")
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_COUNT:
        raise PartitionsUnreadable(f"count must be a whole number from 1 to {MAX_COUNT}, not {count!r}")
    zones = tuple(_zone(z, count) for z in document.get("zones") or ())
    covered = sorted((z.start, z.stop) for z in zones)
    if zones and (
        covered[0][0] != 0
        or covered[-1][1] != count
        or any(a[1] != b[0] for a, b in itertools.pairwise(covered))
    ):
        raise PartitionsUnreadable(f"the zones must cover partitions 0 to {count - 1} once each: {covered}")
    return Partitions(count, tuple(sorted(zones, key=lambda z: z.start)))


def _zone(stored: Any, count: int) -> Zone:
    try:
        zone = Zone(str(stored["name"]), int(stored["start"]), int(stored["stop"]), stored.get("shard"))
    except (KeyError, TypeError, ValueError) as exc:
        raise PartitionsUnreadable(f"a zone needs a name, a start and a stop: {stored!r}") from exc
    if not 0 <= zone.start < zone.stop <= count:
        raise PartitionsUnreadable(f"zone {zone.name} covers {zone.start}..{zone.stop}, outside 0..{count}")
    return zone


def meta_document(partitions: Partitions, written_at: float) -> dict[str, Any]:
    """What `harel partitions init` records."""
    return {
        "_id": PARTITIONS_ID,
        "count": partitions.count,
        "hash": HASH,
        "zones": [
            {"name": z.name, "start": z.start, "stop": z.stop, "shard": z.shard} for z in partitions.zones
        ],
        "written_at": written_at,
    }


def even_zones(count: int, shards: Sequence[str]) -> tuple[Zone, ...]:
    """One zone per shard, each a contiguous run of partitions, the runs as even as `count` allows."""
    zones = []
    for i, shard in enumerate(shards):
        start, stop = count * i // len(shards), count * (i + 1) // len(shards)
        zones.append(Zone(f"harel-{shard}", start, stop, shard))
    return tuple(zones)
