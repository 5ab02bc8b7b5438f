"""Every write of an `executions` document outside a commit's steps (`commits` has those): the mailbox's
sends, claims and leases, a claim's settlement, the operator's dead-letter actions, the sweep, the relays
and the trace. Each is one `Write`: an update pipeline where the update depends on the document (a send
makes an idle execution due, but must not shorten a lease), a classic update elsewhere."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harel.commands import Write, array, literal, only
from harel.errors import UnreadableExecution
from harel.executions.fields import (
    ERROR_LIMIT,
    INBOX_LIMIT_BYTES,
    TIMER_ENTRY_SIZE,
    TRACEBACK_LIMIT,
    due_from,
    enc,
)
from harel.executions.records import Claim, Failure, Pending
from harel.executions.replies import UNKNOWN
from harel.model import DueTimer, Event, timer_event_id
from harel.servertime import NOW, now_plus

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
# At a claim: the lease is still held, so it ran out (a release, a commit and a failed attempt all end it).
_TAKEN_OVER = {"$ne": [{"$ifNull": ["$lease.owner", None]}, None]}
_ATTEMPTS = {"$ifNull": ["$attempts", 0]}
# No claim holds the execution: no lease, or one that ran out on the server's clock.
_UNLEASED = {
    "$or": [
        {"$eq": [{"$ifNull": ["$lease.owner", None]}, None]},
        {"$lte": [{"$ifNull": ["$lease.until", 0]}, NOW]},
    ]
}
# What a park by the relay or the sweep held back, given back when the operator settles the dead letter:
# relay work is due at once, the earliest timer as it was.
_RELAY_RESTORED = {"$cond": [{"$eq": [{"$ifNull": ["$parked.relay_at", None]}, None]}, "$relay_at", NOW]}
_TIMER_RESTORED = {"$ifNull": ["$parked.next_fire_at", {"$ifNull": ["$next_fire_at", None]}]}


# When a claim may take the execution (`wake_at`): its mailbox's time (due, leased, backing off) while it
# has one, else its earliest timer; never while parked. The last stage of every write that changes one of
# them, so that the claim's one index range finds due mailboxes and due timers alike.
_WAKE = {
    "$cond": [
        {"$eq": [{"$ifNull": ["$parked", None]}, None]},
        {"$ifNull": ["$inbox_at", {"$ifNull": ["$next_fire_at", None]}]},
        None,
    ]
}
WAKE_STAGE: dict[str, Any] = {"$set": {"wake_at": _WAKE}}


def _holds(field: str, value: str) -> dict[str, Any]:
    return {"$in": [literal(value), array(field)]}


def _due_if_pending(seconds: float = 0.0) -> dict[str, Any]:
    return {"$cond": [{"$gt": [{"$size": array("inbox")}, 0]}, now_plus(seconds), None]}


def without(field: str, key: str, values: Sequence[Any]) -> dict[str, Any]:
    """The array `field` without its entries whose `key` is one of `values`."""
    return {
        "$filter": {
            "input": array(field),
            "as": "e",
            "cond": {"$eq": [{"$in": [f"$$e.{key}", literal(list(values))]}, False]},
        }
    }


# --- entries -------------------------------------------------------------------------------------------------


def entry(event: Event, source: str | None, at: float) -> dict[str, Any]:
    """An `inbox` entry: the event, who sent it, when it arrived, its share of the mailbox budget."""
    body = event.model_dump_json()
    return {"id": event.id, "event": body, "source": source, "at": at, "size": len(body.encode())}


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


# --- send ----------------------------------------------------------------------------------------------------


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
                    "inbox": {"$concatArrays": [array("inbox"), literal([dict(new)])]},
                    "inbox_at": _DUE_UNLESS_BUSY,
                }
            },
            {"$set": {"inbox_bytes": _INBOX_BYTES}},
            WAKE_STAGE,
        ],
    )


# --- claim ---------------------------------------------------------------------------------------------------

CLAIM_SORT = (("wake_at", 1),)
CLAIM_PROJECTION = (
    "data",
    "version",
    "inbox",
    "lease",
    "attempts",
    "relay_at",
    "timers",
    "outbox",
    "spawns.seq",
)

# The stored timers as [{k: enc(path), v: fire_at}]; none where `timers` is not a sub-document (stored by
# hand): the claim reads them, and must not fail on them, for this execution and every claim after it.
_STORED_TIMERS = {"$cond": [{"$eq": [{"$type": "$timers"}, "object"]}, {"$objectToArray": "$timers"}, []]}
_INBOX_IS_ARRAY = {"$isArray": "$inbox"}
# The timers whose events wait in the mailbox already, as {key, fire_at}.
_WAITING_TIMERS = {
    "$cond": [
        _INBOX_IS_ARRAY,
        {"$map": {"input": "$inbox", "as": "e", "in": {"$ifNull": ["$$e.timer", None]}}},
        [],
    ]
}


def _due_at(fire_at: Any) -> dict[str, Any]:
    """`due_from` on the server: the fire time rounded up to the millisecond."""
    return {"$divide": [{"$ceil": {"$multiply": [fire_at, 1000]}}, 1000]}


def _timers_where(due: bool) -> dict[str, Any]:
    compare = "$lte" if due else "$gt"
    return {
        "$filter": {
            "input": _STORED_TIMERS,
            "as": "t",
            # a $cond, not an $and: the comparison is evaluated only for a number
            "cond": {"$cond": [{"$isNumber": "$$t.v"}, {compare: [_due_at("$$t.v"), NOW]}, False]},
        }
    }


# A due timer's mailbox entry, built on the server. It names the timer ({key, fire_at}) instead of carrying
# the event's JSON: the reader builds the event (`replies.parse_inbox`), and a timer is recognised as waiting
# by what it is, whoever appended it (a claim here, or `fire_write`).
_TIMER_ENTRIES = {
    "$map": {
        "input": {
            "$filter": {
                "input": _timers_where(due=True),
                "as": "t",
                "cond": {"$not": [{"$in": [{"key": "$$t.k", "fire_at": "$$t.v"}, _WAITING_TIMERS]}]},
            }
        },
        "as": "t",
        "in": {
            "id": {"$concat": [{"$toString": "$_id"}, ":timer:", "$$t.k", "@", {"$toString": "$$t.v"}]},
            "timer": {"key": "$$t.k", "fire_at": "$$t.v"},
            "source": None,
            "at": NOW,
            "size": TIMER_ENTRY_SIZE,
        },
    }
}
# The earliest timer not yet due (every due one waits in the mailbox after the claim), or null.
_LATER_TIMER = {"$min": {"$map": {"input": _timers_where(due=False), "as": "t", "in": _due_at("$$t.v")}}}
# The claim's first stage: due timers become events at the end of the mailbox, in the claim's own command.
FIRE_DUE_TIMERS: dict[str, Any] = {
    "$set": {
        "inbox": {"$cond": [_INBOX_IS_ARRAY, {"$concatArrays": ["$inbox", _TIMER_ENTRIES]}, "$inbox"]},
        "next_fire_at": _LATER_TIMER,
    }
}


def claim_write(charts: Iterable[str], owner: str, lease: float, bound: float) -> Write:
    """The execution that has been claimable longest, leased to `owner` until the server's now + `lease`,
    returned with its data and mailbox: due timers are appended to the mailbox first, so a timer is fired
    by the claim that takes its execution. The range on `wake_at` uses the index; the `$expr` against
    `$$NOW` decides."""
    return Write(
        {
            "chart": {"$in": list(charts)},
            "wake_at": {"$gte": 0, "$lte": bound},
            "$expr": {"$lte": ["$wake_at", NOW]},
        },
        [
            FIRE_DUE_TIMERS,
            {
                "$set": {
                    "lease": {
                        "owner": literal(owner),
                        "until": now_plus(lease),
                        "at": NOW,
                        "previous": "$lease.owner",
                    },
                    "inbox_at": now_plus(lease),
                    "wake_at": now_plus(lease),
                    "inbox_bytes": {"$cond": [_INBOX_IS_ARRAY, _INBOX_BYTES, "$inbox_bytes"]},
                    # a lease still held is one that ran out: its holder's attempt at the head event failed.
                    # `attempts` stored as something else is kept as it is, for the claim's reading to park:
                    # adding to it would fail the update on the server, for this claim and every later one
                    "attempts": {
                        "$cond": [
                            {"$and": [_TAKEN_OVER, {"$isNumber": _ATTEMPTS}]},
                            {"$add": [_ATTEMPTS, 1]},
                            "$attempts",
                        ]
                    },
                    "last_error": {
                        "$cond": [
                            _TAKEN_OVER,
                            {
                                "$concat": [
                                    "LeaseExpired: the lease of ",
                                    "$lease.owner",
                                    " ran out before its step",
                                ]
                            },
                            "$last_error",
                        ]
                    },
                }
            },
        ],
        returned=True,
        projection=only(*CLAIM_PROJECTION),
        sort=CLAIM_SORT,
    )


def owned(claim: Claim) -> dict[str, Any]:
    return fenced(claim.execution_id, claim.owner)


def fenced(execution_id: str, owner: str) -> dict[str, Any]:
    """The filter of a claim's write: the execution, while the lease is still `owner`'s."""
    return {"_id": execution_id, "lease.owner": owner}


def extend_write(claim: Claim, lease: float) -> Write:
    return Write(
        owned(claim),
        [{"$set": {"lease.until": now_plus(lease), "inbox_at": now_plus(lease), "wake_at": now_plus(lease)}}],
        returned=True,
        projection=only("lease"),
    )


def release_write(claim: Claim, delay: float = 0.0) -> Write:
    return Write(owned(claim), [{"$set": {"lease": None, "inbox_at": _due_if_pending(delay)}}, WAKE_STAGE])


# --- settling a claim: what a commit (or a failed attempt) does to the mailbox --------------------------------


def settle_stages(
    applied: Sequence[Pending], failure: Failure | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two `$set` stages: the first removes the applied events and ends the lease (and records a failure),
    the second sets `inbox_at` from what is left. They join the commit's own stages."""
    first: dict[str, Any] = {"lease": None}
    if applied:
        first["inbox"] = without("inbox", "id", [p.id for p in applied])
    second: dict[str, Any] = {"inbox_bytes": _INBOX_BYTES}
    if failure is None:
        first.update({"attempts": 0, "last_error": None, "last_traceback": None})
        second["inbox_at"] = _due_if_pending()
        return first, second
    error = failure.error[:ERROR_LIMIT]
    traceback = failure.traceback[-TRACEBACK_LIMIT:]
    first.update(
        {"attempts": failure.attempts, "last_error": literal(error), "last_traceback": literal(traceback)}
    )
    if failure.park:
        first["parked"] = _dead_letter(
            failure.event.id, failure.event.event.name, error, traceback, failure.attempts
        )
        second["inbox_at"] = None
    else:
        second["inbox_at"] = now_plus(failure.retry_in)
    return first, second


def fail_write(claim: Claim, failure: Failure) -> Write:
    """A failed attempt with nothing applied: the version stays, the lease ends."""
    first, second = settle_stages((), failure)
    return Write(owned(claim), [{"$set": first}, {"$set": second}, WAKE_STAGE])


def _dead_letter(event_id: str, name: str, error: str, traceback: str, attempts: int) -> dict[str, Any]:
    return {
        "event_id": literal(event_id),
        "name": literal(name),
        "error": literal(error),
        "traceback": literal(traceback),
        "attempts": attempts,
        "at": NOW,
    }


def park_unreadable_write(unreadable: UnreadableExecution) -> Write:
    """Park an execution whose document the claim that read it could not: fenced by that claim's owner token
    (its lease), like any write of a claim, and written with `$literal`s only, so that no field the document
    holds, however malformed, is read to write it. One reading failed: one attempt."""
    assert unreadable.owner is not None and unreadable.event_id is not None and unreadable.event is not None
    error = f"{type(unreadable).__name__}: {unreadable}"[:ERROR_LIMIT]
    return Write(
        fenced(unreadable.execution_id, unreadable.owner),
        [{"$set": _parked_unread(error, _dead_letter(unreadable.event_id, unreadable.event, error, "", 1))}],
    )


def _parked_unread(error: str, letter: dict[str, Any]) -> dict[str, Any]:
    """The fields a park of what could not be read sets: one attempt, its error, no traceback, the letter."""
    return {
        "lease": None,
        "inbox_at": None,
        "wake_at": None,
        "attempts": 1,
        "last_error": literal(error),
        "last_traceback": None,
        "parked": letter,
    }


def park_unleased_write(unreadable: UnreadableExecution) -> Write:
    """Park an execution whose relay work or timers the relay or the sweep could not read. Neither holds the
    mailbox's lease, so the park is fenced by its absence: no claim's lease is clobbered, and a claim that
    holds one meanwhile leaves the park to a later pass. `relay_at` and `next_fire_at` are held in the dead
    letter and cleared, so neither the relay nor the sweep takes the execution again until the operator
    settles it; its events wait, parked, as behind a claim's park. `$literal`s only, as there."""
    error = f"{type(unreadable).__name__}: {unreadable}"[:ERROR_LIMIT]
    event_id = unreadable.event_id or UNKNOWN
    name = unreadable.event or UNKNOWN
    letter = _dead_letter(event_id, name, error, "", 1)
    return Write(
        {"_id": unreadable.execution_id, "data": {"$exists": True}, "$expr": _UNLEASED},
        [
            {
                "$set": {
                    **_parked_unread(
                        error,
                        {
                            **letter,
                            "relay_at": {"$ifNull": ["$relay_at", None]},
                            "next_fire_at": {"$ifNull": ["$next_fire_at", None]},
                        },
                    ),
                    "relay_at": None,
                    "next_fire_at": None,
                }
            }
        ],
    )


# --- the operator's dead-letter actions ----------------------------------------------------------------------


def retry_write(execution_id: str) -> Write:
    return Write(
        {"_id": execution_id, "parked.at": {"$gte": 0}},
        [
            {
                "$set": {
                    "parked": None,
                    "attempts": 0,
                    "last_error": None,
                    "last_traceback": None,
                    "inbox_at": NOW,
                    "relay_at": _RELAY_RESTORED,
                    "next_fire_at": _TIMER_RESTORED,
                }
            },
            WAKE_STAGE,
        ],
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
                            "input": array("inbox"),
                            "as": "e",
                            "cond": {"$ne": ["$$e.id", literal(event_id)]},
                        }
                    },
                    "processed": {
                        "$slice": [
                            {"$concatArrays": [array("processed"), literal([event_id])]},
                            -dedupe_window,
                        ]
                    },
                    "parked": None,
                    "attempts": 0,
                    "last_error": None,
                    "last_traceback": None,
                    "relay_at": _RELAY_RESTORED,
                    "next_fire_at": _TIMER_RESTORED,
                }
            },
            {"$set": {"inbox_bytes": _INBOX_BYTES, "inbox_at": _due_if_pending()}},
            WAKE_STAGE,
        ],
    )


# --- the sweep -----------------------------------------------------------------------------------------------


def timer_entry(execution_id: str, path: str, fire_at: float, now: float) -> dict[str, Any]:
    """A due timer's mailbox entry as `fire_write` appends it: the shape the claim builds on the server
    (`_TIMER_ENTRIES`), with the event id made here."""
    return {
        "id": timer_event_id(execution_id, path, fire_at),
        "timer": {"key": enc(path), "fire_at": fire_at},
        "source": None,
        "at": now,
        "size": TIMER_ENTRY_SIZE,
    }


def fire_write(due: DueTimer, now: float) -> Write:
    """A due timer becomes an event in its own execution's mailbox, in one update (the seed's timer sweep;
    the worker's claims fire timers themselves): only while the timers are exactly as the sweep read them
    and the server's clock has reached the timer. A timer whose event already waits is not appended again,
    nor one whose event was processed; `next_fire_at` moves past the fired timer either way."""
    new = timer_entry(due.execution_id, due.path, due.fire_at, now)
    duplicate = {
        "$or": [
            {"$in": [literal(new["timer"]), _WAITING_TIMERS]},
            _holds("processed", new["id"]),
        ]
    }
    return Write(
        {
            "_id": due.execution_id,
            "timers": dict(due.stored_timers),
            "$expr": {"$lte": [literal(due_from(due.fire_at)), NOW]},
        },
        [
            {
                "$set": {
                    "inbox": {
                        "$cond": [
                            duplicate,
                            array("inbox"),
                            {"$concatArrays": [array("inbox"), literal([new])]},
                        ]
                    },
                    "next_fire_at": due.next_fire_at,
                    "inbox_at": _DUE_UNLESS_BUSY,
                }
            },
            {"$set": {"inbox_bytes": _INBOX_BYTES}},
            WAKE_STAGE,
        ],
    )


def stamp_wake_write() -> Write:
    """Give `wake_at` to the executions stored before it existed (their mailboxes and timers would otherwise
    never be claimed): one update of those without it, at the transport's start-up."""
    return Write({"wake_at": {"$exists": False}, "chart": {"$exists": True}}, [WAKE_STAGE], many=True)


# --- relays --------------------------------------------------------------------------------------------------


def relay_take_write(lease: float, bound: float) -> Write:
    """Take over relay work left longer than its holder's time (a crashed or slow worker's): the execution
    whose `relay_at` passed longest ago on the server's clock, held for `lease` from now, returned with
    its outbox and spawns."""
    return Write(
        {"relay_at": {"$gte": 0, "$lte": bound}, "$expr": {"$lte": ["$relay_at", NOW]}},
        [{"$set": {"relay_at": now_plus(lease)}}],
        returned=True,
        projection=only("outbox", "spawns"),
        sort=(("relay_at", 1),),
    )


def relay_ack_write(
    execution_id: str,
    outbox_seqs: Sequence[int],
    spawn_seqs: Sequence[int],
    retry_in: float,
    *,
    others_hold: bool = False,
) -> Write:
    """Remove what was delivered; what is left (a target that does not exist yet, a full mailbox) is due
    again after `retry_in`, and `relay_at` is cleared once nothing is left. `others_hold`: what is left is
    not the acknowledging relay's (its own was delivered in full), so a later hold on it stays (a committer
    that took the relay work over holds it)."""
    left = {"$add": [{"$size": array("outbox")}, {"$size": array("spawns")}]}
    retry_at = {"$max": ["$relay_at", now_plus(retry_in)]} if others_hold else now_plus(retry_in)
    return Write(
        {"_id": execution_id},
        [
            {
                "$set": {
                    "outbox": without("outbox", "seq", outbox_seqs),
                    "spawns": without("spawns", "seq", spawn_seqs),
                }
            },
            {"$set": {"relay_at": {"$cond": [{"$gt": [left, 0]}, retry_at, None]}}},
        ],
    )


# --- the trace outside a commit ------------------------------------------------------------------------------


def trace_step(trace: Mapping[str, Any], index: int) -> dict[str, Any]:
    return {**trace, "index": index}


def trace_write(execution_id: str, step: Mapping[str, Any], trace_max: int) -> Write:
    """Append one step (indexed) to the trace ring. Upserts: an id with no execution yet gets a trace-only
    document, which loads as absent."""
    return Write(
        {"_id": execution_id},
        {"$push": {"trace": {"$each": [dict(step)], "$slice": -trace_max}}},
        upsert=True,
    )


def counter_write(counter: str, count: int) -> Write:
    """Reserve a block of `count` numbers of `counter` (in the `counters` collection)."""
    return Write({"_id": counter}, {"$inc": {"n": count}}, upsert=True, returned=True)
