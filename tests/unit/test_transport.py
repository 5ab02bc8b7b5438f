"""The transport contract on every backend: memory, MongoTransport on mongomock, AsyncMongoTransport on
mongomock-motor (driven through a small sync adapter so each test is written once)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import mongomock
import pytest
from mongomock_motor import AsyncMongoMockClient

from harel.model import Event
from harel.transport.base import BACKOFF_CAP_SECONDS, backoff
from harel.transport.memory import MemoryTransport
from harel.transport.mongo import AsyncMongoTransport, MongoTransport


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class SyncAsync:
    """Runs an async transport's coroutines on a private loop so the same tests drive it."""

    def __init__(self, inner: AsyncMongoTransport) -> None:
        self._inner = inner
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.max_attempts = inner.max_attempts

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(method(*args, **kwargs), self._loop).result(10)

        return call

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


@pytest.fixture(params=["memory", "mongomock", "mongomock-motor"])
def transport(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Clock]]:
    clock = Clock()
    if request.param == "memory":
        yield MemoryTransport(max_attempts=3, clock=clock), clock
    elif request.param == "mongomock":
        t = MongoTransport(mongomock.MongoClient(), max_attempts=3, clock=clock, watch=False)
        t.ensure_indexes()
        yield t, clock
    else:
        inner = AsyncMongoTransport(AsyncMongoMockClient(), max_attempts=3, clock=clock, watch=False)
        adapter = SyncAsync(inner)
        adapter.ensure_indexes()
        yield adapter, clock
        adapter.stop()


def ev(n: int) -> Event:
    return Event(id=f"e{n}", name="go", data={"n": n})


def test_claim_leases_without_deleting_and_ack_deletes(transport: tuple[Any, Clock]) -> None:
    t, _ = transport
    t.send("x", ev(1))
    message = t.claim(lease=10)
    assert message is not None and message.event == ev(1) and message.target_id == "x"
    assert message.attempts == 1
    assert t.depth() == 1, "a claim must lease, not delete"
    assert t.claim(lease=10) is None, "a leased message is invisible to other consumers"
    assert t.ack(message)
    assert t.depth() == 0


def test_send_is_idempotent_by_event_id(transport: tuple[Any, Clock]) -> None:
    t, _ = transport
    t.send("x", ev(1))
    t.send("x", ev(1))
    assert t.depth() == 1


def test_oldest_visible_first_and_delay(transport: tuple[Any, Clock]) -> None:
    t, clock = transport
    t.send("x", ev(1), delay=5)
    clock.now += 1
    t.send("x", ev(2))
    first = t.claim()
    assert first is not None and first.id == "e2"
    assert t.claim() is None, "the delayed message is not visible yet"
    clock.now += 5
    second = t.claim()
    assert second is not None and second.id == "e1"
    assert t.next_visible_at() is not None


def test_expired_lease_is_reclaimed_and_late_ack_refused(transport: tuple[Any, Clock]) -> None:
    t, clock = transport
    t.send("x", ev(1))
    first = t.claim(lease=5)
    clock.now += 6
    second = t.claim(lease=5)
    assert second is not None and second.id == first.id and second.owner != first.owner
    assert second.attempts == 2
    assert not t.ack(first), "the first owner lost its lease"
    assert t.extend(first) is None
    assert t.ack(second)


def test_extend_keeps_the_lease(transport: tuple[Any, Clock]) -> None:
    t, clock = transport
    t.send("x", ev(1))
    message = t.claim(lease=5)
    clock.now += 4
    extended = t.extend(message, lease=5)
    assert extended is not None and extended.lease_until == clock.now + 5
    clock.now += 3
    assert t.claim() is None, "an extended lease still holds"
    assert t.ack(extended)


def test_nack_backs_off_then_dead_letters_with_last_error(transport: tuple[Any, Clock]) -> None:
    t, clock = transport
    t.send("x", ev(1))
    for attempt in range(1, 4):
        message = t.claim(lease=5)
        assert message is not None and message.attempts == attempt
        dead = t.nack(message, f"boom {attempt}")
        assert dead is (attempt == 3)
        if not dead:
            assert t.claim() is None, "a nacked message waits for its backoff"
            clock.now += backoff(attempt) + 0.001
    assert t.depth() == 0
    [letter] = t.dead_letters()
    assert letter.id == "e1" and letter.attempts == 3 and letter.last_error == "boom 3"
    assert letter.event == ev(1)


def test_release_does_not_count_an_attempt(transport: tuple[Any, Clock]) -> None:
    t, clock = transport
    t.send("x", ev(1))
    message = t.claim()
    t.release(message, delay=1)
    assert t.claim() is None
    clock.now += 1
    again = t.claim()
    assert again is not None and again.attempts == 1


def test_backoff_is_exponential_and_capped() -> None:
    assert backoff(1) < backoff(2) < backoff(3)
    assert backoff(100) == BACKOFF_CAP_SECONDS


def test_memory_wait_hint_wakes_on_send() -> None:
    t = MemoryTransport()
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(t.wait_hint(5)))
    waiter.start()
    for n in range(200):  # a send before the waiter waits is missed (a hint only), so keep sending
        t.send("x", ev(n))
        waiter.join(0.01)
        if not waiter.is_alive():
            break
    assert woke == [True]


def test_claim_query_uses_one_indexed_field_without_or() -> None:
    from harel.transport import _messages as q

    flt = q.claim_filter(5.0)
    assert list(flt) == ["visible_at"] and "$or" not in repr(flt)
    assert ("queue", [("visible_at", 1)]) in [(c, k) for c, k, _ in q.INDEXES]
