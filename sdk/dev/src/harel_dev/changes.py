"""The change log: the writes change streams read, the local server's stand-in for the oplog.

The engine records a change event for every document its writes insert, update, replace or delete in a
collection that a change stream has been opened on (`watch`); collections nobody watched are not recorded,
which loses nothing, since a stream can only resume from a token a stream on that collection was given.
Events are kept as BSON in arrival order, each with a sequence number that is also its resume token, inside a
bounded window (`MAX_EVENTS` events, `MAX_BYTES` bytes): a stream whose resume point fell out of the window,
or that comes from another server (a restart), is refused with ChangeStreamHistoryLost (286), as MongoDB
refuses a resume point no longer in its oplog.

An update event's `updateDescription` is computed by comparing the document before and after, top-level
field by top-level field: `updatedFields` holds each top-level field whose value changed or appeared (its
whole new value), `removedFields` each one that went; a write that changes nothing records nothing. MongoDB
reports the same for pipeline updates that replace whole fields, but names the dotted path of a sub-field
(`"lease.until"`) where only part of an embedded document changed (a classic `$set` of a dotted path, or a
pipeline update whose difference lies inside one), and may report `truncatedArrays`; here the top-level field
is named instead, and `truncatedArrays` is always empty. Values compare as Python values, as the engine's
`nModified` does, so a change of numeric type alone (1 to 1.0) or of field order is not an update here.

An event's `documentKey` is `{_id}`; a namespace given shard key fields (`set_document_key`, for a test
double's sharded collection) gets those fields first, as a sharded cluster's events carry them
(`{p: ..., _id: ...}`).

Callers hold the lock given at construction (the server's execution lock); `wait` releases it while it waits.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import bson
from bson import ObjectId, Timestamp

from harel_dev.errors import CommandError
from harel_dev.now import Clock, server_now

MAX_EVENTS = 10_000
MAX_BYTES = 64 * 1024 * 1024
TOKEN_FIELD = "_data"
_SEQUENCE_DIGITS = 16
HISTORY_LOST = 286


@dataclass(frozen=True)
class Change:
    sequence: int
    namespace: str
    key: Any  # the document's _id
    operation: str
    raw: bytes  # the event document as a stream returns it


class ChangeLog:
    def __init__(self, lock: threading.Lock, clock: Clock) -> None:
        self._appended = threading.Condition(lock)
        self._clock = clock
        # Tokens carry this log's id, so a token from another server (or this one before a restart) is known.
        self._log_id = str(ObjectId())
        self._events: list[Change] = []
        self._start = 0  # the first event still held in `_events`
        self._bytes = 0
        self._floor = 0  # every event after this sequence number is still held
        self._latest = 0
        self._watched: dict[str, int] = {}  # namespace -> the sequence number its recording began after
        self._key_fields: dict[str, tuple[str, ...]] = {}  # namespace -> shard key fields before _id
        self._last_time = (0, 0)
        self._waiting = 0
        self.interrupted = False

    # --- streams -------------------------------------------------------------------------------------

    def watch(self, namespace: str) -> None:
        """Record writes to `namespace` from now on."""
        self._watched.setdefault(namespace, self._latest)

    def watched(self, namespace: str) -> bool:
        return namespace in self._watched

    def set_document_key(self, namespace: str, fields: tuple[str, ...]) -> None:
        """Events of `namespace` carry these fields (a shard key's, `_id` excepted) in `documentKey` before
        `_id`; none (the default) gives `{_id}`."""
        if fields:
            self._key_fields[namespace] = fields
        else:
            self._key_fields.pop(namespace, None)

    def key_projection(self, namespace: str) -> dict[str, int]:
        """The projection that reads what a delete event's `documentKey` needs."""
        return {"_id": 1} | dict.fromkeys(self._key_fields.get(namespace, ()), 1)

    @property
    def latest(self) -> int:
        """The sequence number of the latest event (a position from which a stream sees only later ones)."""
        return self._latest

    def token(self, position: int) -> dict[str, str]:
        return {TOKEN_FIELD: f"{self._log_id}{position:0{_SEQUENCE_DIGITS}x}"}

    def sequence(self, token: Any) -> int:
        """The position `token` names; FailedToParse when it is no token of this kind."""
        data = token.get(TOKEN_FIELD) if isinstance(token, dict) else None
        if not isinstance(data, str) or len(data) != len(self._log_id) + _SEQUENCE_DIGITS:
            raise CommandError(9, f"invalid resume token: {token!r}")
        try:
            return int(data[len(self._log_id) :], 16)
        except ValueError:
            raise CommandError(9, f"invalid resume token: {token!r}") from None

    def resume_position(self, namespace: str, token: Any) -> int:
        """Where a stream on `namespace` resuming after `token` starts; ChangeStreamHistoryLost (286) when
        some event after it is no longer held, or was never recorded, or the token is not this log's."""
        position = self.sequence(token)
        if (
            token[TOKEN_FIELD][: len(self._log_id)] != self._log_id
            or position < max(self._floor, self._watched.get(namespace, self._latest))
            or position > self._latest
        ):
            raise CommandError(
                HISTORY_LOST,
                "Resume of change stream was not possible, as the resume point may no longer be in the oplog.",
            )
        return position

    def after(self, position: int, limit: int) -> list[Change]:
        """At most `limit` events after `position`, oldest first."""
        first = self._start + max(0, position - self._floor)
        return self._events[first : first + limit]

    @property
    def waiting(self) -> int:
        """How many streams wait for an event now."""
        return self._waiting

    def wait(self, timeout: float) -> None:
        """Until an event is recorded, `interrupt` is called or `timeout` seconds pass; the lock is released
        meanwhile, so other commands run."""
        self._waiting += 1
        try:
            self._appended.wait(timeout)
        finally:
            self._waiting -= 1

    def notify(self) -> None:
        """Wake every waiting stream: a cursor was killed or the data dropped."""
        if self._waiting:
            self._appended.notify_all()

    def interrupt(self) -> None:
        """The server stops: every waiting stream returns now."""
        self.interrupted = True
        self._appended.notify_all()

    def clear(self) -> None:
        """Forget every event (the data was dropped) and every document key's fields; a stream may resume
        only from the latest position."""
        self._events, self._start, self._bytes, self._floor = [], 0, 0, self._latest
        self._key_fields.clear()
        self.notify()

    # --- writes --------------------------------------------------------------------------------------

    def inserted(self, namespace: str, document: dict[str, Any]) -> None:
        self._append(namespace, "insert", document, {"fullDocument": document})

    def replaced(self, namespace: str, document: dict[str, Any]) -> None:
        self._append(namespace, "replace", document, {"fullDocument": document})

    def updated(self, namespace: str, before: dict[str, Any], after: dict[str, Any]) -> None:
        changed = {
            name: value for name, value in after.items() if name not in before or before[name] != value
        }
        removed = [name for name in before if name not in after]
        if changed or removed:
            description = {"updatedFields": changed, "removedFields": removed, "truncatedArrays": []}
            self._append(namespace, "update", after, {"updateDescription": description})

    def deleted(self, namespace: str, document: dict[str, Any]) -> None:
        """`document` holds at least what `key_projection(namespace)` reads."""
        self._append(namespace, "delete", document, {})

    def _append(
        self, namespace: str, operation: str, document: dict[str, Any], fields: dict[str, Any]
    ) -> None:
        key = document["_id"]
        self._latest += 1
        now = self._clock()
        database, collection = namespace.split(".", 1)
        event: dict[str, Any] = {
            "_id": self.token(self._latest),
            "operationType": operation,
            "clusterTime": self._tick(now),
            "wallTime": server_now(now),
        }
        if "fullDocument" in fields:
            event["fullDocument"] = fields["fullDocument"]
        event["ns"] = {"db": database, "coll": collection}
        key_fields = self._key_fields.get(namespace, ())
        shard_key = {name: document[name] for name in key_fields if name in document}
        event["documentKey"] = shard_key | {"_id": key}
        if "updateDescription" in fields:
            event["updateDescription"] = fields["updateDescription"]
        change = Change(self._latest, namespace, key, operation, bson.encode(event))
        self._events.append(change)
        self._bytes += len(change.raw)
        self._evict()
        self.notify()

    def _tick(self, now: float) -> Timestamp:
        """The event's cluster time: seconds and an increment, strictly increasing even if the clock is not."""
        seconds, increment = self._last_time
        self._last_time = (seconds, increment + 1) if int(now) <= seconds else (int(now), 1)
        return Timestamp(*self._last_time)

    def _evict(self) -> None:
        held = len(self._events) - self._start
        while held > 1 and (held > MAX_EVENTS or self._bytes > MAX_BYTES):
            oldest = self._events[self._start]
            self._bytes -= len(oldest.raw)
            self._floor = oldest.sequence
            self._start += 1
            held -= 1
        if self._start > len(self._events) // 2:
            del self._events[: self._start]
            self._start = 0
