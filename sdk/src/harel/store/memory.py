"""The embedded in-memory backend (`memory://`): MemoryStore and, over the same documents, MemoryTransport.

It keeps each execution as the very document MongoStore would store (built by `harel.executions`)
and changes it under one lock, so it has MongoStore's semantics exactly:
the version CAS (a stale commit raises StoreConflict and changes nothing, `exe.version` included),
all-or-nothing commits, the mailbox with its leases fenced by an owner token, the dedupe window, the trace
ring, relay work held by one relay at a time, timers fired into the mailbox, newest-first listings and
ExecutionTooLarge at the same size. Its clock stands for the server's.

Nothing survives the process. Every value handed in or out is copied, so a caller mutating what it passed
or got back cannot change what is stored.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from harel.errors import LeaseLost, StoreConflict
from harel.executions import commits, fields, queries, records, replies, writes
from harel.executions.fields import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX
from harel.executions.records import Claim, Emit, Failure, Pending, Spawn
from harel.model import (
    ChildSeed,
    DueTimer,
    Event,
    Execution,
    ExecutionPage,
    ExecutionStatus,
    OutboxEntry,
    SpawnEntry,
    TimerOp,
    decode_offset,
    start_event,
    timer_event,
)

Document = dict[str, Any]


class MemoryDatabase:
    """The documents of one in-memory deployment, the lock every change takes, and the deployment's clock."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.lock = threading.Condition()
        self.documents: dict[str, Document] = {}
        self.counters: dict[str, int] = {}


def _is_due(value: Any, now: float) -> bool:
    return value is not None and value <= now


def inbox_due_unless_busy(document: Document, now: float) -> Any:
    """What `writes`' send and fire set `inbox_at` to: now for an idle execution, unchanged otherwise."""
    if document.get("parked") is not None:
        return None
    current = document.get("inbox_at")
    return now if current is None else current


def settle(document: Document, applied: Sequence[Pending], failure: Failure | None, now: float) -> None:
    """`writes.settle_stages`, in Python."""
    ids = {p.id for p in applied}
    document["lease"] = None
    document["inbox"] = [e for e in document.get("inbox", []) if e["id"] not in ids]
    document["inbox_bytes"] = sum(int(e["size"]) for e in document["inbox"])
    if failure is None:
        document["attempts"] = 0
        document["last_error"] = None
        document["inbox_at"] = now if document["inbox"] else None
        return
    error = failure.error[: fields.ERROR_LIMIT]
    document["attempts"] = failure.attempts
    document["last_error"] = error
    if failure.park:
        document["parked"] = {
            "event_id": failure.event.id,
            "name": failure.event.event.name,
            "error": error,
            "attempts": failure.attempts,
            "at": now,
        }
        document["inbox_at"] = None
    else:
        document["inbox_at"] = now + failure.retry_in


def _apply_parts(
    document: Document, parts: commits.CommitParts, now: float, trace_max: int, dedupe_window: int
) -> None:
    document.update(copy.deepcopy(parts.promoted))
    document["version"] = parts.version
    document["data"] = parts.data
    document["outbox"] = [*document.get("outbox", []), *copy.deepcopy(parts.outbox)]
    document["spawns"] = [*document.get("spawns", []), *copy.deepcopy(parts.spawns)]
    if parts.relays and document.get("relay_at") is None:
        document["relay_at"] = now + parts.relay_grace
    if parts.processed:
        document["processed"] = [*document.get("processed", []), *parts.processed][-dedupe_window:]
    if parts.traces:
        document["trace"] = [*document.get("trace", []), *copy.deepcopy(parts.traces)][-trace_max:]
    if parts.timers is not None:
        document["timers"] = dict(parts.timers)
        document["next_fire_at"] = parts.next_fire_at


class MemoryStore:
    """Thread-safe in-process ExecutionStore; `database` is shared with a MemoryTransport."""

    def __init__(
        self,
        database: MemoryDatabase | None = None,
        *,
        trace_max: int = DEFAULT_TRACE_MAX,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
    ) -> None:
        self.database = database or MemoryDatabase()
        self.trace_max = fields.require_positive("trace_max", trace_max)
        self.dedupe_window = fields.require_positive("dedupe_window", dedupe_window)

    @property
    def _documents(self) -> dict[str, Document]:
        return self.database.documents

    def _now(self) -> float:
        return self.database.clock()

    # --- the write path ----------------------------------------------------------------------------

    def _insert(self, parts: commits.CommitParts, entries: Sequence[Document], chart: str) -> None:
        if parts.execution_id in self._documents:
            raise StoreConflict(parts.execution_id, 0, self._documents[parts.execution_id].get("version"))
        self._documents[parts.execution_id] = commits.created_document(parts, entries, chart, self._now())
        self.database.lock.notify_all()

    def _current(self, parts: commits.CommitParts, owner: str | None = None) -> Document:
        current = self._documents.get(parts.execution_id)
        if current is None or current.get("version") != parts.expected:
            raise StoreConflict(
                parts.execution_id, parts.expected, current.get("version") if current else None
            )
        if owner is not None and (current.get("lease") or {}).get("owner") != owner:
            raise LeaseLost(parts.execution_id, parts.expected, (current.get("lease") or {}).get("owner"))
        return current

    def commit(
        self,
        exe: Execution,
        emits: Sequence[Emit] = (),
        spawns: Sequence[Spawn] = (),
        timers: Sequence[TimerOp] = (),
        processed_event_id: str | None = None,
        trace: dict[str, Any] | None = None,
    ) -> None:
        record = records.StepRecord(processed_event_id, emits, spawns, trace)
        with self.database.lock:
            parts = commits.commit_parts(
                exe, [record], expected=exe.version, timers_changed=bool(timers) or exe.version == 0
            )
            if exe.version == 0:
                self._insert(parts, (), fields.chart_key(exe.definition_id, exe.definition_version))
            else:
                write = commits.plan_commit(parts, self.trace_max, self.dedupe_window)
                current = copy.deepcopy(self._current(parts))
                _apply_parts(current, parts, self._now(), self.trace_max, self.dedupe_window)
                commits.ensure_fits(exe.id, {"u": write.write.update})
                self._documents[exe.id] = current
        exe.version = parts.version

    def create(self, exe: Execution, events: Sequence[Event] = (), *, now: float) -> bool:
        parts = commits.commit_parts(exe, (), expected=0, timers_changed=True)
        entries = [writes.entry(event, None, now) for event in events]
        with self.database.lock:
            try:
                self._insert(parts, entries, fields.chart_key(exe.definition_id, exe.definition_version))
            except StoreConflict:
                return False
        return True

    def commit_claim(
        self,
        claim: Claim,
        exe: Execution,
        records: Sequence[records.StepRecord],
        *,
        applied: Sequence[Pending],
        failure: Failure | None = None,
        timers_changed: bool,
    ) -> commits.CommitParts:
        parts = commits.claim_commit_parts(claim, exe, records, applied, timers_changed)
        commits.plan_commit(
            parts, self.trace_max, self.dedupe_window, claim=claim, applied=applied, failure=failure
        )
        with self.database.lock:
            current = copy.deepcopy(self._current(parts, claim.owner))
            now = self._now()
            _apply_parts(current, parts, now, self.trace_max, self.dedupe_window)
            settle(current, applied, failure, now)
            self._documents[exe.id] = current
            self.database.lock.notify_all()
        return parts

    def commit_outcome(self, execution_id: str) -> tuple[int | None, str | None]:
        with self.database.lock:
            return replies.parse_commit_outcome(copy.deepcopy(self._documents.get(execution_id)))

    # --- reads -------------------------------------------------------------------------------------

    def load(self, execution_id: str) -> Execution | None:
        with self.database.lock:
            return replies.parse_execution(self._documents.get(execution_id))

    def load_for_event(self, execution_id: str, event_id: str) -> tuple[Execution | None, bool]:
        with self.database.lock:
            document = self._documents.get(execution_id)
            if document is None:
                return None, False
            return replies.parse_execution(document), event_id in document.get("processed", [])

    def is_processed(self, execution_id: str, event_id: str) -> bool:
        with self.database.lock:
            return event_id in self._documents.get(execution_id, {}).get("processed", [])

    def document(self, execution_id: str) -> dict[str, Any] | None:
        """The execution in MongoStore's document shape (for `harel status --document`)."""
        with self.database.lock:
            return copy.deepcopy(self._documents.get(execution_id))

    def list_executions(
        self,
        *,
        status: ExecutionStatus | str | None = None,
        definition_id: str | None = None,
        roots_only: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ExecutionPage:
        offset = decode_offset(cursor)
        listing = queries.list_find(status, definition_id, roots_only, offset, limit)
        wanted = {k: v for k, v in listing.filter.items() if k != "data"}
        with self.database.lock:
            found = [
                d
                for d in self._documents.values()
                if "data" in d and all(d.get(k) == v for k, v in wanted.items())
            ]
        found.sort(key=lambda d: d["_id"])
        found.sort(key=lambda d: d.get("created_at", 0.0), reverse=True)
        return replies.parse_page(found[offset : offset + listing.limit], offset, limit)

    # --- relays ------------------------------------------------------------------------------------

    def _holding_relays(self) -> list[Document]:
        with self.database.lock:
            holding = [copy.deepcopy(d) for d in self._documents.values() if d.get("relay_at") is not None]
        return sorted(holding, key=lambda d: d["relay_at"])

    def pending_outbox(self, limit: int = 100) -> list[OutboxEntry]:
        return replies.parse_pending_outbox(self._holding_relays(), limit)

    def ack_outbox(self, execution_id: str, seq: int) -> None:
        self.ack_relay(execution_id, [seq], [], retry_in=fields.RELAY_GRACE_SECONDS)

    def pending_spawns(self, limit: int = 100) -> list[SpawnEntry]:
        return replies.parse_pending_spawns(self._holding_relays(), limit)

    def ack_spawn(self, execution_id: str, seq: int) -> None:
        self.ack_relay(execution_id, [], [seq], retry_in=fields.RELAY_GRACE_SECONDS)

    def create_children(self, entries: Sequence[SpawnEntry], *, now: float) -> list[str]:
        existing = []
        for entry in entries:
            child = ChildSeed.model_validate(entry.context).to_execution(entry, now)
            if not self.create(child, [start_event(child.id, now)], now=now):
                existing.append(child.id)
        return existing

    def take_relay_work(self, lease: float, bound: float) -> records.RelayWork | None:
        with self.database.lock:
            now = self._now()
            due = [d for d in self._documents.values() if _is_due(d.get("relay_at"), min(now, bound))]
            if not due:
                return None
            document = min(due, key=lambda d: d["relay_at"])
            document["relay_at"] = now + lease
            return replies.parse_relay_work(copy.deepcopy(document))

    def ack_relay(
        self, execution_id: str, outbox_seqs: Sequence[int], spawn_seqs: Sequence[int], *, retry_in: float
    ) -> None:
        with self.database.lock:
            document = self._documents.get(execution_id)
            if document is None:
                return
            document["outbox"] = [e for e in document.get("outbox", []) if e["seq"] not in set(outbox_seqs)]
            document["spawns"] = [e for e in document.get("spawns", []) if e["seq"] not in set(spawn_seqs)]
            left = document["outbox"] or document["spawns"]
            document["relay_at"] = self._now() + retry_in if left else None

    # --- timers ------------------------------------------------------------------------------------

    def due_timers(self, bound: float, limit: int = 100) -> list[DueTimer]:
        with self.database.lock:
            now = min(self._now(), bound)
            due = [copy.deepcopy(d) for d in self._documents.values() if _is_due(d.get("next_fire_at"), now)]
        return replies.parse_due(sorted(due, key=lambda d: d["next_fire_at"])[:limit])

    def fire_timer(self, due: DueTimer, *, now: float) -> bool:
        event = timer_event(due.execution_id, due.path, due.fire_at, now)
        new = writes.entry(event, None, now)
        with self.database.lock:
            document = self._documents.get(due.execution_id)
            if (
                document is None
                or document.get("timers") != due.stored_timers
                or fields.due_from(due.fire_at) > self._now()
            ):
                return False
            waiting = {e["id"] for e in document.get("inbox", [])}
            if new["id"] not in waiting and new["id"] not in document.get("processed", []):
                document["inbox"] = [*document.get("inbox", []), new]
                document["inbox_bytes"] = sum(int(e["size"]) for e in document["inbox"])
            document["next_fire_at"] = due.next_fire_at
            document["inbox_at"] = inbox_due_unless_busy(document, self._now())
            self.database.lock.notify_all()
        return True

    # --- trace -------------------------------------------------------------------------------------

    def _allocate(self, counter: str, count: int) -> int:
        counters = self.database.counters
        counters[counter] = counters.get(counter, 0) + count
        return counters[counter] - count + 1

    def append_trace(self, execution_id: str, entry: dict[str, Any]) -> None:
        """Append outside a commit; like MongoStore, an unknown id gets a trace-only document."""
        with self.database.lock:
            index = (
                entry["index"]
                if "index" in entry
                else self._allocate(fields.trace_counter(execution_id), 1) - 1
            )
            step = copy.deepcopy(writes.trace_step(entry, index))
            document = self._documents.setdefault(execution_id, {"_id": execution_id})
            document["trace"] = [*document.get("trace", []), step][-self.trace_max :]

    def read_trace(self, execution_id: str) -> list[dict[str, Any]]:
        with self.database.lock:
            return copy.deepcopy(replies.parse_trace(self._documents.get(execution_id)))

    # --- lifecycle ---------------------------------------------------------------------------------

    def ensure_indexes(self) -> None:
        """Nothing to index in memory; present so every store starts the same way."""

    def close(self) -> None:
        """Nothing to release; the documents stay readable until the store is dropped."""
