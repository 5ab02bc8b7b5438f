"""AsyncMongoTransport: the awaitable mailbox transport, on PyMongo's AsyncMongoClient (`from_url`) or an
injected Motor client. MongoTransport (harel.transport.mongo) is generated from this file by
sdk/tools/synchro.py: edit this one, then regenerate (`make synchro`).

Each execution's mailbox is in its own document on the same replica set (`harel.executions.fields` has
the document model). A `send` is one update of the target; a `claim` is one `findAndModify` that leases the
execution whose mailbox has been due longest (of the charts the worker serves) and returns its data and
pending events; the store's `commit_claim` removes the applied events and ends the lease in the same update
as the steps. Leases and due times are on the server's clock (`$$NOW`); the owner token fences every write
of a claim. Every method raises the SDK's errors, never the driver's (`harel.driver_errors`).

An attempt that raises is recorded on the execution (`attempts`, `last_error`) and retried after a
backoff, with the events behind it waiting; after `max_attempts` the execution is parked with the event
and its error until an operator retries or drops it (`harel dead`), so later events never overtake it.

Where the deployment has change streams, a mailbox that becomes due wakes waiting consumers early
(`harel.transport.wakeups`): a hint only, polling stays the source of truth.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence
from typing import Any

from harel.commands import drained, matched, resolved
from harel.driver_errors import translating
from harel.errors import UnreadableExecution
from harel.executions import queries, replies, writes
from harel.executions.fields import DEFAULT_DEDUPE_WINDOW, EXECUTIONS
from harel.executions.indexes import mailbox_indexes
from harel.executions.partitions import META, SINGLE, WINDOW_LIMIT, Partitions, meta_find, parse_partitions
from harel.executions.records import Claim, Failure, Parked, SendOutcome
from harel.model import Event
from harel.servertime import ServerClock
from harel.transport.base import DEFAULT_MAX_ATTEMPTS
from harel.transport.rotation import Rotation
from harel.transport.wakeups import TaskWakeups, WakePlan, watch_pipeline


def new_owner_token() -> str:
    return secrets.token_hex(12)


@translating
class AsyncMongoTransport:
    """Mailboxes in `db_name` of an injected AsyncMongoClient-compatible client."""

    def __init__(
        self,
        client: Any,
        db_name: str = "harel",
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
        clock: ServerClock | None = None,
        watch: bool = True,
        partitions: Partitions = SINGLE,
        zones: Sequence[str] = (),
    ) -> None:
        self._client = client
        self._executions = client[db_name][EXECUTIONS]
        self.max_attempts = max_attempts
        self.dedupe_window = dedupe_window
        self.clock = clock or ServerClock()
        self.partitions = partitions
        self.zones = partitions.served(zones)
        self._rotations: dict[int, Rotation] = {}
        plan = WakePlan(self.clock.now, partitions)
        self._wakeups = TaskWakeups(self._executions, watch, plan, watch_pipeline(partitions, self.zones))

    @classmethod
    async def from_url(cls, url: str, db_name: str = "harel", **options: Any) -> AsyncMongoTransport:
        from harel.connection import connect_async

        client = await connect_async(url)
        partitions = parse_partitions(await meta_find().one(client[db_name][META]))
        return cls(client, db_name, partitions=partitions, **options)

    def _claimed(self, found: dict[str, Any] | None, owner: str) -> Claim | None:
        if found is None:
            return None
        claim = replies.parse_claim(found, owner)
        self.clock.observe(claim.server_time)
        return claim

    async def send(self, target_id: str, event: Event, *, source: str | None = None) -> SendOutcome:
        write = self.partitions.keyed(
            writes.send_write(target_id, writes.entry(event, source, self.clock.now()))
        )
        if matched(await write.send(self._executions)):
            self._wakeups.plan.made_claimable([target_id])
            self._wakeups.set()  # consumers sharing this transport need no change stream to hear of it
            return SendOutcome.QUEUED
        diagnosis = self.partitions.keyed_pipeline(queries.send_diagnosis(target_id, event.id))
        found = await drained(self._executions.aggregate(diagnosis))
        return replies.parse_send_diagnosis(found)

    async def claim(self, charts: Sequence[str], lease: float, bound: float) -> Claim | None:
        self._wakeups.clear()  # this claim sees whatever a wake so far announced: only later ones cut a wait short
        owner = new_owner_token()
        claim = writes.claim_write(charts, owner, lease, bound)
        if self.partitions.single:
            return self._claimed(await claim.send(self._executions), owner)
        rotation = self._rotation(len(charts))
        for window in rotation.order():
            found = await self.partitions.within(claim, window).send(self._executions)
            if found is not None:
                rotation.found(window)
                return self._claimed(found, owner)
            rotation.empty(window)
        return None

    def _rotation(self, charts: int) -> Rotation:
        """The windows a claim of `charts` chart versions looks in: narrow enough that the claim's sort is
        served by merging at most WINDOW_LIMIT index ranges (one per partition and chart)."""
        if charts not in self._rotations:
            windows = self.partitions.windows(WINDOW_LIMIT // max(1, charts), self.zones)
            self._rotations[charts] = self._wakeups.plan.rotate(Rotation(windows))
        return self._rotations[charts]

    async def extend(self, claim: Claim, lease: float) -> Claim | None:
        extended = await self.partitions.keyed(writes.extend_write(claim, lease)).send(self._executions)
        until = replies.parse_lease_until(extended)
        return dataclasses.replace(claim, lease_until=until) if until is not None else None

    async def release(self, claim: Claim, delay: float = 0.0) -> bool:
        return matched(await self.partitions.keyed(writes.release_write(claim, delay)).send(self._executions))

    async def fail(self, claim: Claim, failure: Failure) -> bool:
        return matched(await self.partitions.keyed(writes.fail_write(claim, failure)).send(self._executions))

    async def park_unreadable(self, unreadable: UnreadableExecution) -> bool:
        park = self.partitions.keyed(writes.park_unreadable_write(unreadable))
        return matched(await park.send(self._executions))

    async def parked(self, limit: int = 100) -> list[Parked]:
        found = await drained(queries.parked_find(limit).open(self._executions))
        return [replies.parse_parked(d) for d in found]

    async def retry(self, execution_id: str) -> bool:
        return matched(await self.partitions.keyed(writes.retry_write(execution_id)).send(self._executions))

    async def drop(self, execution_id: str, event_id: str) -> bool:
        drop = self.partitions.keyed(writes.drop_write(execution_id, event_id, self.dedupe_window))
        return matched(await drop.send(self._executions))

    async def pending_count(self) -> int:
        return replies.parse_count(await drained(self._executions.aggregate(queries.PENDING_COUNT)))

    async def wait_hint(self, timeout: float) -> bool:
        return await self._wakeups.wait(timeout)

    @property
    def wake_plan(self) -> WakePlan:
        return self._wakeups.plan

    async def plan_next_wake(self, charts: Sequence[str]) -> None:
        """Look up the earliest `wake_at` of `charts` (due or not) and plan a wake-up for it."""
        earliest = []
        for window in self.partitions.windows(WINDOW_LIMIT // max(1, len(charts)), self.zones):
            found = self.partitions.within(queries.next_wake_find(list(charts)), window)
            earliest.append(replies.parse_wake(await drained(found.open(self._executions))))
        self._wakeups.plan.plan(min((at for at in earliest if at is not None), default=None), looked=True)

    def wake(self, made_claimable: Sequence[str] = ()) -> None:
        self._wakeups.plan.made_claimable(made_claimable)
        self._wakeups.set()

    async def ensure_indexes(self) -> None:
        for index in mailbox_indexes(not self.partitions.single):
            await index.create_on(self._executions)
        await writes.stamp_wake_write().send(self._executions)

    async def close(self) -> None:
        """Stop the change-stream watcher, then close the client (shared with the store and heartbeats,
        whose users — a worker's threads — must have stopped first: `Worker.stop`)."""
        await self._wakeups.stop()
        await resolved(self._client.close())
