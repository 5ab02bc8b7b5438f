"""The execution document model as pure functions: every query, update and parser the stores use.

MongoStore, AsyncMongoStore and MemoryStore all call these, so the twins differ only in how they reach
the data (a blocking call, an awaited one, a dict under a lock) and never in what they write or read.

One execution is one document in the `executions` collection:

    {
      _id:           execution id
      definition_id: the chart id (top level so listings filter it server-side)
      version:       the optimistic-concurrency counter; a commit's CAS filter is {_id, version}
      data:          the whole Execution as JSON (Execution.model_dump_json), its own `version` included
      outbox:        [{seq, target_id, event: Event JSON}]      events awaiting the outbox relay
      spawns:        [{seq, parent_id, child_id, root_path, context}]   children awaiting the spawn relay
      processed:     [event id, ...]     the dedupe window: the last `dedupe_window` handled event ids
      timers:        {enc(path): fire_at}   durable timers keyed by node path (dots stored as U+FF0E)
      trace:         [{...step, index}]  the trace ring: the last `trace_max` steps
      next_fire_at:  min(timers) — present only while a timer is armed; indexed for the sweep
    }

A version-0 commit inserts this document whole (every embedded field seeded, so later `$push`/`$set`
operators always find an array or a sub-document); every later commit is one partial update of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from harel.errors import ExecutionTooLarge, StoreConflict
from harel.model import (
    DueTimer,
    Event,
    Execution,
    ExecutionPage,
    ExecutionStatus,
    ExecutionSummary,
    OutboxEntry,
    SpawnEntry,
    TimerOp,
    decode_offset,
    encode_offset,
    matches,
)
from harel.store.base import Emit, Spawn

EXECUTIONS = "executions"
COUNTERS = "counters"
# The one counter a commit draws from: outbox and spawn seqs share it, so a commit costs at most one
# counters round trip whatever it emits.
SEQ_COUNTER = "seq"

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
# A commit whose own payload reaches this is refused before it is sent: the document also holds the
# embedded arrays, and a write the server rejects mid-flight is harder to explain than one never sent.
SAFE_COMMIT_BYTES = 15 * 1024 * 1024
# Server error codes for a document that outgrew 16 MiB: BSONObjectTooLarge, and the code older
# servers return when the result of an update is too large.
TOO_LARGE_CODES = frozenset({10334, 17419})

# MongoDB reads a "." in a field name as a path step, so node paths are stored with the dot replaced by
# FULLWIDTH FULL STOP, a character charts may not use in state names.
DOT_STANDIN = "\uff0e"


def enc(path: str) -> str:
    return path.replace(".", DOT_STANDIN)


def dec(key: str) -> str:
    return key.replace(DOT_STANDIN, ".")


def timer_field(path: str) -> str:
    return f"timers.{enc(path)}"


def trace_counter(execution_id: str) -> str:
    return f"trace:{execution_id}"


def require_positive(name: str, value: int) -> int:
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


# --- indexes ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexSpec:
    key: str
    sparse: bool

    def options(self) -> dict[str, Any]:
        """`create_index` keyword arguments. `sparse` is sent only when set: a server that stored the
        index without it may count an explicit `sparse: false` as different options and refuse."""
        return {"name": f"{self.key}_1", **({"sparse": True} if self.sparse else {})}


# definition_id serves listings; the sparse ones hold only the documents the sweep and the relays must
# visit, so their scans cost what is due or pending, not the size of the collection.
INDEXES = (
    IndexSpec("definition_id", sparse=False),
    IndexSpec("next_fire_at", sparse=True),
    IndexSpec("outbox.seq", sparse=True),
    IndexSpec("spawns.seq", sparse=True),
)


# --- commit ----------------------------------------------------------------------------------------


def seq_count(emits: Sequence[Emit], spawns: Sequence[Spawn]) -> int:
    return len(emits) + len(spawns)


def counter_update(count: int) -> dict[str, Any]:
    return {"$inc": {"n": count}}


def first_of_block(counter_doc: Mapping[str, Any], count: int) -> int:
    """The first seq of the block a `$inc` by `count` reserved (the document is the one after it)."""
    return int(counter_doc["n"]) - count + 1


def serialize(exe: Execution, version: int) -> str:
    return exe.model_copy(update={"version": version}).model_dump_json()


def outbox_entries(first_seq: int, emits: Sequence[Emit]) -> list[dict[str, Any]]:
    return [
        {"seq": first_seq + i, "target_id": target, "event": event.model_dump_json()}
        for i, (target, event) in enumerate(emits)
    ]


def spawn_entries(first_seq: int, parent_id: str, spawns: Sequence[Spawn]) -> list[dict[str, Any]]:
    return [
        {
            "seq": first_seq + i,
            "parent_id": parent_id,
            "child_id": child,
            "root_path": root,
            "context": dict(ctx),
        }
        for i, (child, root, ctx) in enumerate(spawns)
    ]


def trace_step(trace: Mapping[str, Any], index: int) -> dict[str, Any]:
    return {**trace, "index": index}


def final_timers(ops: Iterable[TimerOp]) -> dict[str, float | None]:
    """Each path's last operation in the commit (None: cancelled). A state left and re-entered in one
    step cancels then schedules; sending both to MongoDB would be a conflicting $set/$unset of one path."""
    final: dict[str, float | None] = {}
    for op in ops:
        final[op.path] = op.fire_at if op.action == "schedule" else None
    return final


@dataclass(frozen=True)
class CommitWrite:
    """What one commit sends: a whole document (version 0) or the CAS filter and a partial update."""

    execution_id: str
    expected: int
    version: int
    size: int
    document: dict[str, Any] | None = None
    cas_filter: dict[str, Any] = field(default_factory=dict)
    update: dict[str, Any] = field(default_factory=dict)

    @property
    def creates(self) -> bool:
        return self.document is not None


@dataclass(frozen=True)
class CommitParts:
    """The entries a commit adds, built once and shared by the Mongo write and the memory store."""

    data: str
    outbox: list[dict[str, Any]]
    spawns: list[dict[str, Any]]
    timers: dict[str, float | None]
    processed_event_id: str | None
    trace: dict[str, Any] | None


def commit_parts(
    exe: Execution,
    first_seq: int,
    emits: Sequence[Emit],
    spawns: Sequence[Spawn],
    timers: Sequence[TimerOp],
    processed_event_id: str | None,
    trace: Mapping[str, Any] | None,
) -> CommitParts:
    """Serialize `exe` at its next version; the trace step's index is the step number, the version the
    commit starts from, so no counter is needed for it."""
    return CommitParts(
        data=serialize(exe, exe.version + 1),
        outbox=outbox_entries(first_seq, emits),
        spawns=spawn_entries(first_seq + len(emits), exe.id, spawns),
        timers=final_timers(timers),
        processed_event_id=processed_event_id,
        trace=trace_step(trace, exe.version) if trace is not None else None,
    )


def new_document(exe: Execution, parts: CommitParts) -> dict[str, Any]:
    """The document a version-0 commit inserts: every embedded field seeded."""
    document: dict[str, Any] = {
        "_id": exe.id,
        "definition_id": exe.definition_id,
        "version": exe.version + 1,
        "data": parts.data,
        "outbox": parts.outbox,
        "spawns": parts.spawns,
        "processed": [parts.processed_event_id] if parts.processed_event_id is not None else [],
        "timers": {enc(path): at for path, at in parts.timers.items() if at is not None},
        "trace": [parts.trace] if parts.trace is not None else [],
    }
    if exe.next_fire_at is not None:
        document["next_fire_at"] = exe.next_fire_at
    return document


def commit_update(exe: Execution, parts: CommitParts, trace_max: int, dedupe_window: int) -> dict[str, Any]:
    """The partial update of a commit. Its size depends on this step only, never on how much the
    document has accumulated: arrays grow by `$push`, and the rings trim themselves with `$slice`."""
    set_ops: dict[str, Any] = {
        "definition_id": exe.definition_id,
        "version": exe.version + 1,
        "data": parts.data,
    }
    unset_ops: dict[str, str] = {}
    for path, fire_at in parts.timers.items():
        if fire_at is None:
            unset_ops[timer_field(path)] = ""
        else:
            set_ops[timer_field(path)] = fire_at
    if exe.next_fire_at is None:
        unset_ops["next_fire_at"] = ""
    else:
        set_ops["next_fire_at"] = exe.next_fire_at
    push: dict[str, Any] = {}
    if parts.outbox:
        push["outbox"] = {"$each": parts.outbox}
    if parts.spawns:
        push["spawns"] = {"$each": parts.spawns}
    if parts.processed_event_id is not None:
        push["processed"] = {"$each": [parts.processed_event_id], "$slice": -dedupe_window}
    if parts.trace is not None:
        push["trace"] = {"$each": [parts.trace], "$slice": -trace_max}
    update: dict[str, Any] = {"$set": set_ops}
    if push:
        update["$push"] = push
    if unset_ops:
        update["$unset"] = unset_ops
    return update


def encoded_size(payload: Mapping[str, Any]) -> int:
    import bson

    return len(bson.encode(payload))


def ensure_fits(execution_id: str, payload: Mapping[str, Any]) -> int:
    """The payload's BSON size; ExecutionTooLarge when it reaches SAFE_COMMIT_BYTES."""
    size = encoded_size(payload)
    if size >= SAFE_COMMIT_BYTES:
        raise ExecutionTooLarge(execution_id, size, SAFE_COMMIT_BYTES)
    return size


def plan_commit(exe: Execution, parts: CommitParts, trace_max: int, dedupe_window: int) -> CommitWrite:
    """Version 0 inserts the whole document; any other version updates it under the {_id, version} CAS.

    A version-0 commit goes straight to the insert: no stored document ever has version 0, so a CAS
    update at version 0 could never match and would only cost a round trip."""
    expected = exe.version
    if expected == 0:
        document = new_document(exe, parts)
        size = ensure_fits(exe.id, document)
        return CommitWrite(exe.id, expected, expected + 1, size, document=document)
    update = commit_update(exe, parts, trace_max, dedupe_window)
    size = ensure_fits(exe.id, update)
    return CommitWrite(
        exe.id, expected, expected + 1, size, cas_filter={"_id": exe.id, "version": expected}, update=update
    )


def conflict(write: CommitWrite, found: Mapping[str, Any] | None) -> StoreConflict:
    return StoreConflict(write.execution_id, write.expected, found.get("version") if found else None)


@contextmanager
def too_large_as_typed(write: CommitWrite) -> Iterator[None]:
    """Map the driver's and the server's "document too large" errors to ExecutionTooLarge."""
    from pymongo.errors import DocumentTooLarge, OperationFailure

    try:
        yield
    except DocumentTooLarge as exc:
        raise ExecutionTooLarge(write.execution_id, write.size, MAX_DOCUMENT_BYTES) from exc
    except OperationFailure as exc:
        if exc.code in TOO_LARGE_CODES:
            raise ExecutionTooLarge(write.execution_id, write.size, MAX_DOCUMENT_BYTES) from exc
        raise


# --- reads -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Find:
    """One `find`: filter, projection and cursor shape. Opening the cursor is the same call on every
    client (PyMongo sync and async, Motor, mongomock): only iterating it differs."""

    filter: dict[str, Any]
    projection: dict[str, Any]
    sort: tuple[tuple[str, int], ...] = ()
    skip: int = 0
    limit: int = 0

    def open(self, collection: Any) -> Any:
        cursor = collection.find(self.filter, self.projection)
        if self.sort:
            cursor = cursor.sort(list(self.sort))
        if self.skip:
            cursor = cursor.skip(self.skip)
        if self.limit:
            cursor = cursor.limit(self.limit)
        return cursor


def only(*fields: str) -> dict[str, int]:
    """A fresh projection per call: some clients (mongomock) write into the projection they are given."""
    return dict.fromkeys(fields, 1)


def parse_execution(document: Mapping[str, Any] | None) -> Execution | None:
    """A document without `data` holds only a trace appended before the execution was created."""
    if document is None or "data" not in document:
        return None
    return Execution.model_validate_json(document["data"])


def load_for_event_pipeline(execution_id: str, event_id: str) -> list[dict[str, Any]]:
    """`data` plus a server-side membership test: the processed window itself never leaves the server."""
    return [
        {"$match": {"_id": execution_id}},
        {"$project": {"data": 1, "hit": {"$in": [event_id, {"$ifNull": ["$processed", []]}]}}},
    ]


def parse_load_for_event(documents: Sequence[Mapping[str, Any]]) -> tuple[Execution | None, bool]:
    if not documents:
        return None, False
    return parse_execution(documents[0]), bool(documents[0].get("hit"))


def processed_filter(execution_id: str, event_id: str) -> dict[str, Any]:
    return {"_id": execution_id, "processed": event_id}


def parse_trace(document: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return list(document.get("trace", [])) if document is not None else []


def append_trace_update(step: Mapping[str, Any], trace_max: int) -> dict[str, Any]:
    return {"$push": {"trace": {"$each": [dict(step)], "$slice": -trace_max}}}


# --- listing ---------------------------------------------------------------------------------------


def list_find(definition_id: str | None, offset: int) -> Find:
    """Only definition_id is a top-level field; status and parent live in `data` and filter client-side."""
    query: dict[str, Any] = {} if definition_id is None else {"definition_id": definition_id}
    return Find(query, {"version": 1, "data": 1}, sort=(("_id", 1),), skip=offset)


class PageCollector:
    """Fills one listing page from documents in `_id` order, starting where `cursor` points.

    The next cursor is the offset after the last document scanned (not offset + limit): filters that run
    here reject documents, so a page may hold fewer than `limit` items and still not be the last."""

    def __init__(
        self,
        cursor: str | None,
        limit: int,
        status: ExecutionStatus | str | None,
        definition_id: str | None,
        roots_only: bool,
    ) -> None:
        self.offset = decode_offset(cursor)
        self._limit = require_positive("limit", limit)
        self._status = status
        self._definition_id = definition_id
        self._roots_only = roots_only
        self._scanned = 0
        self._items: list[ExecutionSummary] = []

    def offer(self, document: Mapping[str, Any]) -> bool:
        """Take one document; True once the page is full."""
        self._scanned += 1
        if "data" in document:
            summary = ExecutionSummary.from_data(json.loads(document["data"]), document.get("version", 0))
            if matches(summary, self._status, self._definition_id, self._roots_only):
                self._items.append(summary)
        return len(self._items) >= self._limit

    def page(self) -> ExecutionPage:
        full = len(self._items) >= self._limit
        return ExecutionPage(
            items=self._items, next_cursor=encode_offset(self.offset + self._scanned) if full else None
        )


# --- relays ----------------------------------------------------------------------------------------

# `$gte: 1` (seqs start at 1) rather than `$exists`/`$ne: []`: a range on the indexed key is answered
# from the sparse multikey index, visiting only documents that hold a pending entry.


def outbox_find(limit: int) -> Find:
    return Find({"outbox.seq": {"$gte": 1}}, {"outbox": 1}, sort=(("outbox.seq", 1),), limit=limit)


def spawns_find(limit: int) -> Find:
    return Find({"spawns.seq": {"$gte": 1}}, {"spawns": 1}, sort=(("spawns.seq", 1),), limit=limit)


def parse_outbox(documents: Iterable[Mapping[str, Any]], limit: int) -> list[OutboxEntry]:
    """The oldest `limit` entries across the documents, by seq. Documents come sorted by their smallest
    seq, so the first `limit` documents hold the `limit` oldest entries."""
    entries = [
        OutboxEntry(e["seq"], e["target_id"], Event.model_validate_json(e["event"]))
        for document in documents
        for e in document.get("outbox", [])
    ]
    return sorted(entries, key=lambda e: e.seq)[:limit]


def parse_spawns(documents: Iterable[Mapping[str, Any]], limit: int) -> list[SpawnEntry]:
    entries = [
        SpawnEntry(s["seq"], s["parent_id"], s["child_id"], s["root_path"], dict(s["context"]))
        for document in documents
        for s in document.get("spawns", [])
    ]
    return sorted(entries, key=lambda s: s.seq)[:limit]


def ack_outbox_write(seq: int) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"outbox.seq": seq}, {"$pull": {"outbox": {"seq": seq}}}


def ack_spawn_write(seq: int) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"spawns.seq": seq}, {"$pull": {"spawns": {"seq": seq}}}


# --- timers ----------------------------------------------------------------------------------------


def due_find(now: float, limit: int) -> Find:
    """Documents whose earliest timer has passed, from the sparse next_fire_at index: the sweep costs
    what is due, not every execution that has a timer armed."""
    return Find({"next_fire_at": {"$lte": now}}, {"timers": 1}, sort=(("next_fire_at", 1),), limit=limit)


def parse_due(documents: Iterable[Mapping[str, Any]], now: float, limit: int) -> list[DueTimer]:
    due = [
        DueTimer(document["_id"], dec(key), float(fire_at))
        for document in documents
        for key, fire_at in (document.get("timers") or {}).items()
        if fire_at <= now
    ]
    return sorted(due, key=lambda t: t.fire_at)[:limit]


def next_timer_find() -> Find:
    return Find(
        {"next_fire_at": {"$exists": True}},
        {"_id": 0, "next_fire_at": 1},
        sort=(("next_fire_at", 1),),
        limit=1,
    )


def parse_next_timer(documents: Sequence[Mapping[str, Any]]) -> float | None:
    return float(documents[0]["next_fire_at"]) if documents else None


def delete_timer_write(execution_id: str, path: str, fire_at: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """Unset the timer only while it still holds `fire_at`: a timer re-armed since the sweep read it
    has another value, matches nothing, and stays."""
    key = timer_field(path)
    return {"_id": execution_id, key: fire_at}, {"$unset": {key: ""}}
