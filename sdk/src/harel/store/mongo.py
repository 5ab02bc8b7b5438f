"""MongoStore: every execution in one MongoDB document, every commit one atomic `update_one`.

The document model is in `harel.store._documents`. The design in short:

- **One document, one update.** An execution's snapshot (`data`), its outbox, spawn intents, dedupe
  window, timers and trace ring live in one document, so a commit — the advance and everything it
  enqueues — is a single-document update, atomic on any MongoDB deployment. The update carries the CAS
  filter `{_id, version}`: a writer that loaded an older version matches nothing and gets StoreConflict
  (with the version it found); the stored document is left exactly as it was and so is `exe.version`.
- **Version 0 creates.** A commit at version 0 inserts the whole document; a concurrent create of the
  same id loses on the duplicate `_id` and gets StoreConflict.
- **Partial writes, projected reads.** A commit sends `$set` (data, version, definition_id, timer keys,
  next_fire_at), `$push` (outbox, spawns, the dedupe window and the trace ring) and `$unset` (cancelled
  timers) — never the document. `load` fetches only `data`; relays and the sweep fetch only their array
  or sub-document.
- **Counters.** Outbox and spawn seqs come from one counter document (`counters`, `_id: "seq"`): a commit
  that emits or spawns makes one `find_one_and_update` for the whole block, a commit that does neither
  makes none. Seqs are unique and increasing, not gapless: a block drawn by a commit that then loses its
  CAS is simply skipped. A commit's trace step is indexed by its step number (the version it starts
  from); `append_trace` keeps a per-execution counter `trace:<id>` for entries that carry no index.
- **Dedupe window.** `processed` is pushed with `$slice: -dedupe_window` (default 1000) rather than
  `$addToSet`, which cannot be bounded and would let the document grow towards 16 MiB. It stays a set:
  the worker commits an event only after finding it unprocessed at the version its CAS names, so a
  concurrent duplicate loses the CAS instead of adding a second copy. An event redelivered after
  `dedupe_window` newer events of the same execution were processed is no longer recognised and is
  stepped again; redeliveries lag by a lease timeout, so the window only has to outlast the events one
  execution handles in that time.
- **Timers.** `timers` maps an encoded node path to its fire time. The top-level `next_fire_at` (the
  execution's earliest timer) is set in the same update and unset when none is armed; its sparse index
  makes `due_timers` visit only documents with a timer due. `delete_timer` is value-guarded and leaves
  `next_fire_at` alone: the commit of the timer event recomputes it, and until then the sweep reads that
  document once more and finds nothing due in it.
- **Size.** A commit whose payload reaches 15 MiB raises ExecutionTooLarge before anything is sent; the
  driver's DocumentTooLarge and the server's BSONObjectTooLarge map to the same error.

The client is injected and duck-typed (PyMongo, or mongomock in tests); PyMongo is imported only for
DuplicateKeyError and ReturnDocument.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harel.model import DueTimer, Execution, ExecutionPage, ExecutionStatus, OutboxEntry, SpawnEntry, TimerOp
from harel.store import _documents as doc
from harel.store._collections import MongoCollections
from harel.store.base import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX, Emit, Spawn


class MongoStore(MongoCollections):
    """ExecutionStore on MongoDB: collections `executions` and `counters` under `db_name`."""

    @classmethod
    def from_url(
        cls,
        url: str,
        db_name: str = "harel",
        *,
        trace_max: int = DEFAULT_TRACE_MAX,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
        **options: Any,
    ) -> MongoStore:
        """A store on a client from `harel.connection.connect`: safe defaults (majority writes and reads,
        primary reads, retryable writes), returned once the deployment answers a ping (retried until
        the connect deadline). `options` go to `connect`; start-up checks are the caller's (`check`)."""
        from harel.connection import connect

        return cls(connect(url, **options), db_name, trace_max=trace_max, dedupe_window=dedupe_window)

    def _allocate(self, counter: str, count: int) -> int:
        found = self._counters.find_one_and_update(
            {"_id": counter}, doc.counter_update(count), upsert=True, return_document=self._after
        )
        return doc.first_of_block(found, count)

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
        count = doc.seq_count(emits, spawns)
        first_seq = self._allocate(doc.SEQ_COUNTER, count) if count else 0
        parts = doc.commit_parts(exe, first_seq, emits, spawns, timers, processed_event_id, trace)
        write = doc.plan_commit(exe, parts, self.trace_max, self.dedupe_window)
        with doc.too_large_as_typed(write):
            if write.creates:
                try:
                    self._executions.insert_one(write.document)
                except self._duplicate_key:
                    self._raise_conflict(write)
            elif self._executions.update_one(write.cas_filter, write.update).matched_count != 1:
                self._raise_conflict(write)
        exe.version = write.version

    def _raise_conflict(self, write: doc.CommitWrite) -> None:
        found = self._executions.find_one({"_id": write.execution_id}, doc.only("version"))
        raise doc.conflict(write, found)

    # --- reads -------------------------------------------------------------------------------------

    def load(self, execution_id: str) -> Execution | None:
        return doc.parse_execution(self._executions.find_one({"_id": execution_id}, doc.only("data")))

    def load_for_event(self, execution_id: str, event_id: str) -> tuple[Execution | None, bool]:
        found = list(self._executions.aggregate(doc.load_for_event_pipeline(execution_id, event_id)))
        return doc.parse_load_for_event(found)

    def is_processed(self, execution_id: str, event_id: str) -> bool:
        found = self._executions.find_one(doc.processed_filter(execution_id, event_id), doc.only("_id"))
        return found is not None

    def document(self, execution_id: str) -> dict[str, Any] | None:
        """The stored document as it is (for `harel status --document` and inspection)."""
        return self._executions.find_one({"_id": execution_id})

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
        found = doc.list_find(definition_id, collector.offset).open(self._executions)
        try:
            for document in found:
                if collector.offer(document):
                    break
        finally:
            found.close()
        return collector.page()

    # --- relays ------------------------------------------------------------------------------------

    def pending_outbox(self, limit: int = 100) -> list[OutboxEntry]:
        return doc.parse_outbox(doc.outbox_find(limit).open(self._executions), limit)

    def ack_outbox(self, seq: int) -> None:
        self._executions.update_one(*doc.ack_outbox_write(seq))

    def pending_spawns(self, limit: int = 100) -> list[SpawnEntry]:
        return doc.parse_spawns(doc.spawns_find(limit).open(self._executions), limit)

    def ack_spawn(self, seq: int) -> None:
        self._executions.update_one(*doc.ack_spawn_write(seq))

    # --- timers ------------------------------------------------------------------------------------

    def due_timers(self, now: float, limit: int = 100) -> list[DueTimer]:
        return doc.parse_due(doc.due_find(now, limit).open(self._executions), now, limit)

    def next_timer_at(self) -> float | None:
        return doc.parse_next_timer(list(doc.next_timer_find().open(self._executions)))

    def delete_timer(self, execution_id: str, path: str, fire_at: float) -> None:
        self._executions.update_one(*doc.delete_timer_write(execution_id, path, fire_at))

    # --- trace -------------------------------------------------------------------------------------

    def append_trace(self, execution_id: str, entry: dict[str, Any]) -> None:
        """Append outside a commit. Upserts: an id with no execution yet gets a trace-only document,
        which loads as absent; creating that execution afterwards raises StoreConflict."""
        index = entry["index"] if "index" in entry else self._allocate(doc.trace_counter(execution_id), 1) - 1
        update = doc.append_trace_update(doc.trace_step(entry, index), self.trace_max)
        self._executions.update_one({"_id": execution_id}, update, upsert=True)

    def read_trace(self, execution_id: str) -> list[dict[str, Any]]:
        return doc.parse_trace(self._executions.find_one({"_id": execution_id}, doc.only("trace")))

    # --- lifecycle ---------------------------------------------------------------------------------

    def ensure_indexes(self) -> None:
        """Create the indexes listings, the sweep and the relays use. Idempotent."""
        for index in doc.INDEXES:
            self._executions.create_index(index.key, **index.options())

    def close(self) -> None:
        self._client.close()
