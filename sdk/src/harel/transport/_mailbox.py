"""The mailbox document model: events waiting in their execution's document, as pure builders shared by
MongoTransport, AsyncMongoTransport and the stores' commits.

Fields MongoTransport writes on the `executions` document, beside the seed's:

    chart:        "<definition_id>@<definition_version>": the routing key. A worker claims only executions
                  of the chart versions it serves, so two applications on one database never touch each
                  other's executions, and an event for a chart nobody serves waits without being attempted.
    inbox:        [{id, event: "<Event JSON>", source, at, size}]: pending events in arrival order. `at` is
                  the sender's estimate of the server's time (for the queue-wait metric only); `size` is the
                  entry's share of the mailbox budget.
    inbox_bytes:  the sum of the entries' sizes; a send that would pass INBOX_LIMIT_BYTES is refused (the
                  document, mailbox included, must stay under MongoDB's 16 MiB).
    inbox_at:     when a worker may claim the execution next, on the server's clock (epoch seconds), or null:
                    null     nothing pending, or parked (waiting for an operator)
                    <= now   due: the first pending event's arrival, or a retry time that has passed
                    > now    leased until then, or backing off before a retry
    lease:        {owner, until, at, previous} while a worker holds the execution, else null. `at` is the
                  server's time of the claim; `previous` the owner of an expired lease it took over.
    attempts:     failed attempts at the head event (0 once it is applied);  last_error: the last error.
    parked:       {event_id, name, error, attempts, at} once the head event failed `max_attempts` times:
                  later events wait behind it (they never overtake it) until an operator retries or drops it.

`inbox_at` is the one field for "claimable from": a leased execution's is its lease's end, so one index
range over (`chart`, `inbox_at`) finds what is due and never what is leased, with no `$or`. The index is
partial (`inbox_at >= 0`), so it holds only executions with something to do.

Every command that decides on time compares with the server's `$$NOW` (`harel.servertime.NOW`). Updates
that need a condition (a send makes an idle execution due, but must not shorten a lease) are update
pipelines, and every value a client supplies enters them as `$literal`: a user string that starts with `$`
(an event id) is data, never a field path. Classic query filters compare values, never evaluate them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harel.commands import IndexSpec, literal, parse_execution
from harel.model import Event
from harel.servertime import NOW, now_plus
from harel.transport.base import Claim, Failure, Parked, Pending, SendOutcome

INBOX_LIMIT_BYTES = 4 * 1024 * 1024
ERROR_LIMIT = 4000

CLAIM_SORT = (("inbox_at", 1),)
CLAIM_PROJECTION = ("data", "version", "inbox", "lease", "attempts", "relay_at")

INDEXES = (
    IndexSpec("mailbox", (("chart", 1), ("inbox_at", 1)), partial={"inbox_at": {"$gte": 0}}),
    IndexSpec("parked", (("parked.at", 1),), partial={"parked.at": {"$gte": 0}}),
)

# An execution that was idle becomes due now; a leased, backing-off or already-due one keeps its time;
# a parked one stays parked.
_DUE_UNLESS_BUSY = {
    "$cond": [
        {"$eq": [{"$ifNull": ["$parked", None]}, None]},
        {"$ifNull": ["$inbox_at", NOW]},
        None,
    ]
}
_INBOX_BYTES = {"$sum": "$inbox.size"}


def _array(field: str) -> dict[str, Any]:
    return {"$ifNull": [f"${field}", []]}


def _holds(field: str, value: str) -> dict[str, Any]:
    return {"$in": [literal(value), _array(field)]}


def _due_if_pending(seconds: float = 0.0) -> dict[str, Any]:
    return {"$cond": [{"$gt": [{"$size": _array("inbox")}, 0]}, now_plus(seconds), None]}


def chart_key(definition_id: str, version: int) -> str:
    return f"{definition_id}@{version}"


@dataclass(frozen=True)
class Write:
    filter: dict[str, Any]
    update: list[dict[str, Any]]


# --- entries -------------------------------------------------------------------------------------------


def entry(event: Event, source: str | None, at: float) -> dict[str, Any]:
    body = event.model_dump_json()
    return {"id": event.id, "event": body, "source": source, "at": at, "size": len(body.encode())}


def parse_pending(document: Mapping[str, Any]) -> Pending:
    return Pending(
        id=document["id"],
        event=Event.model_validate_json(document["event"]),
        source=document.get("source"),
        at=float(document.get("at") or 0.0),
        size=int(document.get("size") or 0),
    )


def seed(chart: str, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The mailbox fields of a new execution, as `$set` values of its creation pipeline."""
    return {
        "chart": literal(chart),
        "inbox": literal(list(entries)),
        "inbox_bytes": sum(int(e["size"]) for e in entries),
        "inbox_at": NOW if entries else None,
        "lease": None,
        "attempts": 0,
        "last_error": None,
        "parked": None,
    }


# --- send ----------------------------------------------------------------------------------------------


def send_write(target_id: str, new: Mapping[str, Any]) -> Write:
    """Append `new` unless its id waits already or was processed, and unless the mailbox is full."""
    return Write(
        {
            "_id": target_id,
            "data": {"$exists": True},
            "processed": {"$ne": new["id"]},
            "inbox.id": {"$ne": new["id"]},
            "inbox_bytes": {"$not": {"$gt": INBOX_LIMIT_BYTES - int(new["size"])}},
        },
        [
            {
                "$set": {
                    "inbox": {"$concatArrays": [_array("inbox"), literal([dict(new)])]},
                    "inbox_at": _DUE_UNLESS_BUSY,
                }
            },
            {"$set": {"inbox_bytes": _INBOX_BYTES}},
        ],
    )


def send_diagnosis(target_id: str, event_id: str) -> list[dict[str, Any]]:
    """Why a send matched nothing: read back as a SendOutcome by `parse_send_diagnosis`."""
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


def parse_send_diagnosis(documents: Sequence[Mapping[str, Any]]) -> SendOutcome:
    if not documents or not documents[0].get("created"):
        return SendOutcome.MISSING
    return SendOutcome.DUPLICATE if documents[0].get("duplicate") else SendOutcome.FULL


# --- claim ---------------------------------------------------------------------------------------------


def claim_write(charts: Iterable[str], owner: str, lease: float, bound: float) -> Write:
    """The due execution, leased to `owner` until the server's now + `lease`. The range on `inbox_at` uses
    the index; the `$expr` against `$$NOW` decides."""
    return Write(
        {
            "chart": {"$in": list(charts)},
            "inbox_at": {"$gte": 0, "$lte": bound},
            "$expr": {"$lte": ["$inbox_at", NOW]},
        },
        [
            {
                "$set": {
                    "lease": {
                        "owner": literal(owner),
                        "until": now_plus(lease),
                        "at": NOW,
                        "previous": "$lease.owner",
                    },
                    "inbox_at": now_plus(lease),
                }
            }
        ],
    )


def parse_claim(document: Mapping[str, Any], owner: str) -> Claim:
    execution = parse_execution(document)
    if execution is None:
        raise ValueError(f"claimed execution {document.get('_id')!r} has no data")
    lease = document["lease"]
    return Claim(
        execution=execution,
        pending=tuple(parse_pending(e) for e in document.get("inbox") or ()),
        owner=owner,
        server_time=float(lease["at"]),
        lease_until=float(lease["until"]),
        attempts=int(document.get("attempts") or 0),
        previous_owner=lease.get("previous"),
        relay_idle=document.get("relay_at") is None,
    )


def owned(claim: Claim) -> dict[str, Any]:
    return {"_id": claim.execution_id, "lease.owner": claim.owner}


def extend_write(claim: Claim, lease: float) -> Write:
    return Write(owned(claim), [{"$set": {"lease.until": now_plus(lease), "inbox_at": now_plus(lease)}}])


def release_write(claim: Claim, delay: float = 0.0) -> Write:
    return Write(owned(claim), [{"$set": {"lease": None, "inbox_at": _due_if_pending(delay)}}])


# --- settling a claim: what a commit (or a failed attempt) does to the mailbox ------------------------


def settle_stages(
    applied: Sequence[Pending], failure: Failure | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two `$set` stages: the first removes the applied events and ends the lease (and records a failure),
    the second sets `inbox_at` from what is left. They join the commit's own stages."""
    first: dict[str, Any] = {"lease": None}
    if applied:
        ids = [p.id for p in applied]
        first["inbox"] = {
            "$filter": {
                "input": _array("inbox"),
                "as": "e",
                "cond": {"$eq": [{"$in": ["$$e.id", literal(ids)]}, False]},
            }
        }
    second: dict[str, Any] = {"inbox_bytes": _INBOX_BYTES}
    if failure is None:
        first.update({"attempts": 0, "last_error": None})
        second["inbox_at"] = _due_if_pending()
        return first, second
    error = failure.error[:ERROR_LIMIT]
    first.update({"attempts": failure.attempts, "last_error": literal(error)})
    if failure.park:
        first["parked"] = {
            "event_id": literal(failure.event.id),
            "name": literal(failure.event.event.name),
            "error": literal(error),
            "attempts": failure.attempts,
            "at": NOW,
        }
        second["inbox_at"] = None
    else:
        second["inbox_at"] = now_plus(failure.retry_in)
    return first, second


def fail_write(claim: Claim, failure: Failure) -> Write:
    """A failed attempt with nothing applied: the version stays, the lease ends."""
    first, second = settle_stages((), failure)
    return Write(owned(claim), [{"$set": first}, {"$set": second}])


# --- the operator's dead-letter actions ----------------------------------------------------------------


def parked_find(limit: int) -> tuple[dict[str, Any], dict[str, int], tuple[tuple[str, int], ...], int]:
    return {"parked.at": {"$gte": 0}}, {"chart": 1, "parked": 1, "inbox.id": 1}, (("parked.at", 1),), limit


def parse_parked(document: Mapping[str, Any]) -> Parked:
    parked = document["parked"]
    return Parked(
        execution_id=document["_id"],
        chart=document.get("chart", ""),
        event_id=parked["event_id"],
        event_name=parked["name"],
        error=parked["error"],
        attempts=int(parked["attempts"]),
        at=float(parked["at"]),
        waiting=max(0, len(document.get("inbox") or ()) - 1),
    )


def retry_write(execution_id: str) -> Write:
    return Write(
        {"_id": execution_id, "parked.at": {"$gte": 0}},
        [{"$set": {"parked": None, "attempts": 0, "last_error": None, "inbox_at": NOW}}],
    )


def drop_write(execution_id: str, event_id: str, dedupe_window: int) -> Write:
    """Remove the dead-lettered event and remember its id as processed, so a redelivery cannot bring it
    back; the events behind it become due."""
    return Write(
        {"_id": execution_id, "parked.event_id": event_id},
        [
            {
                "$set": {
                    "inbox": {
                        "$filter": {
                            "input": _array("inbox"),
                            "as": "e",
                            "cond": {"$ne": ["$$e.id", literal(event_id)]},
                        }
                    },
                    "processed": {
                        "$slice": [
                            {"$concatArrays": [_array("processed"), literal([event_id])]},
                            -dedupe_window,
                        ]
                    },
                    "parked": None,
                    "attempts": 0,
                    "last_error": None,
                }
            },
            {"$set": {"inbox_bytes": _INBOX_BYTES, "inbox_at": _due_if_pending()}},
        ],
    )


# --- timers and statistics -----------------------------------------------------------------------------


def fire_write(
    execution_id: str,
    timers_read: Mapping[str, Any],
    new: Mapping[str, Any],
    due_from: float,
    next_fire_at: float | None,
) -> Write:
    """A due timer becomes an event in its own execution's mailbox, in one update: only while the timers
    are exactly as the sweep read them and the server's clock has reached `due_from`. An event already
    waiting or processed is not appended again; `next_fire_at` moves past the fired timer either way."""
    duplicate = {"$or": [_holds("inbox.id", new["id"]), _holds("processed", new["id"])]}
    return Write(
        {"_id": execution_id, "timers": dict(timers_read), "$expr": {"$lte": [literal(due_from), NOW]}},
        [
            {
                "$set": {
                    "inbox": {
                        "$cond": [
                            duplicate,
                            _array("inbox"),
                            {"$concatArrays": [_array("inbox"), literal([dict(new)])]},
                        ]
                    },
                    "next_fire_at": next_fire_at,
                    "inbox_at": _DUE_UNLESS_BUSY,
                }
            },
            {"$set": {"inbox_bytes": _INBOX_BYTES}},
        ],
    )


PENDING_COUNT = [
    {"$match": {"$or": [{"inbox_at": {"$gte": 0}}, {"parked.at": {"$gte": 0}}]}},
    {"$group": {"_id": None, "n": {"$sum": {"$size": _array("inbox")}}}},
]


def parse_count(documents: Sequence[Mapping[str, Any]]) -> int:
    return int(documents[0]["n"]) if documents else 0


# Wake-up hint (replica sets with change streams only): a new execution, or an idle one made due by a send
# or a timer. A commit that leaves events pending is followed by its worker's own next claim.
WATCH_PIPELINE = [
    {
        "$match": {
            "$or": [
                {"operationType": "insert"},
                {
                    "operationType": "update",
                    "updateDescription.updatedFields.inbox_at": {"$type": "number"},
                    "updateDescription.updatedFields.lease": {"$exists": False},
                },
            ]
        }
    }
]
