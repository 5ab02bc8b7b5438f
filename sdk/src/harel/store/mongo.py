"""MongoStore: every execution in one MongoDB document, every commit one atomic `update_one`.

The document model is in `harel.store._documents` (the mailbox fields in `harel.transport._mailbox`). The
design in short:

- **One document, one update.** An execution's snapshot (`data`), its outbox, spawn intents, dedupe
  window, timers, trace ring and mailbox live in one document, so a commit — the steps and everything they
  enqueue, and the removal of the events they applied — is a single-document update, atomic on any MongoDB
  deployment. The update carries the CAS filter `{_id, version}` (and the lease's owner, for a claim): a
  writer that loaded an older version matches nothing and gets StoreConflict; the stored document is left
  exactly as it was and so is `exe.version`.
- **Version 0 creates**, with the first events (a start) already in the mailbox; a concurrent create of
  the same id loses on the duplicate `_id` and gets StoreConflict (`create` returns False).
- **Partial writes, projected reads.** A commit sends the new data, the entries the steps added and the
  rings' trims — never the document. `load` fetches only `data`; relays and the sweep fetch only their
  arrays or sub-document.
- **No counters on the hot path.** Outbox and spawn seqs are numbered per execution from the version
  (`_documents.SEQ_STRIDE`); a commit's trace step is indexed by its step number. Only `append_trace` of an
  entry without an index draws from the `counters` collection (`trace:<id>`).
- **Dedupe window.** `processed` keeps the last `dedupe_window` (default 1000) applied event ids; a send
  of an id found there (or already in the mailbox) is refused. An event redelivered after `dedupe_window`
  newer events of the same execution were applied is no longer recognised by its id; engine events (start,
  timer, done, cancel) are still guarded by the state.
- **Timers.** `timers` maps an encoded node path to its fire time; the top-level `next_fire_at` is the
  earliest timer not yet fired. The sweep fires a due timer in one update of its own execution — the event
  joins the mailbox and `next_fire_at` moves on — so no crash between a send and a delete can lose it.
- **Relays.** The worker that commits entries relays them at once and holds them for
  `RELAY_GRACE_SECONDS` (`relay_at`); background relays take only work left longer than that, one relay
  per execution at a time.
- **Size.** A commit whose payload reaches 15 MiB raises ExecutionTooLarge before anything is sent; the
  driver's DocumentTooLarge and the server's BSONObjectTooLarge map to the same error.

The client is injected and duck-typed (PyMongo, or mongomock in tests); PyMongo is imported only for its
error and operation classes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from harel.commands import only, parse_execution
from harel.errors import StoreConflict
from harel.model import (
    DueTimer,
    Event,
    Execution,
    ExecutionPage,
    ExecutionStatus,
    OutboxEntry,
    SpawnEntry,
    TimerOp,
    decode_offset,
)
from harel.store import _documents as doc
from harel.store._collections import MongoCollections, conflict_for
from harel.store.base import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX, Emit, Spawn
from harel.transport.base import Claim, Failure, Pending


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

    # --- the write path ----------------------------------------------------------------------------

    def _write(self, write: doc.CommitWrite, owner: str | None = None) -> None:
        with doc.too_large_as_typed(write):
            try:
                result = self._executions.update_one(write.filter, write.pipeline, upsert=write.creates)
            except self._duplicate_key:
                self._raise_conflict(write, owner)
            if not write.creates and result.matched_count != 1:
                self._raise_conflict(write, owner)

    def _raise_conflict(self, write: doc.CommitWrite, owner: str | None) -> None:
        found = self._executions.find_one({"_id": write.execution_id}, only("version", "lease"))
        raise conflict_for(write, found, owner)

    def commit(
        self,
        exe: Execution,
        emits: Sequence[Emit] = (),
        spawns: Sequence[Spawn] = (),
        timers: Sequence[TimerOp] = (),
        processed_event_id: str | None = None,
        trace: dict[str, Any] | None = None,
    ) -> None:
        record = doc.StepRecord(processed_event_id, emits, spawns, trace)
        parts = doc.commit_parts(
            exe, [record], expected=exe.version, timers_changed=bool(timers) or exe.version == 0
        )
        if exe.version == 0:
            write = doc.plan_create(
                parts, (), doc.mailbox.chart_key(exe.definition_id, exe.definition_version)
            )
        else:
            write = doc.plan_commit(parts, self.trace_max, self.dedupe_window)
        self._write(write)
        exe.version = parts.version

    def create(self, exe: Execution, events: Sequence[Event] = (), *, now: float) -> bool:
        try:
            self._write(doc.creation(exe, events, now))
        except StoreConflict:
            return False
        return True

    def commit_claim(
        self,
        claim: Claim,
        exe: Execution,
        records: Sequence[doc.StepRecord],
        *,
        applied: Sequence[Pending],
        failure: Failure | None = None,
        timers_changed: bool,
    ) -> doc.CommitParts:
        parts = doc.claim_commit_parts(claim, exe, records, applied, timers_changed)
        write = doc.plan_commit(
            parts, self.trace_max, self.dedupe_window, claim=claim, applied=applied, failure=failure
        )
        self._write(write, claim.owner)
        return parts

    def commit_outcome(self, execution_id: str) -> tuple[int | None, str | None]:
        return doc.parse_commit_outcome(
            self._executions.find_one({"_id": execution_id}, only("version", "lease"))
        )

    # --- reads -------------------------------------------------------------------------------------

    def load(self, execution_id: str) -> Execution | None:
        return parse_execution(self._executions.find_one({"_id": execution_id}, only("data")))

    def load_for_event(self, execution_id: str, event_id: str) -> tuple[Execution | None, bool]:
        found = list(self._executions.aggregate(doc.load_for_event_pipeline(execution_id, event_id)))
        return doc.parse_load_for_event(found)

    def is_processed(self, execution_id: str, event_id: str) -> bool:
        found = self._executions.find_one(doc.processed_filter(execution_id, event_id), only("_id"))
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
        offset = decode_offset(cursor)
        found = doc.list_find(status, definition_id, roots_only, offset, limit).open(self._executions)
        return doc.parse_page(list(found), offset, limit)

    # --- relays ------------------------------------------------------------------------------------

    def pending_outbox(self, limit: int = 100) -> list[OutboxEntry]:
        return doc.parse_pending_outbox(doc.pending_relays_find(limit).open(self._executions), limit)

    def ack_outbox(self, execution_id: str, seq: int) -> None:
        self.ack_relay(execution_id, [seq], [], retry_in=doc.RELAY_GRACE_SECONDS)

    def pending_spawns(self, limit: int = 100) -> list[SpawnEntry]:
        return doc.parse_pending_spawns(doc.pending_relays_find(limit).open(self._executions), limit)

    def ack_spawn(self, execution_id: str, seq: int) -> None:
        self.ack_relay(execution_id, [], [seq], retry_in=doc.RELAY_GRACE_SECONDS)

    def create_children(self, entries: Sequence[SpawnEntry], *, now: float) -> list[str]:
        if not entries:
            return []
        writes = [doc.child_creation(entry, now) for entry in entries]
        try:
            self._executions.bulk_write(self._children_requests(writes), ordered=False)
        except self._bulk_error as exc:
            return self._existing_children(exc, writes)
        return []

    def take_relay_work(self, lease: float, bound: float) -> doc.RelayWork | None:
        query, update = doc.relay_claim(lease, bound)
        found = self._executions.find_one_and_update(
            query,
            update,
            sort=list(doc.RELAY_SORT),
            projection=only(*doc.RELAY_PROJECTION),
            return_document=self._after,
        )
        return doc.parse_relay_work(found) if found is not None else None

    def ack_relay(
        self, execution_id: str, outbox_seqs: Sequence[int], spawn_seqs: Sequence[int], *, retry_in: float
    ) -> None:
        self._executions.update_one(*doc.relay_ack(execution_id, outbox_seqs, spawn_seqs, retry_in))

    # --- timers ------------------------------------------------------------------------------------

    def due_timers(self, bound: float, limit: int = 100) -> list[DueTimer]:
        return doc.parse_due(doc.due_find(bound, limit).open(self._executions))

    def fire_timer(self, due: DueTimer, *, now: float) -> bool:
        write = doc.fire(due, now)
        return self._executions.update_one(write.filter, write.update).matched_count == 1

    # --- trace -------------------------------------------------------------------------------------

    def _allocate(self, counter: str, count: int) -> int:
        found = self._counters.find_one_and_update(
            {"_id": counter}, doc.counter_update(count), upsert=True, return_document=self._after
        )
        return doc.first_of_block(found, count)

    def append_trace(self, execution_id: str, entry: dict[str, Any]) -> None:
        """Append outside a commit. Upserts: an id with no execution yet gets a trace-only document,
        which loads as absent; creating that execution afterwards raises StoreConflict."""
        index = entry["index"] if "index" in entry else self._allocate(doc.trace_counter(execution_id), 1) - 1
        update = doc.append_trace_update(doc.trace_step(entry, index), self.trace_max)
        self._executions.update_one({"_id": execution_id}, update, upsert=True)

    def read_trace(self, execution_id: str) -> list[dict[str, Any]]:
        return doc.parse_trace(self._executions.find_one({"_id": execution_id}, only("trace")))

    # --- lifecycle ---------------------------------------------------------------------------------

    def ensure_indexes(self) -> None:
        """Create the indexes listings, the sweep and the relays use, and drop retired ones. Idempotent."""
        for index in doc.INDEXES:
            index.create_on(self._executions)
        for name in doc.RETIRED_INDEXES:
            with contextlib.suppress(self._operation_failure):
                self._executions.drop_index(name)

    def close(self) -> None:
        self._client.close()
