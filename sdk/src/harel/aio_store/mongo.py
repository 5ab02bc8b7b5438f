"""AsyncMongoStore: MongoStore's awaitable twin — the same documents, queries and updates, awaited.

Everything it sends or parses comes from `harel.store._documents`, so it cannot drift from MongoStore;
see `harel.store.mongo` for the design (one document per execution, one CAS `update_one` per commit,
the mailbox, the dedupe window, `next_fire_at`, relays that never repeat each other).

The default client is PyMongo's native `AsyncMongoClient` (via `from_url`). An injected Motor client
(`AsyncIOMotorClient`) or mongomock-motor works too. The clients differ in what they make awaitable:
`aggregate` and `close` are coroutines on AsyncMongoClient but return a cursor / None directly on Motor;
`resolved` absorbs both. `find` returns a cursor without awaiting on all of them.
"""

from __future__ import annotations

import contextlib
import inspect
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


async def resolved(value: Any) -> Any:
    """Await what a client made awaitable; pass through what it returned directly."""
    return await value if inspect.isawaitable(value) else value


async def drained(cursor: Any) -> list[dict[str, Any]]:
    return [document async for document in cursor]


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
        """A store on PyMongo's AsyncMongoClient from `harel.connection.connect_async`: the same safe
        defaults and ping-and-retry as MongoStore.from_url."""
        from harel.connection import connect_async

        client = await connect_async(url, **options)
        return cls(client, db_name, trace_max=trace_max, dedupe_window=dedupe_window)

    # --- the write path ----------------------------------------------------------------------------

    async def _write(self, write: doc.CommitWrite, owner: str | None = None) -> None:
        with doc.too_large_as_typed(write):
            try:
                result = await self._executions.update_one(write.filter, write.pipeline, upsert=write.creates)
            except self._duplicate_key:
                await self._raise_conflict(write, owner)
            if not write.creates and result.matched_count != 1:
                await self._raise_conflict(write, owner)

    async def _raise_conflict(self, write: doc.CommitWrite, owner: str | None) -> None:
        found = await self._executions.find_one({"_id": write.execution_id}, only("version", "lease"))
        raise conflict_for(write, found, owner)

    async def commit(
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
        await self._write(write)
        exe.version = parts.version

    async def create(self, exe: Execution, events: Sequence[Event] = (), *, now: float) -> bool:
        try:
            await self._write(doc.creation(exe, events, now))
        except StoreConflict:
            return False
        return True

    async def commit_claim(
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
        await self._write(write, claim.owner)
        return parts

    async def commit_outcome(self, execution_id: str) -> tuple[int | None, str | None]:
        found = await self._executions.find_one({"_id": execution_id}, only("version", "lease"))
        return doc.parse_commit_outcome(found)

    # --- reads -------------------------------------------------------------------------------------

    async def load(self, execution_id: str) -> Execution | None:
        return parse_execution(await self._executions.find_one({"_id": execution_id}, only("data")))

    async def load_for_event(self, execution_id: str, event_id: str) -> tuple[Execution | None, bool]:
        cursor = await resolved(
            self._executions.aggregate(doc.load_for_event_pipeline(execution_id, event_id))
        )
        return doc.parse_load_for_event(await drained(cursor))

    async def is_processed(self, execution_id: str, event_id: str) -> bool:
        found = await self._executions.find_one(doc.processed_filter(execution_id, event_id), only("_id"))
        return found is not None

    async def document(self, execution_id: str) -> dict[str, Any] | None:
        """The stored document as it is (for `harel status --document` and inspection)."""
        return await self._executions.find_one({"_id": execution_id})

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
        found = doc.list_find(status, definition_id, roots_only, offset, limit).open(self._executions)
        return doc.parse_page(await drained(found), offset, limit)

    # --- relays ------------------------------------------------------------------------------------

    async def pending_outbox(self, limit: int = 100) -> list[OutboxEntry]:
        found = await drained(doc.pending_relays_find(limit).open(self._executions))
        return doc.parse_pending_outbox(found, limit)

    async def ack_outbox(self, execution_id: str, seq: int) -> None:
        await self.ack_relay(execution_id, [seq], [], retry_in=doc.RELAY_GRACE_SECONDS)

    async def pending_spawns(self, limit: int = 100) -> list[SpawnEntry]:
        found = await drained(doc.pending_relays_find(limit).open(self._executions))
        return doc.parse_pending_spawns(found, limit)

    async def ack_spawn(self, execution_id: str, seq: int) -> None:
        await self.ack_relay(execution_id, [], [seq], retry_in=doc.RELAY_GRACE_SECONDS)

    async def create_children(self, entries: Sequence[SpawnEntry], *, now: float) -> list[str]:
        if not entries:
            return []
        writes = [doc.child_creation(entry, now) for entry in entries]
        try:
            await self._executions.bulk_write(self._children_requests(writes), ordered=False)
        except self._bulk_error as exc:
            return self._existing_children(exc, writes)
        return []

    async def take_relay_work(self, lease: float, bound: float) -> doc.RelayWork | None:
        query, update = doc.relay_claim(lease, bound)
        found = await self._executions.find_one_and_update(
            query,
            update,
            sort=list(doc.RELAY_SORT),
            projection=only(*doc.RELAY_PROJECTION),
            return_document=self._after,
        )
        return doc.parse_relay_work(found) if found is not None else None

    async def ack_relay(
        self, execution_id: str, outbox_seqs: Sequence[int], spawn_seqs: Sequence[int], *, retry_in: float
    ) -> None:
        await self._executions.update_one(*doc.relay_ack(execution_id, outbox_seqs, spawn_seqs, retry_in))

    # --- timers ------------------------------------------------------------------------------------

    async def due_timers(self, bound: float, limit: int = 100) -> list[DueTimer]:
        return doc.parse_due(await drained(doc.due_find(bound, limit).open(self._executions)))

    async def fire_timer(self, due: DueTimer, *, now: float) -> bool:
        write = doc.fire(due, now)
        return (await self._executions.update_one(write.filter, write.update)).matched_count == 1

    # --- trace -------------------------------------------------------------------------------------

    async def _allocate(self, counter: str, count: int) -> int:
        found = await self._counters.find_one_and_update(
            {"_id": counter}, doc.counter_update(count), upsert=True, return_document=self._after
        )
        return doc.first_of_block(found, count)

    async def append_trace(self, execution_id: str, entry: dict[str, Any]) -> None:
        """Append outside a commit. Upserts: an id with no execution yet gets a trace-only document,
        which loads as absent; creating that execution afterwards raises StoreConflict."""
        if "index" in entry:
            index = entry["index"]
        else:
            index = await self._allocate(doc.trace_counter(execution_id), 1) - 1
        update = doc.append_trace_update(doc.trace_step(entry, index), self.trace_max)
        await self._executions.update_one({"_id": execution_id}, update, upsert=True)

    async def read_trace(self, execution_id: str) -> list[dict[str, Any]]:
        return doc.parse_trace(await self._executions.find_one({"_id": execution_id}, only("trace")))

    # --- lifecycle ---------------------------------------------------------------------------------

    async def ensure_indexes(self) -> None:
        """Create the indexes listings, the sweep and the relays use, and drop retired ones. Idempotent."""
        for index in doc.INDEXES:
            await index.create_on(self._executions)
        for name in doc.RETIRED_INDEXES:
            with contextlib.suppress(self._operation_failure):
                await self._executions.drop_index(name)

    async def close(self) -> None:
        await resolved(self._client.close())
