"""MemoryStore: the embedded ExecutionStore (`memory://`), for tests, demos and single-process use.

It keeps each execution as the very document MongoStore would store (`harel.store._documents`) and
changes it under one lock, so it has MongoStore's semantics exactly: the version CAS (a stale commit
raises StoreConflict and changes nothing, `exe.version` included), all-or-nothing commits, the dedupe
window (the last `dedupe_window` processed event ids; an older redelivery is stepped again), the trace
ring of `trace_max` steps, the over-fetch listing cursor, seqs shared by outbox and spawns, value-guarded
timer deletion with `next_fire_at` left for the next commit, and ExecutionTooLarge at the same size.

Nothing survives the process. Every value handed in or out is copied, so a caller mutating what it
passed or got back cannot change what is stored.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

from harel.model import DueTimer, Execution, ExecutionPage, ExecutionStatus, OutboxEntry, SpawnEntry, TimerOp
from harel.store import _documents as doc
from harel.store.base import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX, Emit, Spawn


class MemoryStore:
    """Thread-safe in-process ExecutionStore."""

    def __init__(
        self, *, trace_max: int = DEFAULT_TRACE_MAX, dedupe_window: int = DEFAULT_DEDUPE_WINDOW
    ) -> None:
        self.trace_max = doc.require_positive("trace_max", trace_max)
        self.dedupe_window = doc.require_positive("dedupe_window", dedupe_window)
        self._lock = threading.Lock()
        self._documents: dict[str, dict[str, Any]] = {}
        self._counters: dict[str, int] = {}

    def _allocate(self, counter: str, count: int) -> int:
        self._counters[counter] = self._counters.get(counter, 0) + count
        return self._counters[counter] - count + 1

    # --- the write path ----------------------------------------------------------------------------

    def commit(
        self,
        exe: Execution,
        emits: Sequence[Emit] = (),
        spawns: Sequence[Spawn] = (),
        timers: Sequence[TimerOp] = (),
        processed_event_id: str | None = None,
        trace: dict[str, Any] | None = None,
    ) -> None:
        with self._lock:
            count = doc.seq_count(emits, spawns)
            first_seq = self._allocate(doc.SEQ_COUNTER, count) if count else 0
            parts = copy.deepcopy(
                doc.commit_parts(exe, first_seq, emits, spawns, timers, processed_event_id, trace)
            )
            write = doc.plan_commit(exe, parts, self.trace_max, self.dedupe_window)
            current = self._documents.get(exe.id)
            if write.creates:
                if current is not None:
                    raise doc.conflict(write, current)
                self._documents[exe.id] = write.document
            else:
                if current is None or current.get("version") != write.expected:
                    raise doc.conflict(write, current)
                self._documents[exe.id] = self._advanced(current, exe, parts)
        exe.version = write.version

    def _advanced(self, current: dict[str, Any], exe: Execution, parts: doc.CommitParts) -> dict[str, Any]:
        """The document after the commit, built beside the stored one so a failure changes nothing."""
        document = {
            **current,
            "definition_id": exe.definition_id,
            "version": exe.version + 1,
            "data": parts.data,
            "outbox": [*current.get("outbox", []), *parts.outbox],
            "spawns": [*current.get("spawns", []), *parts.spawns],
            "timers": dict(current.get("timers", {})),
        }
        for path, fire_at in parts.timers.items():
            if fire_at is None:
                document["timers"].pop(doc.enc(path), None)
            else:
                document["timers"][doc.enc(path)] = fire_at
        if parts.processed_event_id is not None:
            processed = [*current.get("processed", []), parts.processed_event_id]
            document["processed"] = processed[-self.dedupe_window :]
        if parts.trace is not None:
            document["trace"] = [*current.get("trace", []), parts.trace][-self.trace_max :]
        if exe.next_fire_at is None:
            document.pop("next_fire_at", None)
        else:
            document["next_fire_at"] = exe.next_fire_at
        return document

    # --- reads -------------------------------------------------------------------------------------

    def load(self, execution_id: str) -> Execution | None:
        with self._lock:
            return doc.parse_execution(self._documents.get(execution_id))

    def load_for_event(self, execution_id: str, event_id: str) -> tuple[Execution | None, bool]:
        with self._lock:
            document = self._documents.get(execution_id)
            if document is None:
                return None, False
            return doc.parse_execution(document), event_id in document.get("processed", [])

    def is_processed(self, execution_id: str, event_id: str) -> bool:
        with self._lock:
            return event_id in self._documents.get(execution_id, {}).get("processed", [])

    def document(self, execution_id: str) -> dict[str, Any] | None:
        """The execution in MongoStore's document shape (for `harel status --document`)."""
        with self._lock:
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
        collector = doc.PageCollector(cursor, limit, status, definition_id, roots_only)
        with self._lock:
            ids = sorted(
                key
                for key, document in self._documents.items()
                if definition_id is None or document.get("definition_id") == definition_id
            )
            for execution_id in ids[collector.offset :]:
                if collector.offer(self._documents[execution_id]):
                    break
        return collector.page()

    # --- relays ------------------------------------------------------------------------------------

    def _holding(self, array: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(d) for d in self._documents.values() if d.get(array)]

    def pending_outbox(self, limit: int = 100) -> list[OutboxEntry]:
        with self._lock:
            return doc.parse_outbox(self._holding("outbox"), limit)

    def ack_outbox(self, seq: int) -> None:
        with self._lock:
            self._pull("outbox", seq)

    def pending_spawns(self, limit: int = 100) -> list[SpawnEntry]:
        with self._lock:
            return doc.parse_spawns(self._holding("spawns"), limit)

    def ack_spawn(self, seq: int) -> None:
        with self._lock:
            self._pull("spawns", seq)

    def _pull(self, array: str, seq: int) -> None:
        for execution_id, document in self._documents.items():
            entries = document.get(array, [])
            if any(entry["seq"] == seq for entry in entries):
                kept = [entry for entry in entries if entry["seq"] != seq]
                self._documents[execution_id] = {**document, array: kept}
                return

    # --- timers ------------------------------------------------------------------------------------

    def due_timers(self, now: float, limit: int = 100) -> list[DueTimer]:
        with self._lock:
            due = sorted(
                (d for d in self._documents.values() if d.get("next_fire_at", now + 1) <= now),
                key=lambda d: d["next_fire_at"],
            )
            return doc.parse_due(due[:limit], now, limit)

    def next_timer_at(self) -> float | None:
        with self._lock:
            armed = [d["next_fire_at"] for d in self._documents.values() if "next_fire_at" in d]
        return min(armed) if armed else None

    def delete_timer(self, execution_id: str, path: str, fire_at: float) -> None:
        with self._lock:
            document = self._documents.get(execution_id)
            key = doc.enc(path)
            if document is None or document.get("timers", {}).get(key) != fire_at:
                return
            timers = {k: v for k, v in document["timers"].items() if k != key}
            self._documents[execution_id] = {**document, "timers": timers}

    # --- trace -------------------------------------------------------------------------------------

    def append_trace(self, execution_id: str, entry: dict[str, Any]) -> None:
        """Append outside a commit; like MongoStore, an unknown id gets a trace-only document."""
        with self._lock:
            index = (
                entry["index"] if "index" in entry else self._allocate(doc.trace_counter(execution_id), 1) - 1
            )
            step = copy.deepcopy(doc.trace_step(entry, index))
            document = self._documents.get(execution_id, {"_id": execution_id})
            trace = [*document.get("trace", []), step][-self.trace_max :]
            self._documents[execution_id] = {**document, "trace": trace}

    def read_trace(self, execution_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(doc.parse_trace(self._documents.get(execution_id)))

    # --- lifecycle ---------------------------------------------------------------------------------

    def ensure_indexes(self) -> None:
        """Nothing to index in memory; present so every store starts the same way."""

    def close(self) -> None:
        """Nothing to release; the documents stay readable until the store is dropped."""
