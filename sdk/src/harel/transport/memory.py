"""An in-process transport for the embedded `memory://` mode: the same lease semantics as MongoTransport."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from harel.model import Event
from harel.transport._messages import ERROR_LIMIT, new_owner_token
from harel.transport.base import DEFAULT_LEASE_SECONDS, DEFAULT_MAX_ATTEMPTS, DeadLetter, Message, backoff


@dataclass
class _Queued:
    target_id: str | None
    event: Event
    visible_at: float
    enqueued_at: float
    attempts: int = 0
    owner: str | None = None


class MemoryTransport:
    def __init__(self, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS, clock: Callable[[], float] = time.time):
        self.max_attempts = max_attempts
        self._clock = clock
        self._lock = threading.Lock()
        self._sent = threading.Condition(self._lock)
        self._queue: dict[str, _Queued] = {}
        self._dead: dict[str, DeadLetter] = {}

    def send(self, target_id: str | None, event: Event, delay: float = 0.0) -> None:
        now = self._clock()
        with self._lock:
            if event.id not in self._queue:
                self._queue[event.id] = _Queued(target_id, event, now + max(0.0, delay), now)
                self._sent.notify_all()

    def claim(self, lease: float = DEFAULT_LEASE_SECONDS) -> Message | None:
        now = self._clock()
        with self._lock:
            visible = [(m.visible_at, mid) for mid, m in self._queue.items() if m.visible_at <= now]
            if not visible:
                return None
            _, mid = min(visible)
            queued = self._queue[mid]
            queued.owner = new_owner_token()
            queued.attempts += 1
            queued.visible_at = now + lease
            return Message(
                mid,
                queued.target_id,
                queued.event,
                queued.attempts,
                queued.owner,
                now + lease,
                queued.enqueued_at,
            )

    def _owned(self, message: Message) -> _Queued | None:
        queued = self._queue.get(message.id)
        return queued if queued is not None and queued.owner == message.owner else None

    def ack(self, message: Message) -> bool:
        with self._lock:
            if self._owned(message) is None:
                return False
            del self._queue[message.id]
            return True

    def extend(self, message: Message, lease: float = DEFAULT_LEASE_SECONDS) -> Message | None:
        now = self._clock()
        with self._lock:
            queued = self._owned(message)
            if queued is None:
                return None
            queued.visible_at = now + lease
            return replace(message, lease_until=now + lease)

    def nack(self, message: Message, error: str) -> bool:
        now = self._clock()
        with self._lock:
            queued = self._owned(message)
            if message.attempts >= self.max_attempts:
                self._dead.setdefault(
                    message.id,
                    DeadLetter(
                        message.id,
                        message.target_id,
                        message.event,
                        message.attempts,
                        error[:ERROR_LIMIT],
                        now,
                    ),
                )
                if queued is not None:
                    del self._queue[message.id]
                return True
            if queued is not None:
                queued.owner = None
                queued.visible_at = now + backoff(message.attempts)
            return False

    def release(self, message: Message, delay: float = 0.0) -> None:
        with self._lock:
            queued = self._owned(message)
            if queued is not None:
                queued.owner = None
                queued.attempts -= 1
                queued.visible_at = self._clock() + max(0.0, delay)

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        with self._lock:
            return sorted(self._dead.values(), key=lambda d: d.dead_at)[:limit]

    def depth(self) -> int:
        with self._lock:
            return len(self._queue)

    def next_visible_at(self) -> float | None:
        with self._lock:
            return min((m.visible_at for m in self._queue.values()), default=None)

    def wait_hint(self, timeout: float) -> bool:
        with self._lock:
            return self._sent.wait(timeout)

    def ensure_indexes(self) -> None:
        """Nothing to index in memory."""

    def close(self) -> None:
        """Nothing to release in memory."""
