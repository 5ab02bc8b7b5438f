"""The indexes of the `executions` collection, each named for the queries it serves (`queries`, the claim
and relay writes of `writes`)."""

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
