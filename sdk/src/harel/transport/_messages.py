"""Query and update documents of the Mongo queue, shared by the sync and async transports.

A queue document:

    {_id: <event id>, target_id: <id|null>, event: "<Event JSON>", visible_at: <epoch s>,
     attempts: <int>, owner: <claim token|null>, lease_until: <epoch s|null>, enqueued_at: <epoch s>,
     last_error: <str|null>}

Claiming filters on the single indexed field `visible_at`: a queued message is visible from its delay on,
a leased one becomes visible again when its lease ends — so one range query covers both, with no `$or`.
"""

from __future__ import annotations

import secrets
from typing import Any

from harel.model import Event
from harel.transport.base import DeadLetter, Message, backoff

QUEUE = "queue"
DEAD_LETTERS = "dead_letters"
ERROR_LIMIT = 4000


def new_owner_token() -> str:
    return secrets.token_hex(12)


def queued_document(target_id: str | None, event: Event, now: float, delay: float) -> dict[str, Any]:
    return {
        "_id": event.id,
        "target_id": target_id,
        "event": event.model_dump_json(),
        "visible_at": now + max(0.0, delay),
        "attempts": 0,
        "owner": None,
        "lease_until": None,
        "enqueued_at": now,
        "last_error": None,
    }


def claim_filter(now: float) -> dict[str, Any]:
    return {"visible_at": {"$lte": now}}


CLAIM_SORT = [("visible_at", 1)]


def claim_update(owner: str, now: float, lease: float) -> dict[str, Any]:
    until = now + lease
    return {"$set": {"owner": owner, "visible_at": until, "lease_until": until}, "$inc": {"attempts": 1}}


def owned_filter(message: Message) -> dict[str, Any]:
    return {"_id": message.id, "owner": message.owner}


def extend_update(now: float, lease: float) -> dict[str, Any]:
    until = now + lease
    return {"$set": {"visible_at": until, "lease_until": until}}


def retry_update(attempts: int, now: float, error: str) -> dict[str, Any]:
    return {
        "$set": {
            "visible_at": now + backoff(attempts),
            "owner": None,
            "lease_until": None,
            "last_error": error[:ERROR_LIMIT],
        }
    }


def release_update(now: float, delay: float) -> dict[str, Any]:
    return {
        "$set": {"visible_at": now + max(0.0, delay), "owner": None, "lease_until": None},
        "$inc": {"attempts": -1},
    }


def dead_letter_document(message: Message, error: str, now: float) -> dict[str, Any]:
    return {
        "_id": message.id,
        "target_id": message.target_id,
        "event": message.event.model_dump_json(),
        "attempts": message.attempts,
        "last_error": error[:ERROR_LIMIT],
        "dead_at": now,
    }


def parse_message(doc: dict[str, Any]) -> Message:
    return Message(
        id=doc["_id"],
        target_id=doc.get("target_id"),
        event=Event.model_validate_json(doc["event"]),
        attempts=int(doc["attempts"]),
        owner=doc["owner"],
        lease_until=float(doc["lease_until"]),
        enqueued_at=float(doc["enqueued_at"]),
    )


def parse_dead_letter(doc: dict[str, Any]) -> DeadLetter:
    return DeadLetter(
        id=doc["_id"],
        target_id=doc.get("target_id"),
        event=Event.model_validate_json(doc["event"]),
        attempts=int(doc["attempts"]),
        last_error=doc["last_error"],
        dead_at=float(doc["dead_at"]),
    )


def with_lease(message: Message, now: float, lease: float) -> Message:
    return Message(
        id=message.id,
        target_id=message.target_id,
        event=message.event,
        attempts=message.attempts,
        owner=message.owner,
        lease_until=now + lease,
        enqueued_at=message.enqueued_at,
    )


INDEXES: list[tuple[str, list[tuple[str, int]], dict[str, Any]]] = [
    (QUEUE, [("visible_at", 1)], {"name": "visible_at"}),
    (DEAD_LETTERS, [("dead_at", 1)], {"name": "dead_at"}),
]

INSERT_WATCH_PIPELINE = [{"$match": {"operationType": "insert"}}]
