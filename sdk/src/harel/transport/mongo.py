"""MongoTransport: the queue on the same replica set as the store (sync and async twins).

Delivery is at least once. A claim leases a message to an owner token with `find_one_and_update` on the
indexed `visible_at` field and never deletes it; `ack` deletes it only while the token still owns it, so a
lease that ran out (a slow action, a paused worker) is re-claimed by someone else and the late ack is
refused. Consumers dedupe by event id against the execution's processed marks. A message that fails
`max_attempts` times moves to `dead_letters` with its last error.

Wake-up: where the deployment has change streams (a replica set), inserts into the queue wake waiting
consumers early. That is a hint only: consumers still poll with a bounded backoff, which stays the source
of truth — a missed or unsupported change stream costs latency, never a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError, PyMongoError

from harel.model import Event
from harel.transport import _messages as q
from harel.transport.base import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_ATTEMPTS, DeadLetter, Message

log = logging.getLogger("harel.transport")

Clock = Callable[[], float]


class _QueueCollections:
    """The client and the two queue collections, held the same way by both twins."""

    def __init__(
        self,
        client: Any,
        db_name: str = "harel",
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        clock: Clock = time.time,
        watch: bool = True,
    ) -> None:
        self._client = client
        db = client[db_name]
        self._queue = db[q.QUEUE]
        self._dead = db[q.DEAD_LETTERS]
        self.max_attempts = max_attempts
        self._clock = clock
        self._watch_enabled = watch

    def _collections(self) -> dict[str, Any]:
        return {q.QUEUE: self._queue, q.DEAD_LETTERS: self._dead}


class MongoTransport(_QueueCollections):
    """The queue in `db_name` of an injected pymongo-compatible client (incl. mongomock)."""

    def __init__(self, client: Any, db_name: str = "harel", **options: Any) -> None:
        super().__init__(client, db_name, **options)
        self._wake = threading.Event()
        self._watcher: threading.Thread | None = None
        self._closed = threading.Event()

    @classmethod
    def from_url(cls, url: str, db_name: str = "harel", **options: Any) -> MongoTransport:
        from harel.connection import connect

        return cls(connect(url, **options), db_name)

    def send(self, target_id: str | None, event: Event, delay: float = 0.0) -> None:
        with contextlib.suppress(DuplicateKeyError):
            self._queue.insert_one(q.queued_document(target_id, event, self._clock(), delay))
        self._wake.set()  # consumers sharing this transport need no change stream to hear of it

    def claim(self, lease: float = DEFAULT_LEASE_SECONDS) -> Message | None:
        now = self._clock()
        doc = self._queue.find_one_and_update(
            q.claim_filter(now),
            q.claim_update(q.new_owner_token(), now, lease),
            sort=q.CLAIM_SORT,
            return_document=ReturnDocument.AFTER,
        )
        return q.parse_message(doc) if doc is not None else None

    def ack(self, message: Message) -> bool:
        return self._queue.delete_one(q.owned_filter(message)).deleted_count == 1

    def extend(self, message: Message, lease: float = DEFAULT_LEASE_SECONDS) -> Message | None:
        now = self._clock()
        res = self._queue.update_one(q.owned_filter(message), q.extend_update(now, lease))
        return q.with_lease(message, now, lease) if res.matched_count == 1 else None

    def nack(self, message: Message, error: str) -> bool:
        now = self._clock()
        if message.attempts >= self.max_attempts:
            with contextlib.suppress(DuplicateKeyError):
                self._dead.insert_one(q.dead_letter_document(message, error, now))
            self._queue.delete_one(q.owned_filter(message))
            return True
        self._queue.update_one(q.owned_filter(message), q.retry_update(message.attempts, now, error))
        return False

    def release(self, message: Message, delay: float = 0.0) -> None:
        self._queue.update_one(q.owned_filter(message), q.release_update(self._clock(), delay))

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return [q.parse_dead_letter(d) for d in self._dead.find({}).sort("dead_at", 1).limit(limit)]

    def depth(self) -> int:
        return int(self._queue.count_documents({}))

    def next_visible_at(self) -> float | None:
        doc = self._queue.find_one({}, {"visible_at": 1}, sort=q.CLAIM_SORT)
        return float(doc["visible_at"]) if doc is not None else None

    def wait_hint(self, timeout: float) -> bool:
        self._start_watcher()
        woken = self._wake.wait(timeout)
        self._wake.clear()
        return woken

    def _start_watcher(self) -> None:
        if not self._watch_enabled or self._watcher is not None:
            return
        self._watcher = threading.Thread(target=self._watch, name="harel-queue-watch", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        try:
            with self._queue.watch(q.INSERT_WATCH_PIPELINE, max_await_time_ms=1000) as stream:
                while not self._closed.is_set():
                    if stream.try_next() is not None:
                        self._wake.set()
        except (PyMongoError, NotImplementedError, AttributeError, TypeError) as exc:
            log.debug("queue change stream unavailable, polling only: %s", exc)

    def ensure_indexes(self) -> None:
        for collection, keys, options in q.INDEXES:
            self._collections()[collection].create_index(keys, **options)

    def close(self) -> None:
        self._closed.set()
        self._client.close()


class AsyncMongoTransport(_QueueCollections):
    """The awaitable twin of MongoTransport, on PyMongo's AsyncMongoClient (or an injected Motor client)."""

    def __init__(self, client: Any, db_name: str = "harel", **options: Any) -> None:
        super().__init__(client, db_name, **options)
        self._wake = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    @classmethod
    async def from_url(cls, url: str, db_name: str = "harel", **options: Any) -> AsyncMongoTransport:
        from harel.connection import connect_async

        return cls(await connect_async(url, **options), db_name)

    async def send(self, target_id: str | None, event: Event, delay: float = 0.0) -> None:
        with contextlib.suppress(DuplicateKeyError):
            await self._queue.insert_one(q.queued_document(target_id, event, self._clock(), delay))
        self._wake.set()

    async def claim(self, lease: float = DEFAULT_LEASE_SECONDS) -> Message | None:
        now = self._clock()
        doc = await self._queue.find_one_and_update(
            q.claim_filter(now),
            q.claim_update(q.new_owner_token(), now, lease),
            sort=q.CLAIM_SORT,
            return_document=ReturnDocument.AFTER,
        )
        return q.parse_message(doc) if doc is not None else None

    async def ack(self, message: Message) -> bool:
        return (await self._queue.delete_one(q.owned_filter(message))).deleted_count == 1

    async def extend(self, message: Message, lease: float = DEFAULT_LEASE_SECONDS) -> Message | None:
        now = self._clock()
        res = await self._queue.update_one(q.owned_filter(message), q.extend_update(now, lease))
        return q.with_lease(message, now, lease) if res.matched_count == 1 else None

    async def nack(self, message: Message, error: str) -> bool:
        now = self._clock()
        if message.attempts >= self.max_attempts:
            with contextlib.suppress(DuplicateKeyError):
                await self._dead.insert_one(q.dead_letter_document(message, error, now))
            await self._queue.delete_one(q.owned_filter(message))
            return True
        await self._queue.update_one(q.owned_filter(message), q.retry_update(message.attempts, now, error))
        return False

    async def release(self, message: Message, delay: float = 0.0) -> None:
        await self._queue.update_one(q.owned_filter(message), q.release_update(self._clock(), delay))

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        cursor = self._dead.find({}).sort("dead_at", 1).limit(limit)
        return [q.parse_dead_letter(d) async for d in cursor]

    async def depth(self) -> int:
        return int(await self._queue.count_documents({}))

    async def next_visible_at(self) -> float | None:
        doc = await self._queue.find_one({}, {"visible_at": 1}, sort=q.CLAIM_SORT)
        return float(doc["visible_at"]) if doc is not None else None

    async def wait_hint(self, timeout: float) -> bool:
        self._start_watcher()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except TimeoutError:
            return False
        self._wake.clear()
        return True

    def _start_watcher(self) -> None:
        if self._watch_enabled and self._watcher is None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        try:
            stream = self._queue.watch(q.INSERT_WATCH_PIPELINE, max_await_time_ms=1000)
            if asyncio.iscoroutine(stream):
                stream = await stream
            async with stream as changes:
                async for _ in changes:
                    self._wake.set()
        except (PyMongoError, NotImplementedError, AttributeError, TypeError) as exc:
            log.debug("queue change stream unavailable, polling only: %s", exc)

    async def ensure_indexes(self) -> None:
        for collection, keys, options in q.INDEXES:
            await self._collections()[collection].create_index(keys, **options)

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        closing = self._client.close()
        if asyncio.iscoroutine(closing):
            await closing
