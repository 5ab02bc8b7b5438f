"""The indexes of the `executions` collection, each named for the queries it serves (`queries`, the claim
and relay writes of `writes`). A partitioned deployment (P > 1, `executions.partitions`) leads the indexes
of the work-finding queries with `p`, which those queries carry, and has the shard key's own index."""

from __future__ import annotations

from harel.commands import IndexSpec

# MongoStore's: listings, the sweep, the relays.
STORE_INDEXES = (
    IndexSpec("created", (("created_at", -1), ("_id", 1))),
    IndexSpec("status_created", (("status", 1), ("created_at", -1), ("_id", 1))),
    IndexSpec("definition_created", (("definition_id", 1), ("created_at", -1), ("_id", 1))),
    IndexSpec("next_fire_at_1", (("next_fire_at", 1),), sparse=True),
    IndexSpec("relay_at", (("relay_at", 1),), partial={"relay_at": {"$gte": 0}}),
)
# Indexes of earlier releases no query uses any more: dropped by MongoStore.ensure_indexes where present.
RETIRED_INDEXES = ("definition_id_1", "outbox.seq_1", "spawns.seq_1", "mailbox")

# MongoTransport's: claims (the mailbox) and the operator's dead letters.
MAILBOX_INDEXES = (
    IndexSpec("wake", (("chart", 1), ("wake_at", 1)), partial={"wake_at": {"$gte": 0}}),
    IndexSpec("parked", (("parked.at", 1),), partial={"parked.at": {"$gte": 0}}),
)

SHARD_KEY = (("p", 1), ("_id", 1))
SHARD_KEY_INDEX = IndexSpec("shard_key", SHARD_KEY)
# With P > 1: the same queries, each within a window of partitions. A sparse index would hold every
# document (`p` is always there), so the timer index becomes partial like the others.
PARTITIONED_STORE_INDEXES = (
    *STORE_INDEXES[:3],
    SHARD_KEY_INDEX,
    IndexSpec("p_next_fire_at", (("p", 1), ("next_fire_at", 1)), partial={"next_fire_at": {"$gte": 0}}),
    IndexSpec("p_relay_at", (("p", 1), ("relay_at", 1)), partial={"relay_at": {"$gte": 0}}),
)
PARTITIONED_MAILBOX_INDEXES = (
    IndexSpec("p_wake", (("p", 1), ("chart", 1), ("wake_at", 1)), partial={"wake_at": {"$gte": 0}}),
    MAILBOX_INDEXES[1],
)
# The single-partition indexes those replace, dropped once a deployment is partitioned.
REPLACED_BY_PARTITIONS = ("next_fire_at_1", "relay_at", "wake")


def store_indexes(partitioned: bool) -> tuple[IndexSpec, ...]:
    return PARTITIONED_STORE_INDEXES if partitioned else STORE_INDEXES


def mailbox_indexes(partitioned: bool) -> tuple[IndexSpec, ...]:
    return PARTITIONED_MAILBOX_INDEXES if partitioned else MAILBOX_INDEXES


def retired_indexes(partitioned: bool) -> tuple[str, ...]:
    return (*RETIRED_INDEXES, *REPLACED_BY_PARTITIONS) if partitioned else RETIRED_INDEXES
