"""AsyncMongoStore: MongoStore awaited, on PyMongo's AsyncMongoClient (`from_url`), or an injected Motor or
mongomock-motor client (`harel.commands.resolved` and `drained` absorb what each makes awaitable).
MongoStore (harel.store.mongo) is generated from this file by sdk/tools/synchro.py: edit this one, then
regenerate (`make synchro`).

Every execution in one MongoDB document, every commit one atomic `update_one`. The document model is in
`harel.executions` (`harel.executions.fields` lists every field and who writes it); this class only sends
what its builders make and parses the replies with its parsers. The design in short:

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
  (`fields.SEQ_STRIDE`); a commit's trace step is indexed by its step number. Only `append_trace` of an
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
- **Size.** A commit whose payload reaches 15 MiB raises ExecutionTooLarge before anything is sent, and
  one whose state (`data`) passes 8 MiB ContextTooLarge, a kind of it; the driver's DocumentTooLarge and
  the server's BSONObjectTooLarge map to ExecutionTooLarge.
- **Errors.** Every method raises the SDK's errors, never the driver's (`harel.driver_errors`): an
  unavailable deployment is DeploymentUnavailable, and CommitOutcomeUnknown during a commit, whose
  outcome the stored version then tells.

The client is injected and duck-typed; PyMongo is imported only for its error and operation classes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, NoReturn

from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from harel.commands import drained, matched, resolved
from harel.driver_errors import committing, translating
from harel.errors import StoreConflict, UnreadableExecution
from harel.executions import commits, queries, replies, writes
from harel.executions.commits import Commit, CommitParts
from harel.executions.fields import (
    DEFAULT_DEDUPE_WINDOW,
    DEFAULT_TRACE_MAX,
    RELAY_GRACE_SECONDS,
    trace_counter,
)
from harel.executions.indexes import retired_indexes, store_indexes
from harel.executions.partitions import META, WINDOW_LIMIT, meta_find, parse_partitions
from harel.executions.records import Claim, Delivered, Emit, Failure, Pending, RelayWork, Spawn, StepRecord
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
from harel.store.collections import MongoCollections


@translating
class AsyncMongoStore(MongoCollections):
    """AsyncExecutionStore on MongoDB: collections `executions` and `counters` under `db_name`."""

    @classmethod
    async def from_url(
        cls,
        url: str,
        db_name: str = "harel",
        *,
        trace_max: int = DEFAULT_TRACE_MAX,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
        **options: Any,
    ) -> AsyncMongoStore:
        """A store on a client from `harel.connection.connect_async`: safe defaults (majority writes and
        reads, primary reads, retryable writes), returned once the deployment answers a ping (retried until
        the connect deadline). `options` go to `connect_async`; start-up checks are the caller's
        (`check_async`)."""
        from harel.connection import connect_async

        client = await connect_async(url, **options)
        partitions = parse_partitions(await meta_find().one(client[db_name][META]))
        return cls(client, db_name, trace_max=trace_max, dedupe_window=dedupe_window, partitions=partitions)

    # --- the write path ----------------------------------------------------------------------------

    async def _write(self, commit: Commit, owner: str | None = None) -> None:
        with committing(commit.execution_id, commit.size):
            try:
                result = await self.partitions.keyed(commit.write).send(self._executions)
            except DuplicateKeyError:
                await self._raise_conflict(commit, owner)
            if not commit.creates and not matched(result):
                await self._raise_conflict(commit, owner)

    async def _raise_conflict(self, commit: Commit, owner: str | None) -> NoReturn:
        found = await self.partitions.keyed(queries.outcome_find(commit.execution_id)).one(self._executions)
        raise replies.conflict_for(commit.execution_id, commit.expected, found, owner)

    async def commit(
        self,
        exe: Execution,
        emits: Sequence[Emit] = (),
        spawns: Sequence[Spawn] = (),
        timers: Sequence[TimerOp] = (),
        processed_event_id: str | None = None,
        trace: dict[str, Any] | None = None,
    ) -> None:
        record = StepRecord(processed_event_id, emits, spawns, trace)
        commit = commits.step_commit(exe, record, bool(timers), self.trace_max, self.dedupe_window)
        await self._write(commit)
        exe.version = commit.version

    async def create(self, exe: Execution, events: Sequence[Event] = (), *, now: float) -> bool:
        try:
            await self._write(commits.creation(exe, events, now))
        except StoreConflict:
            return False
        return True

    async def commit_claim(
        self,
        claim: Claim,
        exe: Execution,
        records: Sequence[StepRecord],
        *,
        applied: Sequence[Pending],
        failure: Failure | None = None,
        timers_changed: bool,
        delivered: Delivered | None = None,
    ) -> CommitParts:
        parts = commits.claim_commit_parts(claim, exe, records, applied, timers_changed, delivered)
        commit = commits.plan_commit(
            parts, self.trace_max, self.dedupe_window, claim=claim, applied=applied, failure=failure
        )
        await self._write(commit, claim.owner)
        return parts

    async def commit_outcome(self, execution_id: str) -> tuple[int | None, str | None]:
        found = await self.partitions.keyed(queries.outcome_find(execution_id)).one(self._executions)
        return replies.parse_commit_outcome(found)

    # --- reads -------------------------------------------------------------------------------------

    async def load(self, execution_id: str) -> Execution | None:
        found = await self.partitions.keyed(queries.load_find(execution_id)).one(self._executions)
        return replies.parse_execution(found)

    async def load_for_event(self, execution_id: str, event_id: str) -> tuple[Execution | None, bool]:
        pipeline = self.partitions.keyed_pipeline(queries.load_for_event(execution_id, event_id))
        found = await drained(self._executions.aggregate(pipeline))
        return replies.parse_load_for_event(found)

    async def is_processed(self, execution_id: str, event_id: str) -> bool:
        processed = self.partitions.keyed(queries.processed_find(execution_id, event_id))
        return await processed.one(self._executions) is not None

    async def document(self, execution_id: str) -> dict[str, Any] | None:
        """The stored document as it is (for `harel status --document` and inspection)."""
        found: dict[str, Any] | None = await self.partitions.keyed(queries.document_find(execution_id)).one(
            self._executions
        )
        return found

    async def list_executions(
        self,
        *,
        status: ExecutionStatus | str | None = None,
        definition_id: str | None = None,
        roots_only: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ExecutionPage:
        offset = decode_offset(cursor)
        found = queries.list_find(status, definition_id, roots_only, offset, limit).open(self._executions)
        return replies.parse_page(await drained(found), offset, limit)

    # --- relays ------------------------------------------------------------------------------------

    async def pending_outbox(self, limit: int = 100) -> list[OutboxEntry]:
        found = await drained(queries.pending_relays_find(limit).open(self._executions))
        return replies.parse_pending_outbox(found, limit)

    async def ack_outbox(self, execution_id: str, seq: int) -> None:
        await self.ack_relay(execution_id, [seq], [], retry_in=RELAY_GRACE_SECONDS)

    async def pending_spawns(self, limit: int = 100) -> list[SpawnEntry]:
        found = await drained(queries.pending_relays_find(limit).open(self._executions))
        return replies.parse_pending_spawns(found, limit)

    async def ack_spawn(self, execution_id: str, seq: int) -> None:
        await self.ack_relay(execution_id, [], [seq], retry_in=RELAY_GRACE_SECONDS)

    async def create_children(self, entries: Sequence[SpawnEntry], *, now: float) -> list[str]:
        if not entries:
            return []
        created = [commits.child_creation(entry, now) for entry in entries]
        try:
            requests = [self.partitions.keyed(c.write).request() for c in created]
            await self._executions.bulk_write(requests, ordered=False)
        except BulkWriteError as exc:
            existed = replies.existing_children(exc.details or {}, [c.execution_id for c in created])
            if existed is None:
                raise
            return existed
        return []

    async def take_relay_work(self, lease: float, bound: float) -> RelayWork | None:
        for window in self.partitions.windows(WINDOW_LIMIT):
            found = await self.partitions.within(writes.relay_take_write(lease, bound), window).send(
                self._executions
            )
            if found is not None:
                return replies.parse_relay_work(found)
        return None

    async def ack_relay(
        self, execution_id: str, outbox_seqs: Sequence[int], spawn_seqs: Sequence[int], *, retry_in: float
    ) -> None:
        ack = writes.relay_ack_write(execution_id, outbox_seqs, spawn_seqs, retry_in)
        await self.partitions.keyed(ack).send(self._executions)

    async def ack_delivered(self, delivered: Sequence[Delivered], *, retry_in: float) -> None:
        """Acknowledge the relay work of several executions, each delivered in full, in one command."""
        if delivered:
            acks = [
                writes.relay_ack_write(d.execution_id, d.outbox, d.spawns, retry_in, others_hold=True)
                for d in delivered
            ]
            requests = [self.partitions.keyed(ack).request() for ack in acks]
            await self._executions.bulk_write(requests, ordered=False)

    async def park_unreadable(self, unreadable: UnreadableExecution) -> bool:
        return matched(
            await self.partitions.keyed(writes.park_unleased_write(unreadable)).send(self._executions)
        )

    # --- timers ------------------------------------------------------------------------------------

    async def due_timers(self, bound: float, limit: int = 100) -> list[DueTimer | UnreadableExecution]:
        found: list[DueTimer | UnreadableExecution] = []
        for window in self.partitions.windows(WINDOW_LIMIT):
            due = self.partitions.within(queries.due_find(bound, limit - len(found)), window)
            found += replies.parse_due(await drained(due.open(self._executions)))
            if len(found) >= limit:
                break
        return found

    async def fire_timer(self, due: DueTimer, *, now: float) -> bool:
        return matched(await self.partitions.keyed(writes.fire_write(due, now)).send(self._executions))

    # --- trace -------------------------------------------------------------------------------------

    async def _allocate(self, counter: str, count: int) -> int:
        found = await writes.counter_write(counter, count).send(self._counters)
        return replies.first_of_block(found, count)

    async def _index_of(self, execution_id: str, entry: dict[str, Any]) -> int:
        if "index" in entry:
            return int(entry["index"])
        return await self._allocate(trace_counter(execution_id), 1) - 1

    async def append_trace(self, execution_id: str, entry: dict[str, Any]) -> None:
        """Append outside a commit. Upserts: an id with no execution yet gets a trace-only document,
        which loads as absent; creating that execution afterwards raises StoreConflict."""
        step = writes.trace_step(entry, await self._index_of(execution_id, entry))
        await self.partitions.keyed(writes.trace_write(execution_id, step, self.trace_max)).send(
            self._executions
        )

    async def read_trace(self, execution_id: str) -> list[dict[str, Any]]:
        return replies.parse_trace(
            await self.partitions.keyed(queries.trace_find(execution_id)).one(self._executions)
        )

    # --- lifecycle ---------------------------------------------------------------------------------

    async def ensure_indexes(self) -> None:
        """Create the indexes listings, the sweep and the relays use, and drop retired ones. Idempotent."""
        for index in store_indexes(not self.partitions.single):
            await index.create_on(self._executions)
        for name in retired_indexes(not self.partitions.single):
            with contextlib.suppress(OperationFailure):
                await self._executions.drop_index(name)

    async def close(self) -> None:
        await resolved(self._client.close())
