"""The execution document model as pure functions: every query, update and parser the stores use.

MongoStore and AsyncMongoStore both call these, so the twins differ only in how they reach the data (a
blocking call or an awaited one) and never in what they write or read.

One execution is one document in the `executions` collection. The seed's fields:

    _id:           execution id
    definition_id: the chart id
    version:       the optimistic-concurrency counter: the number of steps the execution has taken. A commit's
                   CAS filter is {_id, version}; a commit of k steps advances it by k.
    data:          the whole Execution as JSON (Execution.model_dump_json)
    outbox:        [{seq, target_id, event: Event JSON, at}]          events awaiting delivery
    spawns:        [{seq, parent_id, child_id, root_path, context, at}] children awaiting creation
    processed:     [event id, ...]   the dedupe window: the last `dedupe_window` applied event ids
    timers:        {enc(path): fire_at}  durable timers keyed by node path (dots stored as U+FF0E)
    trace:         [{...step, index}]  the trace ring: the last `trace_max` steps; a step's index is the
                   version it started from
    next_fire_at:  the earliest timer not yet turned into an event, or null; the sweep's index

and, beyond the seed:

    status, parent_id, created_at, updated_at: promoted from `data`, so listings filter and sort on the
                   server and statistics count by status (`data` stays the whole truth)
    relay_at:      null, or when relay work on this execution's outbox and spawns may be taken by a
                   background relay (server clock): the worker that commits entries relays them itself at
                   once and holds them for its lease's length (`RELAY_GRACE_SECONDS` for a commit outside
                   a claim); a background relay that takes the work holds it for its own lease. Indexed,
                   so relays never scan.

The mailbox fields (`chart`, `inbox`, `inbox_at`, `lease`, ...) are MongoTransport's:
`harel.transport._mailbox` documents them.

Seqs need no counter: an entry's seq is `SEQ_STRIDE * v + n` for the n-th entry of the step that started at
version v, unique and increasing within the execution, which is all delivery order needs (events from one
sender to one target are delivered in seq order). A step may emit and spawn at most `SEQ_STRIDE` entries.

Commits are update pipelines: one `update_one` under the CAS filter, sending only what the steps added
(the new entries, appended with `$concatArrays`; the rings trimmed with `$slice`), never the document. A
pipeline rather than `$set`/`$push` because releasing the mailbox depends on what is left in it
(`inbox_at` is due if events arrived during the lease, null otherwise) — one condition no classic update
can express. Every client value enters as `$literal`.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from harel.commands import Find, IndexSpec, literal, only, parse_execution
from harel.errors import ExecutionTooLarge, StepTooLarge, StoreConflict
from harel.model import (
    ChildSeed,
    DueTimer,
    Event,
    Execution,
    ExecutionPage,
    ExecutionStatus,
    ExecutionSummary,
    OutboxEntry,
    SpawnEntry,
    encode_offset,
    start_event,
    timer_event,
    timer_event_id,
)
from harel.servertime import NOW, now_plus
from harel.store.base import Emit, Spawn
from harel.transport import _mailbox as mailbox
from harel.transport.base import Claim, Failure, Pending

EXECUTIONS = "executions"
COUNTERS = "counters"

SEQ_STRIDE = 1000
RELAY_GRACE_SECONDS = 10.0
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


def trace_counter(execution_id: str) -> str:
    return f"trace:{execution_id}"


def require_positive(name: str, value: int) -> int:
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    return value


def _array(field_name: str) -> dict[str, Any]:
    return {"$ifNull": [f"${field_name}", []]}


def _appended(field_name: str, entries: Sequence[Any], keep: int | None = None) -> dict[str, Any]:
    joined: dict[str, Any] = {"$concatArrays": [_array(field_name), literal(list(entries))]}
    return {"$slice": [joined, -keep]} if keep is not None else joined


# --- indexes ---------------------------------------------------------------------------------------

INDEXES = (
    IndexSpec("created", (("created_at", -1), ("_id", 1))),
    IndexSpec("status_created", (("status", 1), ("created_at", -1), ("_id", 1))),
    IndexSpec("definition_created", (("definition_id", 1), ("created_at", -1), ("_id", 1))),
    IndexSpec("next_fire_at_1", (("next_fire_at", 1),), sparse=True),
    IndexSpec("relay_at", (("relay_at", 1),), partial={"relay_at": {"$gte": 0}}),
)
# Indexes of earlier releases no query uses any more: dropped by `ensure_indexes` where present.
RETIRED_INDEXES = ("definition_id_1", "outbox.seq_1", "spawns.seq_1")


# --- what a commit writes --------------------------------------------------------------------------


@dataclass(frozen=True)
class StepRecord:
    """One applied step as a commit records it: its event, what it emitted and spawned, its trace."""

    event_id: str | None
    emits: Sequence[Emit] = ()
    spawns: Sequence[Spawn] = ()
    trace: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class CommitParts:
    """Everything a commit adds, built once and shared by the sync and async writes."""

    execution_id: str
    expected: int
    version: int
    promoted: dict[str, Any]
    data: str
    outbox: list[dict[str, Any]]
    spawns: list[dict[str, Any]]
    processed: list[str]
    traces: list[dict[str, Any]]
    timers: dict[str, float] | None  # the whole stored `timers` when the steps changed them
    next_fire_at: float | None
    relay_grace: float = RELAY_GRACE_SECONDS  # how long the committer holds its relay work

    @property
    def relays(self) -> bool:
        return bool(self.outbox or self.spawns)

    def outbox_entries(self) -> list[OutboxEntry]:
        return [parse_outbox_entry(self.execution_id, e) for e in self.outbox]

    def spawn_entries(self) -> list[SpawnEntry]:
        return [parse_spawn_entry(e) for e in self.spawns]


def promoted(exe: Execution) -> dict[str, Any]:
    """The fields of `data` a listing filters and sorts on, kept at the top level."""
    return {
        "definition_id": exe.definition_id,
        "status": exe.status.value,
        "parent_id": exe.parent_id,
        "created_at": exe.created_at,
        "updated_at": exe.updated_at,
    }


def require_step_fits(execution_id: str, entries: int) -> None:
    """StepTooLarge when one step emitted and spawned more entries than a step's seqs number."""
    if entries > SEQ_STRIDE:
        raise StepTooLarge(execution_id, entries, SEQ_STRIDE)


def _entries_of(version: int, record: StepRecord, source: Execution, at: float) -> tuple[list, list]:
    require_step_fits(source.id, len(record.emits) + len(record.spawns))
    base = version * SEQ_STRIDE
    outbox = [
        {"seq": base + n, "target_id": target, "event": event.model_dump_json(), "at": at}
        for n, (target, event) in enumerate(record.emits)
    ]
    spawns = [
        {
            "seq": base + len(record.emits) + n,
            "parent_id": source.id,
            "child_id": child,
            "root_path": root,
            "context": dict(context),
            "at": at,
        }
        for n, (child, root, context) in enumerate(record.spawns)
    ]
    return outbox, spawns


def due_from(fire_at: float) -> float:
    """The server time from which a timer is due: `fire_at` rounded up to the millisecond, the resolution of
    the server's clock (`$$NOW` is a millisecond date), so a timer is never taken for due early."""
    return math.ceil(fire_at * 1000) / 1000


def next_fire_at(timers: Mapping[str, float], fired: Iterable[str] = ()) -> float | None:
    """When the earliest timer whose event is not already waiting in the mailbox is due (`fired`: the
    paths of those that are)."""
    skipped = set(fired)
    earliest = min((at for path, at in timers.items() if path not in skipped), default=None)
    return None if earliest is None else due_from(earliest)


def commit_parts(
    exe: Execution,
    records: Sequence[StepRecord],
    *,
    expected: int,
    timers_changed: bool,
    fired_timer_paths: Iterable[str] = (),
    relay_grace: float = RELAY_GRACE_SECONDS,
) -> CommitParts:
    """`exe` after the steps of `records`, which started at version `expected`; it is stored at version
    `expected + len(records)` (one step: the seed's `+1`)."""
    version = expected + max(1, len(records))
    outbox: list[dict[str, Any]] = []
    spawns: list[dict[str, Any]] = []
    traces: list[dict[str, Any]] = []
    for n, record in enumerate(records):
        step_outbox, step_spawns = _entries_of(expected + n, record, exe, exe.updated_at)
        outbox += step_outbox
        spawns += step_spawns
        if record.trace is not None:
            traces.append({**record.trace, "index": expected + n})
    stored = exe.model_copy(update={"version": version})
    return CommitParts(
        execution_id=exe.id,
        expected=expected,
        version=version,
        promoted=promoted(exe),
        data=stored.model_dump_json(),
        outbox=outbox,
        spawns=spawns,
        processed=[r.event_id for r in records if r.event_id is not None],
        traces=traces,
        timers={enc(path): at for path, at in exe.timers.items()} if timers_changed else None,
        next_fire_at=next_fire_at(exe.timers, fired_timer_paths) if timers_changed else None,
        relay_grace=relay_grace,
    )


def claim_commit_parts(
    claim: Claim,
    exe: Execution,
    records: Sequence[StepRecord],
    applied: Sequence[Pending],
    timers_changed: bool,
) -> CommitParts:
    """What a claim's commit writes: the steps from the claimed version; `next_fire_at` skips timers whose
    events still wait in the mailbox (fired already, not applied in this batch); the committer holds the
    relay work for as long as its lease was, unless the claim found relay work already pending."""
    applied_ids = {p.id for p in applied}
    waiting = [p for p in claim.pending if p.id not in applied_ids]
    return commit_parts(
        exe,
        records,
        expected=claim.execution.version,
        timers_changed=timers_changed,
        fired_timer_paths=fired_timer_paths(waiting, exe.id, exe.timers),
        # a claim that found relay work pending leaves delivery to whoever holds it, so it holds nothing:
        # if that holder acknowledged meanwhile, this commit's entries are due for the background relay now
        relay_grace=claim.lease_until - claim.server_time if claim.relay_idle else 0.0,
    )


@dataclass(frozen=True)
class CommitWrite:
    """One commit as sent: the filter, the pipeline, and whether it creates (an upsert that inserts)."""

    execution_id: str
    expected: int
    version: int
    filter: dict[str, Any]
    pipeline: list[dict[str, Any]]
    size: int
    creates: bool = False


def _written_fields(parts: CommitParts, trace_max: int, dedupe_window: int) -> dict[str, Any]:
    fields: dict[str, Any] = {
        **{name: literal(value) for name, value in parts.promoted.items()},
        "version": parts.version,
        "data": literal(parts.data),
    }
    if parts.outbox:
        fields["outbox"] = _appended("outbox", parts.outbox)
    if parts.spawns:
        fields["spawns"] = _appended("spawns", parts.spawns)
    if parts.relays:
        fields["relay_at"] = {"$ifNull": ["$relay_at", now_plus(parts.relay_grace)]}
    if parts.processed:
        fields["processed"] = _appended("processed", parts.processed, dedupe_window)
    if parts.traces:
        fields["trace"] = _appended("trace", parts.traces, trace_max)
    if parts.timers is not None:
        fields["timers"] = literal(parts.timers)
        fields["next_fire_at"] = parts.next_fire_at
    return fields


def plan_commit(
    parts: CommitParts,
    trace_max: int,
    dedupe_window: int,
    *,
    claim: Claim | None = None,
    applied: Sequence[Pending] = (),
    failure: Failure | None = None,
) -> CommitWrite:
    """The CAS update of an existing execution: `{_id, version}`, and the lease's owner when the steps came
    from a claim, whose applied events leave the mailbox in the same update."""
    cas = {"_id": parts.execution_id, "version": parts.expected}
    stages: list[dict[str, Any]] = [{"$set": _written_fields(parts, trace_max, dedupe_window)}]
    if claim is not None:
        cas["lease.owner"] = claim.owner
        release, then = mailbox.settle_stages(applied, failure)
        stages[0]["$set"].update(release)
        stages.append({"$set": then})
    size = ensure_fits(parts.execution_id, {"q": cas, "u": stages})
    return CommitWrite(parts.execution_id, parts.expected, parts.version, cas, stages, size)


def plan_create(parts: CommitParts, pending: Sequence[Mapping[str, Any]], chart: str) -> CommitWrite:
    """A new execution: an upsert whose filter no stored execution can match (`version: -1`), so it inserts,
    or fails on the duplicate `_id` when the execution exists — with `$$NOW` available to the mailbox, which
    a plain insert would not have. Every field is seeded, so later pipelines find their arrays."""
    fields = {
        **{name: literal(value) for name, value in parts.promoted.items()},
        "version": parts.version,
        "data": literal(parts.data),
        "outbox": literal(parts.outbox),
        "spawns": literal(parts.spawns),
        "processed": literal(parts.processed),
        "timers": literal(parts.timers or {}),
        "next_fire_at": parts.next_fire_at,
        "trace": literal(parts.traces),
        "relay_at": now_plus(parts.relay_grace) if parts.relays else None,
        **mailbox.seed(chart, pending),
    }
    create_filter = {"_id": parts.execution_id, "version": -1}
    stages = [{"$set": fields}]
    size = ensure_fits(parts.execution_id, {"q": create_filter, "u": stages})
    return CommitWrite(parts.execution_id, 0, parts.version, create_filter, stages, size, creates=True)


def created_document(
    parts: CommitParts, entries: Sequence[Mapping[str, Any]], chart: str, now: float
) -> dict[str, Any]:
    """The document a creation leaves, built in Python: what `plan_create`'s pipeline makes on a server
    whose clock reads `now` (benchmarks insert it directly)."""
    document: dict[str, Any] = {
        "_id": parts.execution_id,
        **copy.deepcopy(parts.promoted),
        "version": parts.version,
        "data": parts.data,
        "outbox": copy.deepcopy(parts.outbox),
        "spawns": copy.deepcopy(parts.spawns),
        "processed": list(parts.processed),
        "timers": dict(parts.timers or {}),
        "next_fire_at": parts.next_fire_at,
        "trace": copy.deepcopy(parts.traces),
        "relay_at": now + parts.relay_grace if parts.relays else None,
        "chart": chart,
        "inbox": copy.deepcopy(list(entries)),
        "inbox_bytes": sum(int(e["size"]) for e in entries),
        "inbox_at": now if entries else None,
        "lease": None,
        "attempts": 0,
        "last_error": None,
        "parked": None,
    }
    ensure_fits(parts.execution_id, document)
    return document


def creation(exe: Execution, events: Sequence[Event], now: float) -> CommitWrite:
    """A version-0 execution with `events` already in its mailbox (a start event, for one)."""
    parts = commit_parts(exe, (), expected=0, timers_changed=True)
    chart = mailbox.chart_key(exe.definition_id, exe.definition_version)
    return plan_create(parts, [mailbox.entry(event, None, now) for event in events], chart)


def child_creation(entry: SpawnEntry, now: float) -> CommitWrite:
    """A region's child execution, created with its start event already in its mailbox."""
    child = ChildSeed.model_validate(entry.context).to_execution(entry, now)
    return creation(child, [start_event(child.id, now)], now)


def encoded_size(payload: Mapping[str, Any]) -> int:
    import bson

    return len(bson.encode(payload))


def ensure_fits(execution_id: str, payload: Mapping[str, Any]) -> int:
    """The payload's BSON size; ExecutionTooLarge when it reaches SAFE_COMMIT_BYTES."""
    size = encoded_size(payload)
    if size >= SAFE_COMMIT_BYTES:
        raise ExecutionTooLarge(execution_id, size, SAFE_COMMIT_BYTES)
    return size


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


def load_for_event_pipeline(execution_id: str, event_id: str) -> list[dict[str, Any]]:
    """`data` plus a server-side membership test: the processed window itself never leaves the server."""
    return [
        {"$match": {"_id": execution_id}},
        {"$project": {"data": 1, "hit": {"$in": [literal(event_id), _array("processed")]}}},
    ]


def parse_load_for_event(documents: Sequence[Mapping[str, Any]]) -> tuple[Execution | None, bool]:
    if not documents:
        return None, False
    return parse_execution(documents[0]), bool(documents[0].get("hit"))


def processed_filter(execution_id: str, event_id: str) -> dict[str, Any]:
    return {"_id": execution_id, "processed": event_id}


def parse_commit_outcome(document: Mapping[str, Any] | None) -> tuple[int | None, str | None]:
    """What resolves a commit whose reply was lost: the stored version and the lease's owner now."""
    if document is None:
        return None, None
    return document.get("version"), (document.get("lease") or {}).get("owner")


def parse_trace(document: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return list(document.get("trace", [])) if document is not None else []


def append_trace_update(step: Mapping[str, Any], trace_max: int) -> dict[str, Any]:
    return {"$push": {"trace": {"$each": [dict(step)], "$slice": -trace_max}}}


def trace_step(trace: Mapping[str, Any], index: int) -> dict[str, Any]:
    return {**trace, "index": index}


def counter_update(count: int) -> dict[str, Any]:
    return {"$inc": {"n": count}}


def first_of_block(counter_doc: Mapping[str, Any], count: int) -> int:
    """The first number of the block a `$inc` by `count` reserved (the document is the one after it)."""
    return int(counter_doc["n"]) - count + 1


# --- listing ---------------------------------------------------------------------------------------

LIST_PROJECTION = ("version", "data")


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
        only(*LIST_PROJECTION),
        sort=(("created_at", -1), ("_id", 1)),
        skip=offset,
        limit=require_positive("limit", limit) + 1,
    )


def parse_page(documents: Sequence[Mapping[str, Any]], offset: int, limit: int) -> ExecutionPage:
    items = [
        ExecutionSummary.from_data(json.loads(document["data"]), document.get("version", 0))
        for document in documents[:limit]
    ]
    more = len(documents) > limit
    return ExecutionPage(items=items, next_cursor=encode_offset(offset + limit) if more else None)


# --- relays ----------------------------------------------------------------------------------------


def parse_outbox_entry(execution_id: str, entry: Mapping[str, Any]) -> OutboxEntry:
    return OutboxEntry(
        entry["seq"], entry["target_id"], Event.model_validate_json(entry["event"]), execution_id
    )


def parse_spawn_entry(entry: Mapping[str, Any]) -> SpawnEntry:
    return SpawnEntry(
        entry["seq"], entry["parent_id"], entry["child_id"], entry["root_path"], dict(entry["context"])
    )


@dataclass(frozen=True)
class RelayWork:
    """One execution's pending outbox events and spawns, in seq order, for the relay that holds them."""

    execution_id: str
    outbox: list[OutboxEntry] = field(default_factory=list)
    spawns: list[SpawnEntry] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.outbox or self.spawns)


def parse_relay_work(document: Mapping[str, Any]) -> RelayWork:
    execution_id = document["_id"]
    return RelayWork(
        execution_id,
        sorted(
            (parse_outbox_entry(execution_id, e) for e in document.get("outbox") or ()), key=lambda e: e.seq
        ),
        sorted((parse_spawn_entry(e) for e in document.get("spawns") or ()), key=lambda s: s.seq),
    )


def relay_claim(lease: float, bound: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Take over relay work left longer than its holder's time (a crashed or slow worker's): the execution
    whose `relay_at` passed longest ago on the server's clock, held for `lease` from now."""
    return (
        {"relay_at": {"$gte": 0, "$lte": bound}, "$expr": {"$lte": ["$relay_at", NOW]}},
        [{"$set": {"relay_at": now_plus(lease)}}],
    )


def pending_relays_find(limit: int) -> Find:
    """Executions holding relay work, oldest work first (inspection: `pending_outbox`, `pending_spawns`)."""
    return Find({"relay_at": {"$gte": 0}}, only("outbox", "spawns"), sort=(("relay_at", 1),), limit=limit)


def parse_pending_outbox(documents: Iterable[Mapping[str, Any]], limit: int) -> list[OutboxEntry]:
    return [entry for document in documents for entry in parse_relay_work(document).outbox][:limit]


def parse_pending_spawns(documents: Iterable[Mapping[str, Any]], limit: int) -> list[SpawnEntry]:
    return [entry for document in documents for entry in parse_relay_work(document).spawns][:limit]


RELAY_SORT = (("relay_at", 1),)
RELAY_PROJECTION = ("outbox", "spawns")


def relay_ack(
    execution_id: str, outbox_seqs: Sequence[int], spawn_seqs: Sequence[int], retry_in: float
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Remove what was delivered; what is left (a target that does not exist yet, a full mailbox) is due
    again after `retry_in`, and `relay_at` is cleared once nothing is left."""

    def without(field_name: str, seqs: Sequence[int]) -> dict[str, Any]:
        return {
            "$filter": {
                "input": _array(field_name),
                "as": "e",
                "cond": {"$eq": [{"$in": ["$$e.seq", literal(list(seqs))]}, False]},
            }
        }

    left = {"$add": [{"$size": _array("outbox")}, {"$size": _array("spawns")}]}
    return (
        {"_id": execution_id},
        [
            {"$set": {"outbox": without("outbox", outbox_seqs), "spawns": without("spawns", spawn_seqs)}},
            {"$set": {"relay_at": {"$cond": [{"$gt": [left, 0]}, now_plus(retry_in), None]}}},
        ],
    )


# --- timers ----------------------------------------------------------------------------------------


def due_find(bound: float, limit: int) -> Find:
    """Executions whose earliest unfired timer has passed on the server's clock, from the sparse
    `next_fire_at` index: the sweep costs what is due, not every execution with a timer."""
    return Find(
        {"next_fire_at": {"$gte": 0, "$lte": bound}, "$expr": {"$lte": ["$next_fire_at", NOW]}},
        only("timers", "next_fire_at"),
        sort=(("next_fire_at", 1),),
        limit=limit,
    )


def _firing_order(item: tuple[str, float]) -> tuple[float, int, str]:
    """Earliest first; of timers due at the same instant, the outer state's first."""
    path, at = item
    return at, path.count("."), path


def parse_due(documents: Iterable[Mapping[str, Any]]) -> list[DueTimer]:
    """Each document's earliest timer, with the timers as read and where `next_fire_at` moves after it."""
    due: list[DueTimer] = []
    for document in documents:
        stored = dict(document.get("timers") or {})
        ordered = sorted(((dec(key), float(at)) for key, at in stored.items()), key=_firing_order)
        if not ordered:
            continue
        (path, fire_at), rest = ordered[0], ordered[1:]
        due.append(DueTimer(document["_id"], path, fire_at, stored, due_from(rest[0][1]) if rest else None))
    return sorted(due, key=lambda t: (t.fire_at, t.execution_id))


def fire(due: DueTimer, now: float) -> mailbox.Write:
    event = timer_event(due.execution_id, due.path, due.fire_at, now)
    return mailbox.fire_write(
        due.execution_id,
        due.stored_timers,
        mailbox.entry(event, None, now),
        due_from(due.fire_at),
        due.next_fire_at,
    )


def fired_timer_paths(
    pending: Iterable[Pending], execution_id: str, timers: Mapping[str, float]
) -> list[str]:
    """Paths of `timers` whose events already wait in the mailbox (not to be fired again)."""
    waiting = {p.id for p in pending}
    return [path for path, at in timers.items() if timer_event_id(execution_id, path, at) in waiting]
