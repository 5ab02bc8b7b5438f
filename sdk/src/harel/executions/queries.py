"""Every read of the `executions` collection: finds (projected to what their callers use) and aggregation
pipelines, each meant for an index (tests/conformance/test_query_shapes.py holds them to it)."""

from __future__ import annotations

from typing import Any

from harel.commands import Find, array, literal, only
from harel.executions.fields import require_positive
from harel.model import ExecutionStatus
from harel.servertime import NOW

# --- one execution, by `_id` -------------------------------------------------------------------------------


def load_find(execution_id: str) -> Find:
    return Find({"_id": execution_id}, only("data"))


def document_find(execution_id: str) -> Find:
    """The stored document as it is (for `harel status --document` and inspection)."""
    return Find({"_id": execution_id})


def outcome_find(execution_id: str) -> Find:
    """The version and the lease: what a refused or unanswered commit is judged by."""
    return Find({"_id": execution_id}, only("version", "lease"))


def trace_find(execution_id: str) -> Find:
    return Find({"_id": execution_id}, only("trace"))


def processed_find(execution_id: str, event_id: str) -> Find:
    return Find({"_id": execution_id, "processed": event_id}, only("_id"))


def load_for_event(execution_id: str, event_id: str) -> list[dict[str, Any]]:
    """`data` plus a server-side membership test: the processed window itself never leaves the server."""
    return [
        {"$match": {"_id": execution_id}},
        {"$project": {"data": 1, "hit": {"$in": [literal(event_id), array("processed")]}}},
    ]


def _holds(field: str, value: str) -> dict[str, Any]:
    return {"$in": [literal(value), array(field)]}


def send_diagnosis(target_id: str, event_id: str) -> list[dict[str, Any]]:
    """Why a send matched nothing: read back as a SendOutcome by `replies.parse_send_diagnosis`."""
    return [
        {"$match": {"_id": target_id}},
        {
            "$project": {
                "_id": 0,
                "created": {"$gt": ["$data", None]},
                "duplicate": {"$or": [_holds("inbox.id", event_id), _holds("processed", event_id)]},
            }
        },
    ]


# --- listing -----------------------------------------------------------------------------------------------


def list_find(
    status: ExecutionStatus | str | None, definition_id: str | None, roots_only: bool, offset: int, limit: int
) -> Find:
    """Newest first, every filter on the server; one more than a page, to know whether another follows."""
    query: dict[str, Any] = {"data": {"$exists": True}}
    if status is not None:
        query["status"] = ExecutionStatus(status).value
    if definition_id is not None:
        query["definition_id"] = definition_id
    if roots_only:
        query["parent_id"] = None
    return Find(
        query,
        only("version", "data"),
        sort=(("created_at", -1), ("_id", 1)),
        skip=offset,
        limit=require_positive("limit", limit) + 1,
    )


# --- work to find: relays, timers, dead letters -------------------------------------------------------------


def pending_relays_find(limit: int) -> Find:
    """Executions holding relay work, oldest work first (inspection: `pending_outbox`, `pending_spawns`)."""
    return Find({"relay_at": {"$gte": 0}}, only("outbox", "spawns"), sort=(("relay_at", 1),), limit=limit)


def due_find(bound: float, limit: int) -> Find:
    """Executions whose earliest unfired timer has passed on the server's clock, from the sparse
    `next_fire_at` index: the sweep costs what is due, not every execution with a timer. A mailbox that is
    not an array (stored by hand) is left out: firing into it fails on the server, and would fail the whole
    pass, for every execution's timers after it, at every pass."""
    return Find(
        {
            "next_fire_at": {"$gte": 0, "$lte": bound},
            "inbox": {"$type": "array"},
            "$expr": {"$lte": ["$next_fire_at", NOW]},
        },
        only("timers", "next_fire_at"),
        sort=(("next_fire_at", 1),),
        limit=limit,
    )


def parked_find(limit: int) -> Find:
    return Find(
        {"parked.at": {"$gte": 0}}, only("chart", "parked", "inbox.id"), sort=(("parked.at", 1),), limit=limit
    )


# --- statistics (`/metrics`) -------------------------------------------------------------------------------

PENDING_COUNT = [
    {"$match": {"$or": [{"wake_at": {"$gte": 0}}, {"parked.at": {"$gte": 0}}]}},
    {"$group": {"_id": None, "n": {"$sum": {"$size": array("inbox")}}}},
]
# A partitioned deployment's backlog per partition (summed into zones, one per shard, by the reader).
PENDING_BY_PARTITION = [
    PENDING_COUNT[0],
    {"$group": {"_id": "$p", "n": {"$sum": {"$size": array("inbox")}}}},
]
PENDING_RELAYS = [
    {"$match": {"relay_at": {"$gte": 0}}},
    {
        "$group": {
            "_id": None,
            "outbox": {"$sum": {"$size": array("outbox")}},
            "spawn": {"$sum": {"$size": array("spawns")}},
        }
    },
]


def parked_filter() -> dict[str, Any]:
    return {"parked.at": {"$gte": 0}}


def status_filter(status: ExecutionStatus) -> dict[str, Any]:
    return {"status": status.value}


def oldest_due(now: float) -> list[dict[str, Any]]:
    """The earliest `wake_at` that has passed (a mailbox or a timer due and not yet claimed): a range on the
    partial claim index and a minimum, no sort."""
    return [
        {"$match": {"wake_at": {"$gte": 0, "$lte": now}}},
        {"$group": {"_id": None, "at": {"$min": "$wake_at"}}},
    ]


def unserved_filter(now: float, served: set[str], after: float) -> dict[str, Any]:
    """Executions due for `after` seconds whose chart version no live worker serves."""
    return {"wake_at": {"$gte": 0, "$lte": now - after}, "chart": {"$nin": sorted(served)}}


# --- the wake-up hint --------------------------------------------------------------------------------------

# Replica sets with change streams only: a new execution; an idle one made claimable by a send (or by the
# operator); and one whose claim or commit left it with nothing but a timer, whose `wake_at` says when it
# is due. A commit that leaves events pending is followed by its worker's own next claim, and a claim's or
# an extension's lease is no one else's business.
WATCH_PIPELINE = [
    {
        "$match": {
            "$or": [
                {"operationType": "insert"},
                {
                    "operationType": "update",
                    "updateDescription.updatedFields.wake_at": {"$type": "number"},
                    "updateDescription.updatedFields.lease": {"$exists": False},
                },
                {
                    "operationType": "update",
                    "updateDescription.updatedFields.wake_at": {"$type": "number"},
                    # null (or left as it was): a timer, not a mailbox, makes it claimable next
                    "updateDescription.updatedFields.inbox_at": None,
                },
            ]
        }
    }
]


def next_wake_find(charts: list[str]) -> Find:
    """The earliest `wake_at` of the served charts, due or not (a timer, a lease's end, a retry): when an
    idle consumer that waits on the change stream has to look again at the latest."""
    return Find(
        {"chart": {"$in": charts}, "wake_at": {"$gte": 0}},
        only("wake_at"),
        sort=(("wake_at", 1),),
        limit=1,
    )
