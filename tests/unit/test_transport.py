"""What the mailbox transport decides on its own, apart from the backends' shared contract (which the
mailbox conformance suite checks on every backend): the shape of its decisive queries, its backoff, and
its wake-ups."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pymongo.errors

from harel.executions import writes
from harel.executions.fields import chart_key
from harel.executions.indexes import MAILBOX_INDEXES
from harel.model import Event, Execution
from harel.servertime import NOW
from harel.store.mongo import MongoStore
from harel.transport.base import BACKOFF_CAP_SECONDS, backoff
from harel.transport.mongo import MongoTransport
from harel.transport.wakeups import TaskWakeups, ThreadWakeups, WakePlan
from harel_dev.embedded import EmbeddedClient


def test_backoff_is_exponential_and_capped() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff(50) == BACKOFF_CAP_SECONDS


def test_the_claim_is_one_index_range_decided_on_the_servers_clock() -> None:
    write = writes.claim_write(["order@1", "billing@2"], "owner-1", 30.0, 1234.5)
    assert write.filter == {
        "chart": {"$in": ["order@1", "billing@2"]},
        "wake_at": {"$gte": 0, "$lte": 1234.5},
        "$expr": {"$lte": ["$wake_at", NOW]},
    }, "the chart and one range on the indexed wake_at, no $or; $$NOW decides"
    lease = write.update[1]["$set"]["lease"]
    assert lease["owner"] == {"$literal": "owner-1"} and lease["at"] == NOW
    assert write.sort == (("wake_at", 1),)
    index = next(spec for spec in MAILBOX_INDEXES if spec.name == "wake")
    assert index.keys == (("chart", 1), ("wake_at", 1))
    assert index.partial == {"wake_at": {"$gte": 0}}, "the claim's range implies the partial filter"


def test_every_client_value_enters_a_pipeline_as_a_literal() -> None:
    event = Event(id="$id", name="$name", data={"$key": "$value"})
    write = writes.send_write("$target", writes.entry(event, "$source", 1.0))
    appended = write.update[0]["$set"]["inbox"]["$concatArrays"][1]
    assert set(appended) == {"$literal"}, "the whole entry is data"
    assert write.filter["_id"] == "$target" and write.filter["inbox.id"] == {"$ne": "$id"}


def test_a_send_wakes_a_consumer_waiting_on_the_same_transport() -> None:
    """Without a change stream: workers sharing one process's transport hear of its sends at once."""
    client = EmbeddedClient()
    store, transport = MongoStore(client), MongoTransport(client, watch=False)
    store.create(Execution(id="a", definition_id="order", definition_version=1), now=time.time())
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(transport.wait_hint(5.0)))
    waiter.start()
    time.sleep(0.05)
    transport.send("a", Event(id="e1", name="go"))
    waiter.join(5)
    assert woken == [True]


def _one_event_due(client: Any) -> None:
    MongoStore(client).create(Execution(id="a", definition_id="order", definition_version=1), now=time.time())


def test_a_wake_the_claim_already_saw_does_not_cut_the_next_wait_short() -> None:
    client = EmbeddedClient()
    _one_event_due(client)
    transport = MongoTransport(client, watch=False)
    assert transport.send("a", Event(id="e1", name="go")).name == "QUEUED"
    charts, bound = [chart_key("order", 1)], transport.clock.bound()
    assert transport.claim(charts, 30.0, bound) is not None, "the claim takes the event the send announced"
    assert transport.claim(charts, 30.0, bound) is None
    assert not transport.wait_hint(0.2), "woken by a send the claim had already taken"
    transport.wake()
    assert transport.wait_hint(5.0), "a wake after the claim still cuts the wait short"


def test_the_async_transport_clears_its_wake_at_each_claim_too() -> None:
    import asyncio

    from mongomock_motor import AsyncMongoMockClient

    from harel.transport.aio_mongo import AsyncMongoTransport

    async def scenario() -> list[bool]:
        client = AsyncMongoMockClient(mock_mongo_client=EmbeddedClient())
        transport = AsyncMongoTransport(client, watch=False)
        transport.wake()
        assert await transport.claim([chart_key("order", 1)], 30.0, transport.clock.bound()) is None
        stale = await transport.wait_hint(0.2)
        transport.wake()
        fresh = await transport.wait_hint(5.0)
        return [stale, fresh]

    assert asyncio.run(scenario()) == [False, True]


class _FailingStream:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def __enter__(self) -> Any:
        raise self.error

    def __exit__(self, *exc: object) -> None:
        return None


class _WatchedCollection:
    """A collection whose change stream fails a given number of times, then reports one change."""

    def __init__(self, failures: list[Exception], change: bool = True) -> None:
        self.failures = failures
        self.change = change
        self.watches = 0

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        self.watches += 1
        if self.failures:
            return _FailingStream(self.failures.pop(0))
        self.stream = _OneChange()
        self.stream.given = not self.change
        return self.stream


class _OneChange:
    alive = True

    def __init__(self) -> None:
        self.given = False
        self.reads = 0

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def try_next(self) -> Any:
        self.reads += 1
        if not self.given:
            self.given = True
            return {"operationType": "insert"}
        time.sleep(0.01)
        return None


class _Client:
    def __init__(self, collection: _WatchedCollection) -> None:
        self.collection = collection

    def __getitem__(self, name: str) -> Any:
        return {"executions": self.collection}

    def close(self) -> None:
        return None


def test_the_wake_up_watch_restarts_after_an_error(monkeypatch: Any) -> None:
    monkeypatch.setattr("harel.transport.wakeups.WATCH_RETRY_FIRST", 0.01)
    collection = _WatchedCollection([pymongo.errors.AutoReconnect("primary stepped down")] * 2)
    transport = MongoTransport(_Client(collection))
    assert transport.wait_hint(5.0), "woken once the watch came back"
    assert collection.watches == 3
    transport.close()


def test_a_deployment_without_change_streams_polls_only() -> None:
    refused = pymongo.errors.OperationFailure(
        "The $changeStream stage is only supported on replica sets", 40573
    )
    collection = _WatchedCollection([refused])
    transport = MongoTransport(_Client(collection))
    assert not transport.wait_hint(0.2)
    assert collection.watches == 1, "not retried: the deployment has none"
    transport.close()


def test_the_watch_reads_its_stream_only_while_a_consumer_waits() -> None:
    collection = _WatchedCollection([], change=False)
    wakeups = ThreadWakeups(collection, True, WakePlan(time.time))
    assert wakeups.wait(5.0), "woken as the stream opened"
    wakeups.clear()  # as a claim does

    def waiting_until_read(reads: int) -> None:
        """Consumers wait, one short wait after another, until the stream was read `reads` times."""
        deadline = time.monotonic() + 10.0
        while collection.stream.reads < reads and time.monotonic() < deadline:
            assert not wakeups.wait(0.05), "nothing was reported"

    waiting_until_read(3)
    read_while_waiting = collection.stream.reads
    assert read_while_waiting >= 3, "a waiting consumer's stream is read one getMore after another"
    time.sleep(0.3)  # no consumer waits: about 30 reads of this stream's pace if it were read anyway
    assert collection.stream.reads <= read_while_waiting + 1, "at most the read under way when the wait ended"
    waiting_until_read(read_while_waiting + 2)
    assert collection.stream.reads >= read_while_waiting + 2, "read again once a consumer waits"
    wakeups.stop()


class _AsyncOneChange(_OneChange):
    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def try_next(self) -> Any:  # type: ignore[override]
        self.reads += 1
        if not self.given:
            self.given = True
            return {"operationType": "insert"}
        await asyncio.sleep(0.01)
        return None


class _AsyncWatchedCollection:
    def watch(self, *args: Any, **kwargs: Any) -> Any:
        self.stream = _AsyncOneChange()
        self.stream.given = True  # no change: only the stream's opening wakes
        return self.stream


def test_the_async_watch_reads_its_stream_only_while_a_consumer_waits() -> None:
    collection = _AsyncWatchedCollection()
    wakeups = TaskWakeups(collection, True, WakePlan(time.time))

    async def scenario() -> tuple[int, int, int]:
        assert await wakeups.wait(5.0), "woken as the stream opened"
        wakeups.clear()  # as a claim does

        async def waiting_until_read(reads: int) -> int:
            """Consumers wait, one short wait after another, until the stream was read `reads` times."""
            deadline = time.monotonic() + 10.0
            while collection.stream.reads < reads and time.monotonic() < deadline:
                assert not await wakeups.wait(0.05), "nothing was reported"
            return int(collection.stream.reads)

        waiting = await waiting_until_read(3)
        await asyncio.sleep(0.3)
        idle = collection.stream.reads
        again = await waiting_until_read(idle + 2)
        await wakeups.stop()
        return waiting, idle, again

    waiting, idle, again = asyncio.run(scenario())
    assert waiting >= 3, "a waiting consumer's stream is read one getMore after another"
    assert idle <= waiting + 1, "no consumer waited: at most the read under way when the wait ended"
    assert again >= idle + 2, "read again once a consumer waits"


def test_a_lease_extension_reported_as_a_dotted_field_plans_no_wake_up() -> None:
    plan = WakePlan(time.time)
    lease_end = time.time() + 10.0
    extension = {
        "operationType": "update",
        "documentKey": {"_id": "exe-1"},
        "updateDescription": {
            "updatedFields": {"lease.until": lease_end, "inbox_at": lease_end, "wake_at": lease_end}
        },
    }
    assert not plan.heard(extension)
    assert plan.pause(30.0) == 30.0, "nothing planned at the holder's lease end"
    timer = {
        "operationType": "update",
        "documentKey": {"_id": "exe-2"},
        "updateDescription": {"updatedFields": {"inbox_at": None, "wake_at": time.time() + 20.0}},
    }
    assert not plan.heard(timer)
    assert 15.0 < plan.pause(30.0) <= 20.0, "a timer armed elsewhere is planned"
