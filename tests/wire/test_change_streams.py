"""Change streams on the fake replica set and the harel-dev local server, through real drivers over sockets.

What a driver and harel's mailbox watcher rely on: an event per insert, update, replace and delete with the
server's fields; the stream's pipeline applied to events (harel's own WATCH_PIPELINE: which mailbox writes
wake a worker); resuming after a dropped connection without losing an event; a `getMore` that waits for
the next event while other connections' commands run; `killCursors` ending the stream; and the refusals of
a standalone and of what is not modelled.

Marked `fake_server`: these tests prove the test replica set and the harel-dev server, not harel, except that
harel's WATCH_PIPELINE, run on them, lets through the writes that should wake a worker and no claim.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from bson import Timestamp
from motor.motor_asyncio import AsyncIOMotorClient
from pymongo import AsyncMongoClient, MongoClient, monitoring
from pymongo.change_stream import ChangeStream
from pymongo.collection import Collection
from pymongo.errors import OperationFailure

from harel.client import send_event, start_execution
from harel.executions.queries import WATCH_PIPELINE
from harel.model import ExecutionStatus
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig
from harel_dev import changes
from harel_dev.server import LocalServer
from tests.fake_mongod.fail_command import fail_command
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, FakeDeployment
from tests.wire import ordering_app
from tests.wire.processes import wait_until

pytestmark = [pytest.mark.wire, pytest.mark.fake_server]

AWAIT_MS = 200  # how long a getMore waits for an event once every write of a test is done
LONG_AWAIT_MS = 60_000  # a getMore that must return because of a write, not because its time ran out
CURSOR_NOT_FOUND = 43
CURSOR_KILLED = 237
TOKEN_MODIFIED = 280
HISTORY_LOST = 286
ONLY_REPLICA_SETS = 40573


class _Commands(monitoring.CommandListener):
    """The commands a client started, by name, with their documents."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.getmore_started = threading.Event()

    def started_named(self, name: str) -> list[dict[str, Any]]:
        return [command for started, command in self.seen if started == name]

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.seen.append((event.command_name, dict(event.command)))
        if event.command_name == "getMore":
            self.getmore_started.set()

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
def client(fake_rs: FakeDeployment) -> Iterator[MongoClient[dict[str, Any]]]:
    with MongoClient(fake_rs.url, **CLIENT_OPTIONS) as opened:
        yield opened


def drain(stream: ChangeStream[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every event the stream has, read until a getMore waits AWAIT_MS in vain."""
    events = []
    while (event := stream.try_next()) is not None:
        events.append(event)
    return events


def test_each_write_reports_its_event_with_the_servers_fields(client: MongoClient[dict[str, Any]]) -> None:
    items = client.harel.items
    with items.watch(max_await_time_ms=AWAIT_MS) as stream:
        items.insert_one({"_id": 1, "a": 1, "b": {"x": 1}})
        items.update_one({"_id": 1}, {"$set": {"a": 2, "b.x": 2}, "$unset": {"gone": ""}})
        items.update_one({"_id": 1}, {"$unset": {"b": ""}})
        items.update_one({"_id": 1}, [{"$set": {"c": 3, "a": 2}}])
        items.update_one({"_id": 1}, {"$set": {"a": 2}})  # changes nothing: no event
        items.replace_one({"_id": 1}, {"z": 1})
        items.find_one_and_update({"_id": 1}, {"$inc": {"z": 1}})
        items.update_one({"_id": 2}, {"$set": {"u": 1}}, upsert=True)
        items.insert_many([{"_id": 3}, {"_id": 4}])
        items.delete_many({"_id": {"$in": [3, 4]}})
        items.find_one_and_delete({"_id": 2})
        items.delete_one({"_id": 1})
        events = drain(stream)

    assert [(e["operationType"], e["documentKey"]) for e in events] == [
        ("insert", {"_id": 1}),
        ("update", {"_id": 1}),
        ("update", {"_id": 1}),
        ("update", {"_id": 1}),
        ("replace", {"_id": 1}),
        ("update", {"_id": 1}),
        ("insert", {"_id": 2}),
        ("insert", {"_id": 3}),
        ("insert", {"_id": 4}),
        ("delete", {"_id": 3}),
        ("delete", {"_id": 4}),
        ("delete", {"_id": 2}),
        ("delete", {"_id": 1}),
    ]
    descriptions = [e["updateDescription"] for e in events if e["operationType"] == "update"]
    assert descriptions == [
        # top-level fields: MongoDB would name the sub-field "b.x" (sdk/dev/README.md)
        {"updatedFields": {"a": 2, "b": {"x": 2}}, "removedFields": [], "truncatedArrays": []},
        {"updatedFields": {}, "removedFields": ["b"], "truncatedArrays": []},
        {"updatedFields": {"c": 3}, "removedFields": [], "truncatedArrays": []},
        {"updatedFields": {"z": 2}, "removedFields": [], "truncatedArrays": []},
    ]
    full = {e["operationType"]: e["fullDocument"] for e in events if "fullDocument" in e}
    assert full == {"insert": {"_id": 4}, "replace": {"_id": 1, "z": 1}}
    assert events[0]["fullDocument"] == {"_id": 1, "a": 1, "b": {"x": 1}}
    for event in events:
        assert event["ns"] == {"db": "harel", "coll": "items"}
        assert set(event["_id"]) == {"_data"}
        assert isinstance(event["clusterTime"], Timestamp)
        assert isinstance(event["wallTime"], dt.datetime)
    times = [e["clusterTime"] for e in events]
    assert times == sorted(times) and len(set(times)) == len(times)


def test_update_lookup_adds_the_document_as_it_is_when_the_event_is_read(
    client: MongoClient[dict[str, Any]],
) -> None:
    items = client.harel.items
    with items.watch(full_document="updateLookup", max_await_time_ms=AWAIT_MS) as stream:
        items.insert_one({"_id": 1, "n": 0})
        items.update_one({"_id": 1}, {"$inc": {"n": 1}})
        items.update_one({"_id": 1}, {"$inc": {"n": 1}})
        events = drain(stream)
    assert [e["fullDocument"] for e in events] == [{"_id": 1, "n": 0}, {"_id": 1, "n": 2}, {"_id": 1, "n": 2}]


def test_the_streams_pipeline_filters_and_shapes_events_and_must_keep_the_token(
    client: MongoClient[dict[str, Any]],
) -> None:
    items = client.harel.items
    pipeline = [{"$match": {"operationType": "delete"}}, {"$project": {"documentKey": 1}}]
    with items.watch(pipeline, max_await_time_ms=AWAIT_MS) as stream:
        items.insert_many([{"_id": 1}, {"_id": 2}])
        items.delete_one({"_id": 2})
        events = drain(stream)
    assert [set(e) for e in events] == [{"_id", "documentKey"}]
    assert events[0]["documentKey"] == {"_id": 2}

    with items.watch([{"$project": {"_id": 0}}], max_await_time_ms=AWAIT_MS) as stream:
        items.insert_one({"_id": 3})
        with pytest.raises(OperationFailure) as modified:
            stream.try_next()
    assert modified.value.code == TOKEN_MODIFIED


def test_harels_watch_pipeline_reports_new_executions_and_sends_that_make_one_due_never_a_claim(
    client: MongoClient[dict[str, Any]],
) -> None:
    """The unfiltered stream sees every write of a start, a worker's claim and commit, and a send to the
    idle execution; WATCH_PIPELINE lets through the insert and the send only."""
    store, transport = MongoStore(client, "harel"), MongoTransport(client, "harel", watch=False)
    store.ensure_indexes()
    transport.ensure_indexes()
    executions: Collection[dict[str, Any]] = client.harel.executions
    app = ordering_app.ordered
    with (
        executions.watch(max_await_time_ms=AWAIT_MS) as everything,
        executions.watch(WATCH_PIPELINE, max_await_time_ms=AWAIT_MS) as hinted,
    ):
        start_execution(store, transport, app, "ordering.sequence", execution_id="w-1")
        worker = Worker(store, transport, app, config=WorkerConfig(concurrency=1))
        worker.start()
        try:
            wait_until(lambda: worker.counters["processed"] == 1, 20.0, "the start to be processed")
        finally:
            worker.stop(5.0)
        stored = store.load("w-1")
        assert stored is not None and stored.status is ExecutionStatus.RUNNING
        send_event(store, transport, app, "w-1", "e1")
        seen, woken = drain(everything), drain(hinted)

    claims = [
        e
        for e in seen
        if e["operationType"] == "update"
        and isinstance(e["updateDescription"]["updatedFields"].get("lease"), dict)
    ]
    assert claims, "the worker's claim leased the execution"
    assert seen[0]["operationType"] == "insert"
    assert "inbox" in seen[-1]["updateDescription"]["updatedFields"], "the send is the last write"
    assert [e["_id"] for e in woken] == [seen[0]["_id"], seen[-1]["_id"]]


def test_a_stream_resumes_after_its_connection_drops_without_losing_or_repeating_an_event(
    fake_rs: FakeDeployment,
) -> None:
    commands = _Commands()
    with MongoClient(fake_rs.url, event_listeners=[commands], **CLIENT_OPTIONS) as client:
        items = client.harel.items
        with items.watch(max_await_time_ms=AWAIT_MS) as stream:
            assert stream.try_next() is None
            items.insert_one({"_id": "written before the drop"})
            with fail_command(client, {"times": 1}, failCommands=["getMore"], closeConnection=True):
                resumed = stream.try_next()
            items.insert_one({"_id": "written after the resume"})
            after = drain(stream)
    assert resumed is not None and resumed["documentKey"] == {"_id": "written before the drop"}
    assert [e["documentKey"] for e in after] == [{"_id": "written after the resume"}]
    opened = [command["pipeline"][0]["$changeStream"] for command in commands.started_named("aggregate")]
    assert len(opened) == 2 and "resumeAfter" not in opened[0]
    assert set(opened[1]) == {"resumeAfter"}


def test_a_waiting_getmore_returns_the_event_another_connection_writes_while_others_run(
    fake_rs: FakeDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    """The getMore waits up to a minute; meanwhile another connection reads and writes. Were the server's
    execution lock held while it waits, the read would wait out the minute and the getMore return empty."""
    commands = _Commands()
    received: list[dict[str, Any] | None] = []
    with (
        MongoClient(fake_rs.url, event_listeners=[commands], **CLIENT_OPTIONS) as watcher,
        watcher.harel.items.watch(max_await_time_ms=LONG_AWAIT_MS) as stream,
    ):
        waiting = threading.Thread(target=lambda: received.append(stream.try_next()))
        waiting.start()
        assert commands.getmore_started.wait(10.0)
        assert client.harel.items.find_one() is None
        client.harel.items.insert_one({"_id": "wakes it"})
        waiting.join()
    assert len(received) == 1 and received[0] is not None
    assert received[0]["documentKey"] == {"_id": "wakes it"}


def test_kill_cursors_ends_the_stream_and_a_getmore_waiting_on_it(
    fake_rs: FakeDeployment, client: MongoClient[dict[str, Any]]
) -> None:
    db = client.harel
    opened = db.command("aggregate", "items", pipeline=[{"$changeStream": {}}], cursor={})
    cursor_id = opened["cursor"]["id"]
    assert opened["cursor"]["firstBatch"] == [] and cursor_id != 0
    assert "postBatchResumeToken" in opened["cursor"]
    failures: list[OperationFailure] = []

    def wait() -> None:
        try:
            db.command("getMore", cursor_id, collection="items", maxTimeMS=LONG_AWAIT_MS)
        except OperationFailure as failure:
            failures.append(failure)

    waiting = threading.Thread(target=wait)
    waiting.start()
    wait_until(lambda: fake_rs.server.waiting_change_streams() == 1, 10.0, "the getMore to wait")
    killed = db.command("killCursors", "items", cursors=[cursor_id])
    waiting.join()
    assert killed["cursorsKilled"] == [cursor_id]
    assert [failure.code for failure in failures] == [CURSOR_KILLED]
    with pytest.raises(OperationFailure) as gone:
        db.command("getMore", cursor_id, collection="items")
    assert gone.value.code == CURSOR_NOT_FOUND


def test_closing_a_stream_kills_its_cursor(fake_rs: FakeDeployment) -> None:
    commands = _Commands()
    with MongoClient(fake_rs.url, event_listeners=[commands], **CLIENT_OPTIONS) as client:
        stream = client.harel.items.watch(max_await_time_ms=AWAIT_MS)
        stream.close()
        [killed] = commands.started_named("killCursors")
        with pytest.raises(OperationFailure) as gone:
            client.harel.command("getMore", killed["cursors"][0], collection="items")
    assert gone.value.code == CURSOR_NOT_FOUND


def test_a_resume_point_that_left_the_window_of_kept_events_is_history_lost(
    client: MongoClient[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(changes, "MAX_EVENTS", 2)
    items = client.harel.items
    with items.watch(max_await_time_ms=AWAIT_MS) as stream:
        assert stream.try_next() is None
        token = stream.resume_token
    items.insert_many([{"_id": 1}, {"_id": 2}])
    with items.watch(resume_after=token, max_await_time_ms=AWAIT_MS) as resumed:
        assert [e["documentKey"] for e in drain(resumed)] == [{"_id": 1}, {"_id": 2}]
    items.insert_one({"_id": 3})  # the window keeps the last two: _id 1's event is gone
    with pytest.raises(OperationFailure) as lost:
        items.watch(resume_after=token)
    assert lost.value.code == HISTORY_LOST


def test_a_token_from_another_server_cannot_resume_a_stream(client: MongoClient[dict[str, Any]]) -> None:
    with (
        LocalServer(port=0) as other,
        MongoClient(other.url) as other_client,
        other_client.harel.items.watch(max_await_time_ms=AWAIT_MS) as stream,
    ):
        assert stream.try_next() is None
        token = stream.resume_token
    with pytest.raises(OperationFailure) as lost:
        client.harel.items.watch(resume_after=token)
    assert lost.value.code == HISTORY_LOST


def test_the_local_server_and_the_async_drivers_stream_changes(fake_rs: FakeDeployment) -> None:
    """AsyncMongoClient and Motor on the fake, PyMongo on the harel-dev local server."""

    async def one_insert(items: Any) -> dict[str, Any] | None:
        async with await _resolved(items.watch(max_await_time_ms=AWAIT_MS)) as stream:
            await items.insert_one({"_id": "async"})
            event: dict[str, Any] | None = await stream.try_next()
        await items.delete_one({"_id": "async"})
        return event

    async def both() -> list[dict[str, Any] | None]:
        pymongo_async: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(fake_rs.url)
        motor: AsyncIOMotorClient[dict[str, Any]] = AsyncIOMotorClient(fake_rs.url)
        try:
            return [await one_insert(pymongo_async.harel.items), await one_insert(motor.harel.items)]
        finally:
            await pymongo_async.close()
            motor.close()

    for event in asyncio.run(both()):
        assert event is not None and event["operationType"] == "insert"
    with (
        LocalServer(port=0) as local,
        MongoClient(local.url) as client,
        client.harel.items.watch(max_await_time_ms=AWAIT_MS) as stream,
    ):
        client.harel.items.insert_one({"_id": "local"})
        event = stream.try_next()
    assert event is not None and event["documentKey"] == {"_id": "local"}


async def _resolved(value: Any) -> Any:
    """Motor's `watch` returns the stream, AsyncMongoClient's a coroutine of it."""
    return await value if asyncio.iscoroutine(value) else value


def test_a_standalone_has_no_change_streams(fake_standalone: FakeDeployment) -> None:
    with MongoClient(fake_standalone.url) as client, pytest.raises(OperationFailure) as refused:
        client.harel.items.watch()
    assert refused.value.code == ONLY_REPLICA_SETS
