"""Change streams on one collection: `aggregate` with a first `$changeStream` stage, its cursor's `getMore`.

A stream reads the change log (`harel_dev.changes`) from its position on: the events of its collection, put
through the stages after `$changeStream` (`$match`, `$project`, `$addFields`/`$set`, `$replaceRoot`, as
mongomock evaluates them; the other stages a change stream allows are not modelled, those it does not allow
are refused as MongoDB refuses them). Every batch carries a `postBatchResumeToken`, the position the stream
has read up to, so a driver resumes after a transient error (`resumeAfter`, or `startAfter`, the same here:
no event ever invalidates a stream) without losing or repeating an event.

The stream's cursor never ends by itself. `getMore` returns what is there; when nothing is, it waits for the
next event up to the command's `maxTimeMS` (1 s when not given, as MongoDB's awaitData), releasing the
server's execution lock so other connections' commands run meanwhile, and returns an empty batch when the time
is up. `killCursors` ends the stream; a `getMore` waiting on a cursor killed meanwhile fails with CursorKilled
(237). `fullDocument: "updateLookup"` adds the document as it is when the event is read to update events.

Not modelled (refused with NotImplemented, 238): streams on a database or the cluster, `startAtOperationTime`,
pre- and post-images (`fullDocument` `whenAvailable`/`required`, `fullDocumentBeforeChange`),
`showExpandedEvents`, and events other than insert, update, replace and delete (no drop, rename or
invalidate: dropping a watched collection ends no stream).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import bson
from bson import Int64
from mongomock import aggregate

from harel_dev.changes import ChangeLog
from harel_dev.errors import CommandError, not_modelled

STAGE = "$changeStream"
DEFAULT_AWAIT_MS = 1000
DEFAULT_FIRST_BATCH = 101
# Events read from the log per pass through the stream's pipeline.
_READ_CHUNK = 256
# A batch stops growing past this many bytes of events (a reply must stay under 16 MiB).
_BATCH_BYTES = 8 * 1024 * 1024
_MODELLED_STAGES = frozenset({"$match", "$project", "$addFields", "$set", "$replaceRoot"})
_ALLOWED_STAGES = _MODELLED_STAGES | {"$unset", "$replaceWith", "$redact", "$changeStreamSplitLargeEvent"}
_FULL_DOCUMENT = ("default", "updateLookup")
_OPTIONS = frozenset(
    {
        "fullDocument",
        "fullDocumentBeforeChange",
        "resumeAfter",
        "startAfter",
        "startAtOperationTime",
        "showExpandedEvents",
        "allChangesForCluster",
        "allowToRunOnConfigDB",
    }
)
_RESUME_OPTIONS = ("resumeAfter", "startAfter", "startAtOperationTime")
CURSOR_KILLED = 237
INTERRUPTED_AT_SHUTDOWN = 11600
TOKEN_MODIFIED = 280

Lookup = Callable[[str, Any], dict[str, Any] | None]


def opens_change_stream(name: str, command: dict[str, Any]) -> bool:
    pipeline = command.get("pipeline")
    return (
        name == "aggregate"
        and isinstance(pipeline, list)
        and bool(pipeline)
        and isinstance(pipeline[0], dict)
        and STAGE in pipeline[0]
    )


@dataclass
class _Stream:
    namespace: str
    stages: list[dict[str, Any]]
    update_lookup: bool
    position: int


class ChangeStreams:
    """The open change-stream cursors. `lookup(namespace, _id)` reads a document as stored, for
    updateLookup. Callers hold the change log's lock."""

    def __init__(self, log: ChangeLog, new_cursor_id: Callable[[], int], lookup: Lookup) -> None:
        self._log = log
        self._new_cursor_id = new_cursor_id
        self._lookup = lookup
        self._open: dict[int, _Stream] = {}

    def open(self, namespace: str, pipeline: list[dict[str, Any]], batch_size: int | None) -> dict[str, Any]:
        """The `cursor` of the aggregate's reply: a new stream, with the events already there after its
        resume point (none without one) in its first batch."""
        options, stages = pipeline[0][STAGE], pipeline[1:]
        stream = _Stream(
            namespace, _checked(stages), _update_lookup(options), self._start(namespace, options)
        )
        self._log.watch(namespace)
        cursor_id = self._new_cursor_id()
        self._open[cursor_id] = stream
        batch = self._read(stream, DEFAULT_FIRST_BATCH if batch_size is None else batch_size)
        return self._cursor(cursor_id, stream, "firstBatch", batch)

    def holds(self, cursor_id: int) -> bool:
        return cursor_id in self._open

    def get_more(self, cursor_id: int, batch_size: int | None, max_time_ms: int | None) -> dict[str, Any]:
        stream = self._open[cursor_id]
        deadline = time.monotonic() + (DEFAULT_AWAIT_MS if max_time_ms is None else max_time_ms) / 1000
        while not (batch := self._read(stream, batch_size)):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._log.wait(remaining)
            if self._log.interrupted:
                raise CommandError(INTERRUPTED_AT_SHUTDOWN, "interrupted at shutdown")
            if self._open.get(cursor_id) is not stream:
                raise CommandError(CURSOR_KILLED, f"cursor id {cursor_id} was killed while it waited")
        return self._cursor(cursor_id, stream, "nextBatch", batch)

    def kill(self, cursor_ids: list[int]) -> list[int]:
        """Close the streams among `cursor_ids`; the ids of those closed."""
        killed = [cursor_id for cursor_id in cursor_ids if self._open.pop(cursor_id, None) is not None]
        if killed:
            self._log.notify()
        return killed

    def clear(self) -> None:
        self._open.clear()
        self._log.notify()

    def _start(self, namespace: str, options: Any) -> int:
        if not isinstance(options, dict):
            raise CommandError(14, "the $changeStream stage takes a document of options")
        unknown = set(options) - _OPTIONS
        if unknown:
            raise CommandError(40415, f"BSON field '$changeStream.{sorted(unknown)[0]}' is an unknown field.")
        for option in ("allChangesForCluster", "showExpandedEvents", "allowToRunOnConfigDB"):
            if options.get(option):
                raise not_modelled(f"$changeStream's {option}")
        if options.get("fullDocumentBeforeChange", "off") != "off":
            raise not_modelled("pre-images (fullDocumentBeforeChange)")
        resume = [option for option in _RESUME_OPTIONS if option in options]
        if len(resume) > 1:
            raise CommandError(40674, "Only one type of resume option is allowed, but multiple were found.")
        if not resume:
            return self._log.latest
        if resume[0] == "startAtOperationTime":
            raise not_modelled("startAtOperationTime (resume from a token: resumeAfter or startAfter)")
        return self._log.resume_position(namespace, options[resume[0]])

    def _read(self, stream: _Stream, limit: int | None) -> list[dict[str, Any]]:
        """The stream's next events, at most `limit` (None: as many as fit a batch), its position moved past
        everything read; what its pipeline filters out is read all the same."""
        batch: list[dict[str, Any]] = []
        size = 0
        while limit is None or len(batch) < limit:
            changes = self._log.after(stream.position, _READ_CHUNK)
            if not changes:
                break
            sizes = {}
            events = []
            for change in changes:
                if change.namespace == stream.namespace:
                    event = bson.decode(change.raw)
                    if stream.update_lookup and change.operation == "update":
                        event = _with_full_document(event, self._lookup(change.namespace, change.key))
                    events.append(event)
                    sizes[change.sequence] = len(change.raw)
            for event in _through(stream.stages, events):
                sequence = self._log.sequence(event["_id"])
                if (limit is not None and len(batch) >= limit) or (batch and size > _BATCH_BYTES):
                    return batch  # the position stays at the last event returned
                batch.append(event)
                size += sizes[sequence]
                stream.position = sequence
            stream.position = changes[-1].sequence
        return batch

    def _cursor(self, cursor_id: int, stream: _Stream, field: str, batch: list[Any]) -> dict[str, Any]:
        return {
            field: batch,
            "postBatchResumeToken": self._log.token(stream.position),
            "id": Int64(cursor_id),
            "ns": stream.namespace,
        }


def _checked(stages: list[Any]) -> list[dict[str, Any]]:
    for stage in stages:
        name = next(iter(stage), "") if isinstance(stage, dict) and len(stage) == 1 else ""
        if name == STAGE:
            raise CommandError(40602, "$changeStream is only valid as the first stage in a pipeline")
        if name not in _ALLOWED_STAGES:
            raise CommandError(20, f"{name or stage!r} is not permitted in a $changeStream pipeline")
        if name not in _MODELLED_STAGES:
            raise not_modelled(f"{name} in a change stream's pipeline")
    return stages


def _update_lookup(options: dict[str, Any]) -> bool:
    full_document = options.get("fullDocument", "default")
    if full_document not in _FULL_DOCUMENT:
        raise not_modelled(f"fullDocument {full_document!r} (post-images): 'default' or 'updateLookup'")
    return bool(full_document == "updateLookup")


def _with_full_document(event: dict[str, Any], document: dict[str, Any] | None) -> dict[str, Any]:
    """The update event with `fullDocument` in its place, after `wallTime` (None if the document is gone)."""
    fields = list(event.items())
    at = next(index for index, (name, _) in enumerate(fields) if name == "wallTime") + 1
    return dict([*fields[:at], ("fullDocument", document), *fields[at:]])


def _through(stages: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events the stream's stages let through, as they shape them; an event whose `_id` (its resume
    token) a stage changed stops the stream, as MongoDB stops it."""
    if not stages or not events:
        return events
    tokens = {repr(event["_id"]) for event in events}
    shaped = list(aggregate.process_pipeline(events, None, stages, None))
    for event in shaped:
        if repr(event.get("_id")) not in tokens:
            raise CommandError(
                TOKEN_MODIFIED,
                "Encountered an event whose _id field, which contains the resume token, was modified by the "
                "pipeline. Modifying the _id field of an event makes it impossible to resume the stream from "
                "that point. Only transformations that retain the unmodified _id field are allowed.",
            )
    return shaped
