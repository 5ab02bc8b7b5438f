"""AsyncMongoStore: MongoStore's awaitable twin — the same documents, queries and updates, awaited.

Everything it sends or parses comes from `harel.store._documents`, so it cannot drift from MongoStore;
see `harel.store.mongo` for the design (one document per execution, one CAS `update_one` per commit,
the dedupe window, `next_fire_at`, one counters round trip per commit at most).

The default client is PyMongo's native `AsyncMongoClient` (via `from_url`). An injected Motor client
(`AsyncIOMotorClient`) or mongomock-motor works too. The clients differ in what they make awaitable:
`aggregate` and `close` are coroutines on AsyncMongoClient but return a cursor / None directly on Motor;
`_resolved` absorbs both. `find` returns a cursor without awaiting on all of them.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from harel.model import DueTimer, Execution, ExecutionPage, ExecutionStatus, OutboxEntry, SpawnEntry, TimerOp
from harel.store import _documents as doc
from harel.store._collections import MongoCollections
from harel.store.base import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX, Emit, Spawn


async def _resolved(value: Any) -> Any:
    """Await what a client made awaitable; pass through what it returned directly."""
    return await value if inspect.isawaitable(value) else value


async def _drained(cursor: Any) -> list[dict[str, Any]]:
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

    async def _allocate(self, counter: str, count: int) -> int:
        found = await self._counters.find_one_and_update(
            {"_id": counter}, doc.counter_update(count), upsert=True, return_document=self._after
        )
        return doc.first_of_block(found, count)

    # --- the write path ----------------------------------------------------------------------------

    async def commit(
        self,
        exe: Execution,
        emits: Sequence[Emit] = (),
        spawns: Sequence[Spawn] = (),
        timers: Sequence[TimerOp] = (),
        processed_event_id: str | None = None,
        trace: dict[str, Any] | None = None,
    ) -> None:
        count = doc.seq_count(emits, spawns)
        first_seq = await self._allocate(doc.SEQ_COUNTER, count) if count else 0
        parts = doc.commit_parts(exe, first_seq, emits, spawns, timers, processed_event_id, trace)
        write = doc.plan_commit(exe, parts, self.trace_max, self.dedupe_window)
        with doc.too_large_as_typed(write):
            if write.creates:
                try:
                    await self._executions.insert_one(write.document)
                except self._duplicate_key:
                    await self._raise_conflict(write)
            elif (await self._executions.update_one(write.cas_filter, write.update)).matched_count != 1:
                await self._raise_conflict(write)
        exe.version = write.version

    async def _raise_conflict(self, write: doc.CommitWrite) -> None:
        found = await self._executions.find_one({"_id": write.execution_id}, doc.only("version"))
        raise doc.conflict(write, found)

    # --- reads -------------------------------------------------------------------------------------

    async def load(self, execution_id: str) -> Execution | None:
        return doc.parse_execution(await self._executions.find_one({"_id": execution_id}, doc.only("data")))

    async def load_for_event(self, execution_id: str, event_id: str) -> tuple[Execution | None, bool]:
        cursor = await _resolved(
            self._executions.aggregate(doc.load_for_event_pipeline(execution_id, event_id))
        )
        return doc.parse_load_for_event(await _drained(cursor))

    async def is_processed(self, execution_id: str, event_id: str) -> bool:
        found = await self._executions.find_one(doc.processed_filter(execution_id, event_id), doc.only("_id"))
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
        collector = doc.PageCollector(cursor, limit, status, definition_id, roots_only)
        found = doc.list_find(definition_id, collector.offset).open(self._executions)
        try:
            async for document in found:
                if collector.offer(document):
                    break
        finally:
            await _resolved(found.close())
        return collector.page()

    # --- relays ------------------------------------------------------------------------------------

    async def pending_outbox(self, limit: int = 100) -> list[OutboxEntry]:
        return doc.parse_outbox(await _drained(doc.outbox_find(limit).open(self._executions)), limit)

    async def ack_outbox(self, seq: int) -> None:
        await self._executions.update_one(*doc.ack_outbox_write(seq))

    async def pending_spawns(self, limit: int = 100) -> list[SpawnEntry]:
        return doc.parse_spawns(await _drained(doc.spawns_find(limit).open(self._executions)), limit)

    async def ack_spawn(self, seq: int) -> None:
        await self._executions.update_one(*doc.ack_spawn_write(seq))

    # --- timers ------------------------------------------------------------------------------------

    async def due_timers(self, now: float, limit: int = 100) -> list[DueTimer]:
        return doc.parse_due(await _drained(doc.due_find(now, limit).open(self._executions)), now, limit)

    async def next_timer_at(self) -> float | None:
        return doc.parse_next_timer(await _drained(doc.next_timer_find().open(self._executions)))

    async def delete_timer(self, execution_id: str, path: str, fire_at: float) -> None:
        await self._executions.update_one(*doc.delete_timer_write(execution_id, path, fire_at))

    # --- trace -------------------------------------------------------------------------------------

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
        return doc.parse_trace(await self._executions.find_one({"_id": execution_id}, doc.only("trace")))

    # --- lifecycle ---------------------------------------------------------------------------------

    async def ensure_indexes(self) -> None:
        """Create the indexes listings, the sweep and the relays use. Idempotent."""
        for index in doc.INDEXES:
            await self._executions.create_index(index.key, **index.options())

    async def close(self) -> None:
        await _resolved(self._client.close())
