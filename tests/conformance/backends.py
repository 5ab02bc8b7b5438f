"""The store backends the conformance suite runs on, as a registry of factories.

Each backend opens a `Harness`: a store with a synchronous face (the async store runs through
`SyncFacade` on a private event loop, so every check is written once), a reader for the raw stored
document, the log of every collection call the store made and a switch to make one of those calls fail. A later tier adds a backend by appending a `Backend` to `BACKENDS`
(or calling `register`); every check in the suite then runs on it too.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from harel.aio_store import AsyncMongoStore
from harel.executions.partitions import SINGLE, Partitions
from harel.servertime import ServerClock
from harel.store.mongo import MongoStore
from harel.transport.aio_mongo import AsyncMongoTransport
from harel.transport.mongo import MongoTransport
from harel_dev.embedded import EmbeddedClient
from tests.conftest import REAL_MONGO_URL
from tests.fake_mongod.server import FakeMongod

WRITE_METHODS = frozenset({"update_one", "insert_one", "find_one_and_update", "update_many", "replace_one"})


class InjectedFault(ConnectionError):
    """A collection call made to fail by a test: a lost request or a lost reply."""


@dataclass
class Call:
    collection: str
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any = None


@dataclass
class Fault:
    """Fail the `nth` write call from now: `before` it reaches the server, or `after` (reply lost)."""

    nth: int
    when: str
    error: BaseException
    seen: int = 0


@dataclass
class Recorder:
    calls: list[Call] = field(default_factory=list)
    fault: Fault | None = None

    def fail_write(self, nth: int, when: str = "before", error: BaseException | None = None) -> None:
        self.fault = Fault(nth, when, error or InjectedFault(f"injected fault on write call {nth} ({when})"))

    def clear(self) -> None:
        self.calls.clear()
        self.fault = None

    def of(self, collection: str, method: str | None = None) -> list[Call]:
        return [c for c in self.calls if c.collection == collection and method in (None, c.method)]

    def _due(self, method: str, when: str) -> BaseException | None:
        fault = self.fault
        if fault is None or method not in WRITE_METHODS:
            return None
        if when == "before":
            fault.seen += 1
        if fault.seen == fault.nth and fault.when == when:
            self.fault = None
            return fault.error
        return None


class RecordingCollection:
    """Passes every call through to the real collection, logging it and applying an armed fault."""

    def __init__(self, collection: Any, name: str, recorder: Recorder) -> None:
        self._collection = collection
        self._name = name
        self._recorder = recorder

    def __getattr__(self, method: str) -> Any:
        target = getattr(self._collection, method)
        if not callable(target):
            return target
        recorder = self._recorder

        def call(*args: Any, **kwargs: Any) -> Any:
            # Copied: some clients (mongomock) write into the arguments they are given.
            record = Call(self._name, method, copy.deepcopy(args), copy.deepcopy(kwargs))
            recorder.calls.append(record)
            if (error := recorder._due(method, "before")) is not None:
                raise error
            result = target(*args, **kwargs)
            if inspect.isawaitable(result):
                return _settled(result, record, recorder, method)
            record.result = result
            if (error := recorder._due(method, "after")) is not None:
                raise error
            return result

        return call


async def _settled(pending: Any, record: Call, recorder: Recorder, method: str) -> Any:
    record.result = await pending
    if (error := recorder._due(method, "after")) is not None:
        raise error
    return record.result


class RecordingClient:
    def __init__(self, client: Any, recorder: Recorder) -> None:
        self._client = client
        self._recorder = recorder

    def __getitem__(self, db_name: str) -> RecordingDatabase:
        return RecordingDatabase(self._client[db_name], self._recorder)

    def close(self) -> Any:
        return self._client.close()


class RecordingDatabase:
    def __init__(self, database: Any, recorder: Recorder) -> None:
        self._database = database
        self._recorder = recorder

    def __getitem__(self, name: str) -> RecordingCollection:
        return RecordingCollection(self._database[name], name, self._recorder)


class SyncFacade:
    """An async store or transport driven synchronously: each coroutine runs to completion on a private
    loop."""

    def __init__(self, store: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        def run(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run_until_complete(attribute(*args, **kwargs))

        return run


@dataclass
class StoreOptions:
    trace_max: int | None = None
    dedupe_window: int | None = None
    # A MongoStore / AsyncMongoStore (MongoTransport) subclass to run instead: the broken ones use this.
    store_class: type | None = None
    transport_class: type | None = None

    def kwargs(self) -> dict[str, int]:
        given = {"trace_max": self.trace_max, "dedupe_window": self.dedupe_window}
        return {key: value for key, value in given.items() if value is not None}


@dataclass
class Harness:
    """One store and the transport over the same executions. `database` is the raw (synchronous) database
    behind the store, read past the store; `recorder` logs the collection calls of the store and the
    transport; `sender(clock)` is one more transport over the same executions whose clock is `clock`, as a
    second client whose clock disagrees with the first's."""

    backend: str
    store: Any
    transport: Any
    database: Any
    recorder: Recorder
    reopen: Callable[[StoreOptions], Harness]
    sender: Callable[[ServerClock], Any]
    partitions: Partitions = SINGLE

    def key_fields(self, execution_id: str) -> dict[str, Any]:
        """The shard-key fields an execution's document holds besides `_id`: none on one partition."""
        return {k: v for k, v in self.partitions.key(execution_id).items() if k != "_id"}

    def raw(self, execution_id: str) -> dict[str, Any] | None:
        """The stored document, read from the database past the store."""
        return self.database["executions"].find_one({"_id": execution_id})

    def fresh(self, **options: Any) -> Harness:
        """A new, empty store of the same backend with other options."""
        return self.reopen(StoreOptions(**options))


Opener = Callable[[StoreOptions, Callable[[StoreOptions], Harness]], AbstractContextManager[Harness]]


@dataclass(frozen=True)
class Backend:
    name: str
    open: Opener
    marks: tuple[pytest.MarkDecorator, ...] = ()


@contextmanager
def mongomock_backend(options: StoreOptions, reopen: Callable[[StoreOptions], Harness]) -> Iterator[Harness]:
    """The embedded client (mongomock serialised, with `$$NOW`), as `mongomock://` runs it."""
    client = EmbeddedClient()
    recorder = Recorder()
    recording = RecordingClient(client, recorder)
    store = (options.store_class or MongoStore)(recording, **options.kwargs())
    transport_class = options.transport_class or MongoTransport
    transport = transport_class(recording, watch=False)

    def sender(clock: ServerClock) -> Any:
        return transport_class(recording, watch=False, clock=clock)

    yield Harness("mongomock", store, transport, client["harel"], recorder, reopen, sender)


# Sixteen partitions in one zone: every command on one execution carries its `p`, every claim, relay and
# sweep looks in the zone's partitions (`p: {$in: [...]}`). One zone keeps one window, so the store's order
# across executions (oldest first) is the order these tests pin; windows and zones in turn are
# tests/unit/test_partitions.py's, and several shards' tests/wire/test_sharded_cluster.py's.
PARTITIONED = Partitions(16)


class _PartitionedExecutions:
    """The raw `executions` collection of a partitioned deployment: a document a test stores past the store
    gets its `p`, as every stored execution has one there."""

    def __init__(self, collection: Any, partitions: Partitions) -> None:
        self._collection = collection
        self._partitions = partitions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)

    def _with_p(self, document: dict[str, Any]) -> dict[str, Any]:
        return {"p": self._partitions.of(document["_id"]), **document}

    def insert_one(self, document: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        return self._collection.insert_one(self._with_p(document), *args, **kwargs)

    def insert_many(self, documents: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        return self._collection.insert_many([self._with_p(d) for d in documents], *args, **kwargs)


class _PartitionedDatabase:
    def __init__(self, database: Any, partitions: Partitions) -> None:
        self._database = database
        self._partitions = partitions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._database, name)

    def __getitem__(self, name: str) -> Any:
        collection = self._database[name]
        return _PartitionedExecutions(collection, self._partitions) if name == "executions" else collection


@contextmanager
def mongomock_partitioned_backend(
    options: StoreOptions, reopen: Callable[[StoreOptions], Harness]
) -> Iterator[Harness]:
    """The embedded client with P = 16, as a partitioned deployment runs the store and the transport."""
    client = EmbeddedClient()
    recorder = Recorder()
    recording = RecordingClient(client, recorder)
    store = (options.store_class or MongoStore)(recording, partitions=PARTITIONED, **options.kwargs())
    transport_class = options.transport_class or MongoTransport
    transport = transport_class(recording, watch=False, partitions=PARTITIONED)

    def sender(clock: ServerClock) -> Any:
        return transport_class(recording, watch=False, clock=clock, partitions=PARTITIONED)

    database = _PartitionedDatabase(client["harel"], PARTITIONED)
    yield Harness("mongomock-partitioned", store, transport, database, recorder, reopen, sender, PARTITIONED)


@contextmanager
def mongomock_motor_backend(
    options: StoreOptions, reopen: Callable[[StoreOptions], Harness]
) -> Iterator[Harness]:
    from mongomock_motor import AsyncMongoMockClient

    sync_client = EmbeddedClient()
    recorder = Recorder()
    loop = asyncio.new_event_loop()
    try:
        client = RecordingClient(
            AsyncMongoMockClient(mock_mongo_client=sync_client, mock_io_loop=loop), recorder
        )
        store_class = options.store_class or AsyncMongoStore
        store = store_class(client, **options.kwargs())
        transport = SyncFacade(AsyncMongoTransport(client, watch=False), loop)

        def sender(clock: ServerClock) -> Any:
            return SyncFacade(AsyncMongoTransport(client, watch=False, clock=clock), loop)

        yield Harness(
            "mongomock-motor",
            SyncFacade(store, loop),
            transport,
            sync_client["harel"],
            recorder,
            reopen,
            sender,
        )
    finally:
        loop.close()


def _server_mongo(
    name: str, url: str, options: StoreOptions, reopen: Callable[[StoreOptions], Harness]
) -> Iterator[Harness]:
    import pymongo

    db_name = f"harel_conformance_{uuid.uuid4().hex[:12]}"
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(url)
    recorder = Recorder()
    recording = RecordingClient(client, recorder)
    try:
        store = (options.store_class or MongoStore)(recording, db_name, **options.kwargs())
        transport = MongoTransport(recording, db_name, watch=False)

        def sender(clock: ServerClock) -> Any:
            return MongoTransport(recording, db_name, watch=False, clock=clock)

        yield Harness(name, store, transport, client[db_name], recorder, reopen, sender)
    finally:
        client.drop_database(db_name)
        client.close()


@contextmanager
def real_mongo_backend(options: StoreOptions, reopen: Callable[[StoreOptions], Harness]) -> Iterator[Harness]:
    assert REAL_MONGO_URL is not None
    yield from _server_mongo("real-mongo", REAL_MONGO_URL, options, reopen)


def _server_mongo_async(
    name: str,
    url: str,
    new_client: Callable[[str, asyncio.AbstractEventLoop], Any],
    options: StoreOptions,
    reopen: Callable[[StoreOptions], Harness],
) -> Iterator[Harness]:
    import pymongo

    db_name = f"harel_conformance_{uuid.uuid4().hex[:12]}"
    sync_client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(url)
    loop = asyncio.new_event_loop()
    recorder = Recorder()
    store_class = options.store_class or AsyncMongoStore
    client = RecordingClient(new_client(url, loop), recorder)
    store = store_class(client, db_name, **options.kwargs())
    transport = SyncFacade(AsyncMongoTransport(client, db_name, watch=False), loop)

    def sender(clock: ServerClock) -> Any:
        return SyncFacade(AsyncMongoTransport(client, db_name, watch=False, clock=clock), loop)

    try:
        yield Harness(
            name, SyncFacade(store, loop), transport, sync_client[db_name], recorder, reopen, sender
        )
    finally:
        loop.run_until_complete(store.close())
        loop.close()
        sync_client.drop_database(db_name)
        sync_client.close()


def _pymongo_async(url: str, _loop: asyncio.AbstractEventLoop) -> Any:
    import pymongo

    return pymongo.AsyncMongoClient(url)


def _motor(url: str, loop: asyncio.AbstractEventLoop) -> Any:
    """AsyncMongoStore on an injected Motor client, as users of the deprecated driver may pass one."""
    from motor.motor_asyncio import AsyncIOMotorClient

    return AsyncIOMotorClient(url, io_loop=loop)


@contextmanager
def real_mongo_async_backend(
    options: StoreOptions, reopen: Callable[[StoreOptions], Harness]
) -> Iterator[Harness]:
    assert REAL_MONGO_URL is not None
    yield from _server_mongo_async("real-mongo-async", REAL_MONGO_URL, _pymongo_async, options, reopen)


@contextmanager
def real_mongo_motor_backend(
    options: StoreOptions, reopen: Callable[[StoreOptions], Harness]
) -> Iterator[Harness]:
    assert REAL_MONGO_URL is not None
    yield from _server_mongo_async("real-mongo-motor", REAL_MONGO_URL, _motor, options, reopen)


# The fake replica set (tests/fake_mongod): the same drivers over sockets, one fresh server per harness.


@contextmanager
def fake_rs_backend(options: StoreOptions, reopen: Callable[[StoreOptions], Harness]) -> Iterator[Harness]:
    with FakeMongod() as server:
        yield from _server_mongo("fake-rs", server.url, options, reopen)


@contextmanager
def fake_rs_async_backend(
    options: StoreOptions, reopen: Callable[[StoreOptions], Harness]
) -> Iterator[Harness]:
    with FakeMongod() as server:
        yield from _server_mongo_async("fake-rs-async", server.url, _pymongo_async, options, reopen)


@contextmanager
def fake_rs_motor_backend(
    options: StoreOptions, reopen: Callable[[StoreOptions], Harness]
) -> Iterator[Harness]:
    with FakeMongod() as server:
        yield from _server_mongo_async("fake-rs-motor", server.url, _motor, options, reopen)


_needs_real_mongo = pytest.mark.skipif(
    not REAL_MONGO_URL, reason="HAREL_TEST_MONGO_URL is not set: no real MongoDB to run the store checks on"
)
_real = (pytest.mark.real, _needs_real_mongo)

BACKENDS: list[Backend] = [
    Backend("mongomock", mongomock_backend),
    Backend("mongomock-motor", mongomock_motor_backend),
    Backend("mongomock-partitioned", mongomock_partitioned_backend),
    Backend("fake-rs", fake_rs_backend, marks=(pytest.mark.wire,)),
    Backend("fake-rs-async", fake_rs_async_backend, marks=(pytest.mark.wire,)),
    Backend("fake-rs-motor", fake_rs_motor_backend, marks=(pytest.mark.wire,)),
    Backend("real-mongo", real_mongo_backend, marks=_real),
    Backend("real-mongo-async", real_mongo_async_backend, marks=_real),
    Backend("real-mongo-motor", real_mongo_motor_backend, marks=_real),
]


def register(backend: Backend) -> None:
    BACKENDS.append(backend)


def params() -> list[Any]:
    return [pytest.param(backend, id=backend.name, marks=backend.marks) for backend in BACKENDS]


class HarnessPool:
    """Opens harnesses of one backend and closes them all when the test ends."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._open: list[AbstractContextManager[Harness]] = []

    def open(self, options: StoreOptions) -> Harness:
        context = self._backend.open(options, self.open)
        harness = context.__enter__()
        self._open.append(context)
        return harness

    def close(self) -> None:
        while self._open:
            self._open.pop().__exit__(None, None, None)
