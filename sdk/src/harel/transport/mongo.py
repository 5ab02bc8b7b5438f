"""MongoTransport: each execution's mailbox, in its own document on the same replica set (sync + async).

Events wait in their target execution's `inbox` (`harel.executions.fields` has the document model). A
`send` is one update of the target; a `claim` is one `findAndModify` that leases the execution whose
mailbox has been due longest (of the charts the worker serves) and returns its data and pending events;
the store's `commit_claim` removes the applied events and ends the lease in the same update as the steps.
Leases and due times are on the server's clock (`$$NOW`); the owner token fences every write of a claim.

An attempt that raises is recorded on the execution (`attempts`, `last_error`) and retried after a
backoff, with the events behind it waiting; after `max_attempts` the execution is parked with the event
and its error until an operator retries or drops it (`harel dead`), so later events never overtake it.

Every method raises the SDK's errors, never the driver's (`harel.driver_errors`).

Wake-up: where the deployment has change streams (a replica set), a mailbox that becomes due wakes waiting
consumers early. That is a hint only: consumers still poll with a bounded backoff, which stays the source
of truth; a watcher that fails is restarted with a backoff, and until then costs latency, never an event.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import threading
from collections.abc import Sequence
from typing import Any

from pymongo.errors import OperationFailure, PyMongoError

from harel.commands import drained, matched, resolved
from harel.driver_errors import translating
from harel.executions import queries, replies, writes
from harel.executions.fields import DEFAULT_DEDUPE_WINDOW, EXECUTIONS
from harel.executions.indexes import MAILBOX_INDEXES
from harel.executions.records import Claim, Failure, Parked, SendOutcome
from harel.model import Event
from harel.sent import WATCH, sending
from harel.servertime import ServerClock
from harel.transport.base import DEFAULT_MAX_ATTEMPTS

log = logging.getLogger("harel.transport")

WATCH_RETRY_FIRST = 0.5
WATCH_RETRY_MAX = 30.0
# How long the watcher's stream takes to notice `close`: one awaited getMore (`max_await_time_ms`) and its
# round trip. A watcher still inside one after this is named in the log and the client closes under it.
WATCH_AWAIT_MS = 1000
WATCH_STOP_SECONDS = 2.0
# The server's answers that say the deployment has no change streams at all: IllegalOperation (20), "only
# supported on replica sets" (40573, a standalone), CommandNotSupported (115), NotImplemented (238: the
# local server and the embedded mongomock:// client). Then consumers poll only; any other failure of the
# watch is restarted.
NO_CHANGE_STREAMS = frozenset({20, 40573, 115, 238})


def _unsupported(error: PyMongoError) -> bool:
    return isinstance(error, OperationFailure) and error.code in NO_CHANGE_STREAMS


def new_owner_token() -> str:
    return secrets.token_hex(12)


class _MailboxCollection:
    """The client and the executions collection, held the same way by both twins."""

    def __init__(
        self,
        client: Any,
        db_name: str = "harel",
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
        clock: ServerClock | None = None,
        watch: bool = True,
    ) -> None:
        self._client = client
        self._executions = client[db_name][EXECUTIONS]
        self.max_attempts = max_attempts
        self.dedupe_window = dedupe_window
        self.clock = clock or ServerClock()
        self._watch_enabled = watch

    def _claimed(self, found: dict[str, Any] | None, owner: str) -> Claim | None:
        if found is None:
            return None
        claim = replies.parse_claim(found, owner)
        self.clock.observe(claim.server_time)
        return claim

    @staticmethod
    def _extended(claim: Claim, found: dict[str, Any] | None) -> Claim | None:
        until = replies.parse_lease_until(found)
        return dataclasses.replace(claim, lease_until=until) if until is not None else None


@translating
class MongoTransport(_MailboxCollection):
    """Mailboxes in `db_name` of an injected pymongo-compatible client (incl. the embedded mongomock)."""

    def __init__(self, client: Any, db_name: str = "harel", **options: Any) -> None:
        super().__init__(client, db_name, **options)
        self._wake = threading.Event()
        self._watcher: threading.Thread | None = None
        self._closed = threading.Event()

    @classmethod
    def from_url(cls, url: str, db_name: str = "harel", **options: Any) -> MongoTransport:
        from harel.connection import connect

        return cls(connect(url), db_name, **options)

    def send(self, target_id: str, event: Event, *, source: str | None = None) -> SendOutcome:
        write = writes.send_write(target_id, writes.entry(event, source, self.clock.now()))
        if matched(write.send(self._executions)):
            self._wake.set()  # consumers sharing this transport need no change stream to hear of it
            return SendOutcome.QUEUED
        found = list(self._executions.aggregate(queries.send_diagnosis(target_id, event.id)))
        return replies.parse_send_diagnosis(found)

    def claim(self, charts: Sequence[str], lease: float, bound: float) -> Claim | None:
        self._wake.clear()  # this claim sees whatever a wake so far announced: only later ones cut a wait short
        owner = new_owner_token()
        found = writes.claim_write(charts, owner, lease, bound).send(self._executions)
        return self._claimed(found, owner)

    def extend(self, claim: Claim, lease: float) -> Claim | None:
        return self._extended(claim, writes.extend_write(claim, lease).send(self._executions))

    def release(self, claim: Claim, delay: float = 0.0) -> bool:
        return matched(writes.release_write(claim, delay).send(self._executions))

    def fail(self, claim: Claim, failure: Failure) -> bool:
        return matched(writes.fail_write(claim, failure).send(self._executions))

    def parked(self, limit: int = 100) -> list[Parked]:
        found = list(queries.parked_find(limit).open(self._executions))
        return [replies.parse_parked(d) for d in found]

    def retry(self, execution_id: str) -> bool:
        return matched(writes.retry_write(execution_id).send(self._executions))

    def drop(self, execution_id: str, event_id: str) -> bool:
        return matched(writes.drop_write(execution_id, event_id, self.dedupe_window).send(self._executions))

    def pending_count(self) -> int:
        return replies.parse_count(list(self._executions.aggregate(queries.PENDING_COUNT)))

    def wait_hint(self, timeout: float) -> bool:
        self._start_watcher()
        return self._wake.wait(timeout)

    def wake(self) -> None:
        self._wake.set()

    def _start_watcher(self) -> None:
        if not self._watch_enabled or self._watcher is not None:
            return
        self._watcher = threading.Thread(target=self._watch, name="harel-mailbox-watch", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        pause = WATCH_RETRY_FIRST
        while not self._closed.is_set():
            try:
                with sending(WATCH):
                    stream = self._executions.watch(queries.WATCH_PIPELINE, max_await_time_ms=WATCH_AWAIT_MS)
                with stream:
                    pause = WATCH_RETRY_FIRST
                    while not self._closed.is_set():
                        with sending(WATCH):  # one pass per getMore: a pass is counted when it ends
                            change = stream.try_next()
                        if change is not None:
                            self._wake.set()
            except PyMongoError as exc:
                if self._closed.is_set():
                    return  # the client is closing under it: nothing to restart, nothing to report
                if _unsupported(exc):
                    log.info("change streams unavailable, polling only", extra={"error": str(exc)})
                    return
                log.warning("mailbox watch failed, restarting", extra={"error": str(exc), "retry_in": pause})
                self._closed.wait(pause)
                pause = min(WATCH_RETRY_MAX, pause * 2)

    def ensure_indexes(self) -> None:
        for index in MAILBOX_INDEXES:
            index.create_on(self._executions)

    def close(self) -> None:
        """Stop the change-stream watcher, then close the client (shared with the store and heartbeats,
        whose users — a worker's threads — must have stopped first: `Worker.stop`)."""
        self._closed.set()
        if self._watcher is not None:
            self._watcher.join(WATCH_STOP_SECONDS)
            if self._watcher.is_alive():
                log.warning(
                    "threads did not stop in time; left behind, they end quietly when their command returns",
                    extra={"threads": [self._watcher.name]},
                )
        self._client.close()


@translating
class AsyncMongoTransport(_MailboxCollection):
    """The awaitable twin of MongoTransport, on PyMongo's AsyncMongoClient (or an injected Motor client)."""

    def __init__(self, client: Any, db_name: str = "harel", **options: Any) -> None:
        super().__init__(client, db_name, **options)
        self._wake = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    @classmethod
    async def from_url(cls, url: str, db_name: str = "harel", **options: Any) -> AsyncMongoTransport:
        from harel.connection import connect_async

        return cls(await connect_async(url), db_name, **options)

    async def send(self, target_id: str, event: Event, *, source: str | None = None) -> SendOutcome:
        write = writes.send_write(target_id, writes.entry(event, source, self.clock.now()))
        if matched(await write.send(self._executions)):
            self._wake.set()  # consumers sharing this transport need no change stream to hear of it
            return SendOutcome.QUEUED
        found = await drained(self._executions.aggregate(queries.send_diagnosis(target_id, event.id)))
        return replies.parse_send_diagnosis(found)

    async def claim(self, charts: Sequence[str], lease: float, bound: float) -> Claim | None:
        self._wake.clear()  # this claim sees whatever a wake so far announced: only later ones cut a wait short
        owner = new_owner_token()
        found = await writes.claim_write(charts, owner, lease, bound).send(self._executions)
        return self._claimed(found, owner)

    async def extend(self, claim: Claim, lease: float) -> Claim | None:
        return self._extended(claim, await writes.extend_write(claim, lease).send(self._executions))

    async def release(self, claim: Claim, delay: float = 0.0) -> bool:
        return matched(await writes.release_write(claim, delay).send(self._executions))

    async def fail(self, claim: Claim, failure: Failure) -> bool:
        return matched(await writes.fail_write(claim, failure).send(self._executions))

    async def parked(self, limit: int = 100) -> list[Parked]:
        found = await drained(queries.parked_find(limit).open(self._executions))
        return [replies.parse_parked(d) for d in found]

    async def retry(self, execution_id: str) -> bool:
        return matched(await writes.retry_write(execution_id).send(self._executions))

    async def drop(self, execution_id: str, event_id: str) -> bool:
        return matched(
            await writes.drop_write(execution_id, event_id, self.dedupe_window).send(self._executions)
        )

    async def pending_count(self) -> int:
        return replies.parse_count(await drained(self._executions.aggregate(queries.PENDING_COUNT)))

    async def wait_hint(self, timeout: float) -> bool:
        self._start_watcher()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def wake(self) -> None:
        self._wake.set()

    def _start_watcher(self) -> None:
        if self._watch_enabled and self._watcher is None:
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        pause = WATCH_RETRY_FIRST
        while True:
            try:
                stream = await resolved(
                    self._executions.watch(queries.WATCH_PIPELINE, max_await_time_ms=WATCH_AWAIT_MS)
                )
                async with stream as changes:
                    pause = WATCH_RETRY_FIRST
                    async for _ in changes:
                        self._wake.set()
            except PyMongoError as exc:
                if _unsupported(exc):
                    log.info("change streams unavailable, polling only", extra={"error": str(exc)})
                    return
                log.warning("mailbox watch failed, restarting", extra={"error": str(exc), "retry_in": pause})
                await asyncio.sleep(pause)
                pause = min(WATCH_RETRY_MAX, pause * 2)

    async def ensure_indexes(self) -> None:
        for index in MAILBOX_INDEXES:
            await index.create_on(self._executions)

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        await resolved(self._client.close())
