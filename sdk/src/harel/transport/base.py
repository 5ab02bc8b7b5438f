"""The queue seam: at-least-once delivery of events to executions, by lease."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from harel.model import Event

DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_MAX_ATTEMPTS = 8
BACKOFF_BASE_SECONDS = 0.5
BACKOFF_CAP_SECONDS = 30.0


@dataclass(frozen=True)
class Message:
    """A claimed event. `owner` is the claim token: ack, extend and nack succeed only while it holds."""

    id: str
    target_id: str | None
    event: Event
    attempts: int
    owner: str
    lease_until: float
    enqueued_at: float


@dataclass(frozen=True)
class DeadLetter:
    id: str
    target_id: str | None
    event: Event
    attempts: int
    last_error: str
    dead_at: float


def backoff(attempts: int) -> float:
    """Delay before the next delivery after `attempts` failed ones: exponential, capped."""
    return min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** max(0, attempts - 1))


@runtime_checkable
class Transport(Protocol):
    """Events in, leased messages out. A message is never deleted on claim, only on a valid ack."""

    max_attempts: int

    def send(self, target_id: str | None, event: Event, delay: float = 0.0) -> None:
        """Enqueue; sending an event id that is already queued is a no-op (relays may send twice)."""

    def claim(self, lease: float = DEFAULT_LEASE_SECONDS) -> Message | None:
        """The oldest visible message, leased to a new owner token, or None."""

    def ack(self, message: Message) -> bool:
        """Delete the message if this claim still owns it; False means the lease was lost."""

    def extend(self, message: Message, lease: float = DEFAULT_LEASE_SECONDS) -> Message | None:
        """Push the lease end out while still the owner; None when the lease was lost."""

    def nack(self, message: Message, error: str) -> bool:
        """Failed attempt: redeliver after a backoff, or dead-letter once `max_attempts` is reached.
        Returns True when the message was dead-lettered."""

    def release(self, message: Message, delay: float = 0.0) -> None:
        """Give the message back without counting the attempt (shutdown, or the target is not ready)."""

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]: ...

    def depth(self) -> int:
        """Messages queued (visible or leased)."""

    def next_visible_at(self) -> float | None:
        """When the earliest message becomes claimable: how long a consumer may sleep."""

    def wait_hint(self, timeout: float) -> bool:
        """Block up to `timeout` or until a send may have happened (a hint only; polling stays the truth)."""

    def ensure_indexes(self) -> None: ...

    def close(self) -> None: ...
