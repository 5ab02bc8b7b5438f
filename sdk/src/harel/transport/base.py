"""The queue seam: each execution's mailbox, claimed by one worker at a time, in the order events arrived.

Events wait in their target execution's mailbox (`harel.executions.fields` has the document model). A
worker claims an *execution* whose mailbox is due — a lease fenced by an owner token, on the server's clock
— and steps its pending events in arrival order; the commit that records the steps removes them from the
mailbox and ends the lease. So one execution's events are applied one at a time, in the order they were
sent, whatever the number of workers and consumers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from harel.errors import UnreadableExecution
from harel.executions.records import Claim, Failure, Parked, Pending, SendOutcome
from harel.model import Event
from harel.servertime import ServerClock
from harel.transport.wakeups import WakePlan

__all__ = [
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_CAP_SECONDS",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_MAX_ATTEMPTS",
    "Claim",
    "Failure",
    "Parked",
    "Pending",
    "SendOutcome",
    "Transport",
    "backoff",
]

DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_MAX_ATTEMPTS = 8
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 30.0


def backoff(attempts: int) -> float:
    """Delay before the next attempt after `attempts` failed ones: exponential, capped."""
    return min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2.0 ** max(0, attempts - 1))


@runtime_checkable
class Transport(Protocol):
    """Sends into mailboxes, claims executions, and the operator's dead-letter actions. `clock` is this
    process's estimate of the deployment's time, kept from the server times claims return."""

    max_attempts: int
    clock: ServerClock

    def send(self, target_id: str, event: Event, *, source: str | None = None) -> SendOutcome:
        """Append to the target's mailbox unless the event id is already there or processed."""

    def claim(self, charts: Sequence[str], lease: float, bound: float) -> Claim | None:
        """Lease the execution (of one of `charts`) whose mailbox has been due longest, or None.
        `bound` is an upper estimate of the server's time, for the index range only. UnreadableExecution
        when the leased execution's document cannot be read (the lease holds, for `park_unreadable`)."""

    def extend(self, claim: Claim, lease: float) -> Claim | None:
        """Push the lease's end out while still the owner; None when the lease was lost."""

    def release(self, claim: Claim, delay: float = 0.0) -> bool:
        """Give the execution back without applying anything (shutdown); False when no longer the owner."""

    def fail(self, claim: Claim, failure: Failure) -> bool:
        """Record a failed attempt at the head event (nothing applied): retry later, or park."""

    def park_unreadable(self, unreadable: UnreadableExecution) -> bool:
        """Park the execution a claim could not read (`claim` raised `unreadable`), while the claim's lease
        holds; False when no longer the owner."""

    def parked(self, limit: int = 100) -> list[Parked]:
        """Executions waiting for an operator, oldest first."""

    def retry(self, execution_id: str) -> bool:
        """Unpark: the dead-lettered event is attempted again now, with its attempts reset."""

    def drop(self, execution_id: str, event_id: str) -> bool:
        """Unpark by removing the dead-lettered event (recorded as processed, so it cannot return)."""

    def pending_count(self) -> int:
        """Events waiting in all mailboxes."""

    def wait_hint(self, timeout: float) -> bool:
        """Block up to `timeout` or until a mailbox may have become due (a hint only: polling stays the
        truth)."""

    def wake(self, made_claimable: Sequence[str] = ()) -> None:
        """Wake this process's waiters: it just made mailboxes due (`made_claimable`: the children it
        created, for one), which its change stream then reports as nothing new."""

    @property
    def wake_plan(self) -> WakePlan:
        """When this process expects executions to become claimable (`harel.transport.wakeups`)."""

    def plan_next_wake(self, charts: Sequence[str]) -> None:
        """Look up the earliest time an execution of `charts` becomes claimable, and plan a wake-up then."""

    def ensure_indexes(self) -> None: ...

    def close(self) -> None: ...
