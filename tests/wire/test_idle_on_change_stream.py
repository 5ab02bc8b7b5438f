"""An idle worker on a change stream: its consumers send no command while nothing is due, and the change a
send makes wakes them at once (the fake replica set models change streams, harel_dev's); the async
transport's watcher does the same through both async drivers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from motor.motor_asyncio import AsyncIOMotorClient
from pymongo import AsyncMongoClient, MongoClient, monitoring

from harel.app import App
from harel.client import send_event, start_execution
from harel.model import ExecutionStatus
from harel.store.mongo import MongoStore
from harel.transport.aio_mongo import AsyncMongoTransport
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, Deployment
from tests.wire.processes import wait_until

pytestmark = pytest.mark.wire

IDLE_SECONDS = 3.0  # under the worker's WATCHED_IDLE_SECONDS: no look-again falls inside it
CHART = {
    "id": "idle.poked",
    "version": 1,
    "initial": "open",
    "states": {"open": {"on": {"poke": "done"}}, "done": {"final": True}},
}


class ByThread(monitoring.CommandListener):
    """Every command started on the client, with the name of the thread that sent it and when."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, float]] = []
        self._lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        with self._lock:
            self.seen.append((threading.current_thread().name, event.command_name, time.monotonic()))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass

    def consumers_since(self, since: float) -> list[tuple[str, str, float]]:
        with self._lock:
            return [c for c in self.seen if c[0].startswith("harel-consumer-") and c[2] >= since]


@pytest.fixture
def watching(replica_set: Deployment) -> Iterator[tuple[Worker, ByThread, MongoStore, MongoTransport]]:
    replica_set.require_fake("the fake's change streams are what this test observes")
    commands = ByThread()
    app = App("idle")
    app.chart(CHART)
    worker_client: MongoClient[dict[str, Any]] = MongoClient(
        replica_set.url, event_listeners=[commands], **CLIENT_OPTIONS
    )
    client: MongoClient[dict[str, Any]] = MongoClient(replica_set.url, **CLIENT_OPTIONS)
    store = MongoStore(worker_client, replica_set.db_name)
    transport = MongoTransport(worker_client, replica_set.db_name)
    store.ensure_indexes()
    transport.ensure_indexes()
    worker = Worker(store, transport, app, config=WorkerConfig(concurrency=2))
    worker.start()
    try:
        wait_until(lambda: transport.wake_plan.watching, 10.0, "the worker's change stream to open")
        yield (
            worker,
            commands,
            MongoStore(client, replica_set.db_name),
            MongoTransport(client, replica_set.db_name, watch=False),
        )
    finally:
        worker.stop(drain_seconds=2)
        transport.close()
        client.close()


def test_a_worker_idle_on_a_change_stream_sends_no_command_until_an_event_arrives(
    watching: tuple[Worker, ByThread, MongoStore, MongoTransport],
) -> None:
    worker, commands, store, transport = watching
    app = worker.app
    start_execution(store, transport, app, CHART["id"], execution_id="idle-1")
    wait_until(lambda: worker.counters["processed"] == 1, 10.0, "the start event to be applied")
    time.sleep(0.5)  # the consumers' last empty claims and their look for the next wake-up
    quiet_from = time.monotonic()
    time.sleep(IDLE_SECONDS)
    assert commands.consumers_since(quiet_from) == [], "idle on the change stream: no claim, no poll"

    poked = time.monotonic()
    send_event(store, transport, app, "idle-1", "poke")
    wait_until(
        lambda: (exe := store.load("idle-1")) is not None and exe.status is ExecutionStatus.COMPLETED,
        10.0,
        "the poke to be applied",
    )
    woken = commands.consumers_since(poked)
    assert woken and woken[0][1] == "findAndModify", "the change woke a consumer, whose claim took the poke"
    assert woken[0][2] - poked < IDLE_SECONDS, "woken by the change, not by a look-again"


@pytest.mark.parametrize("driver", ["pymongo-async", "motor"])
def test_the_async_transport_waits_on_its_change_stream_and_wakes_for_a_new_execution(
    replica_set: Deployment, driver: str
) -> None:
    """AsyncMongoTransport's watcher reads its stream through either async driver: a waiter returns as an
    execution started elsewhere arrives, long before its timeout."""
    replica_set.require_fake("the fake's change streams are what this test observes")
    app = App("idle")
    app.chart(CHART)
    client: MongoClient[dict[str, Any]] = MongoClient(replica_set.url, **CLIENT_OPTIONS)
    store = MongoStore(client, replica_set.db_name)
    sender = MongoTransport(client, replica_set.db_name, watch=False)
    store.ensure_indexes()
    sender.ensure_indexes()

    async def waited() -> tuple[bool, float]:
        watcher_client: Any = (
            AsyncMongoClient(replica_set.url, **CLIENT_OPTIONS)
            if driver == "pymongo-async"
            else AsyncIOMotorClient(replica_set.url, **CLIENT_OPTIONS)
        )
        transport = AsyncMongoTransport(watcher_client, replica_set.db_name)
        try:
            await transport.wait_hint(5.0)  # the stream opens; opening wakes a waiter once
            transport.wake_plan.due = False
            poked = time.monotonic()
            started = threading.Timer(
                0.3, lambda: start_execution(store, sender, app, CHART["id"], execution_id="new")
            )
            started.start()
            return await transport.wait_hint(IDLE_SECONDS), time.monotonic() - poked
        finally:
            await transport.close()
            closed = watcher_client.close()
            if closed is not None:
                await closed

    woke, after = asyncio.run(waited())
    client.close()
    assert woke, "the new execution woke the waiter"
    assert after < IDLE_SECONDS, "woken by the change, not by the timeout"
