"""Worker shutdown in order: `Worker.stop` ends every thread that uses the client — consumers, relay,
sweep, heartbeat — and `Backend.close` stops the transport's change-stream watcher, before the client
closes; a thread that cannot stop within `stop_seconds` is named in one log line and ends quietly.

The client here is the embedded one behaving as PyMongo's does around `close`: a command after it raises
"Cannot use MongoClient after close", and its change stream awaits each getMore up to `max_await_time_ms`
(the embedded client has no change streams of its own, so without this no watcher would run).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from pymongo.errors import InvalidOperation

from harel.app import ActionContext, ActionResult, App, Send
from harel.backend import Backend
from harel.catalog import MongoCatalog
from harel.client import send_event, start_execution
from harel.heartbeat import MongoHeartbeats
from harel.model import Event
from harel.store.mongo import MongoStore
from harel.transport.base import SendOutcome
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig
from harel_dev.embedded import EmbeddedClient

PINGS = 20
HANG = 30.0  # a bound on waits that only a broken shutdown reaches
WATCHER = "harel-mailbox-watch"
FANOUT = {
    "id": "fanout",
    "version": 1,
    "initial": "idle",
    "states": {"idle": {"on": {"go": {"target": "sent", "actions": ["fan"]}}}, "sent": {}},
}
SINK = {
    "id": "sink",
    "version": 1,
    "initial": "open",
    "states": {"open": {"on": {"ping": {"actions": ["count"]}}}},
}


def fanout_app() -> App:
    """`fan` sends PINGS numbered pings to the execution `sink`; the sink records their numbers in order."""
    app = App("shutdown")
    app.chart(FANOUT)
    app.chart(SINK)

    @app.action("fan")
    def fan(ctx: ActionContext) -> ActionResult:
        return ActionResult(send=[Send("ping", to="sink", data={"n": n}) for n in range(PINGS)])

    @app.action("count")
    def count(ctx: ActionContext) -> ActionResult:
        return ActionResult(context={"seen": [*ctx.context.get("seen", []), ctx.event.data["n"]]})

    return app


class ClosingClient:
    """The embedded client with PyMongo's behaviour around `close`; `close` records which threads started
    since this client was made (by name) were still alive then."""

    def __init__(self, inner: EmbeddedClient) -> None:
        self._inner = inner
        self._before = set(threading.enumerate())
        self.closed = threading.Event()
        self.watching = threading.Event()
        self.alive_at_close: list[str] | None = None

    def check(self) -> None:
        if self.closed.is_set():
            raise InvalidOperation("Cannot use MongoClient after close")

    def __getitem__(self, name: str) -> _Database:
        return _Database(self, self._inner[name])

    def close(self) -> None:
        if self.alive_at_close is None:
            self.alive_at_close = harel_threads(self._before)
        self.closed.set()


class _Database:
    def __init__(self, client: ClosingClient, inner: Any) -> None:
        self._client = client
        self._inner = inner

    def __getitem__(self, name: str) -> _Collection:
        return _Collection(self._client, self._inner[name])


class _Collection:
    def __init__(self, client: ClosingClient, inner: Any) -> None:
        self._client = client
        self._inner = inner

    def watch(self, pipeline: list[dict[str, Any]], max_await_time_ms: int) -> _ChangeStream:
        self._client.check()
        return _ChangeStream(self._client, max_await_time_ms / 1000)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def checked(*args: Any, **kwargs: Any) -> Any:
            self._client.check()
            return attr(*args, **kwargs)

        return checked


class _ChangeStream:
    """A change stream on which nothing changes: each getMore is awaited in full, as on a server."""

    def __init__(self, client: ClosingClient, await_seconds: float) -> None:
        self._client = client
        self._await = await_seconds
        self.alive = True  # never invalidated

    def __enter__(self) -> _ChangeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        """Killing the cursor needs no round trip here."""

    def try_next(self) -> None:
        self._client.check()
        self._client.watching.set()
        threading.Event().wait(
            self._await
        )  # the server holds the getMore; closing the client does not end it


def harel_threads(before: set[threading.Thread]) -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t not in before and t.name.startswith("harel-"))


class RelayGate:
    """A transport whose sends from the background relay thread wait at a gate (the first one says it
    arrived); the committing consumer's own sends to a sink that does not exist yet are noted."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self.relaying = threading.Event()
        self.open = threading.Event()
        self.postponed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def send(self, target_id: str, event: Event, *, source: str | None = None) -> SendOutcome:
        if threading.current_thread().name == "harel-relay":
            self.relaying.set()
            assert self.open.wait(HANG), "the gate was never opened"
        outcome = self._transport.send(target_id, event, source=source)
        if outcome is SendOutcome.MISSING:
            self.postponed.set()
        return outcome


def open_seams(inner: EmbeddedClient | None = None) -> tuple[Backend, ClosingClient]:
    """The seams `open_backend` builds for mongomock://, on a ClosingClient (over `inner`, to reopen the
    same data) with change streams watched."""
    client = ClosingClient(inner or EmbeddedClient())
    backend = Backend(
        "mongomock://",
        MongoStore(client),
        MongoTransport(client),
        MongoHeartbeats(client),
        MongoCatalog(client),
        client,
    )
    return backend, client


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="harel")
    return caplog


def fan_out_to_a_missing_sink(backend: Backend, gate: RelayGate, app: App) -> None:
    """The fan-out's own delivery finds no sink and is postponed; the sink is created: the pings are the
    background relay's work now, and its first send waits at the gate."""
    start_execution(backend.store, gate, app, "fanout", execution_id="fan")
    send_event(backend.store, gate, app, "fan", "go")
    assert gate.postponed.wait(HANG), "the fan-out's delivery was never postponed"
    start_execution(backend.store, gate, app, "sink", execution_id="sink")
    assert gate.relaying.wait(HANG), "the background relay never took the pings"


def delivered_pings(backend: Backend) -> list[int]:
    """The numbers the sink recorded, once all PINGS arrived (polled: the store is the only witness)."""
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        sink = backend.store.load("sink")
        if sink is not None and len(sink.context.get("seen", [])) >= PINGS:
            return list(sink.context["seen"])
        time.sleep(0.02)
    raise AssertionError("the pings were not all delivered")


def test_stop_ends_every_thread_before_the_client_closes_and_loses_nothing(
    logs: pytest.LogCaptureFixture,
) -> None:
    """Stopped while the relay delivers: after `stop` no worker thread is alive, the client closes after
    all of them (the change-stream watcher included), nothing logs a use of the closed client, and a new
    worker on the same data delivers every ping once, in order."""
    app = fanout_app()
    inner = EmbeddedClient()
    backend, client = open_seams(inner)
    before = set(threading.enumerate())
    gate = RelayGate(backend.transport)
    worker = Worker(
        backend.store, gate, app, config=WorkerConfig(drain_seconds=5), heartbeats=backend.heartbeats
    )
    worker.start()
    fan_out_to_a_missing_sink(backend, gate, app)
    assert client.watching.wait(HANG), "the consumers' waits start the change-stream watcher"
    gate.open.set()
    worker.stop()
    # the watcher is the transport's (it may serve other workers): `backend.close` stops it
    assert [n for n in harel_threads(before) if n != WATCHER] == [], "stop returned with worker threads alive"
    backend.close()
    assert client.alive_at_close == [], "the client closed under these threads"
    assert not [r for r in logs.records if "after close" in r.getMessage() + str(getattr(r, "error", ""))]
    assert not [r for r in logs.records if r.levelno >= logging.ERROR or r.exc_info]

    again, _ = open_seams(inner)
    successor = Worker(again.store, again.transport, app, config=WorkerConfig(relay_poll_max=0.05))
    successor.start()
    try:
        seen = delivered_pings(again)
    finally:
        successor.stop()
        again.close()
    assert seen == list(range(PINGS))


def test_a_thread_that_cannot_stop_in_time_is_named_and_ends_quietly(
    logs: pytest.LogCaptureFixture,
) -> None:
    """The relay is blocked inside a send past `stop_seconds`: `stop` returns anyway, naming it in one log
    line; once its send returns into the closed client, it ends without a word."""
    app = fanout_app()
    backend, client = open_seams()
    gate = RelayGate(backend.transport)
    worker = Worker(
        backend.store,
        gate,
        app,
        config=WorkerConfig(drain_seconds=0.5, stop_seconds=0.2),
        heartbeats=backend.heartbeats,
    )
    worker.start()
    fan_out_to_a_missing_sink(backend, gate, app)
    stopper = threading.Thread(target=worker.stop)
    stopper.start()
    stopper.join(HANG)
    assert not stopper.is_alive(), "stop waited for a thread blocked in a command"
    backend.close()
    assert client.alive_at_close == ["harel-relay"]
    [named] = [r for r in logs.records if "did not stop in time" in r.getMessage()]
    assert named.levelno == logging.ERROR and named.threads == ["harel-relay"]  # type: ignore[attr-defined]
    [relay] = [t for t in threading.enumerate() if t.name == "harel-relay"]
    gate.open.set()
    relay.join(HANG)
    assert not relay.is_alive()
    assert [r for r in logs.records if r.levelno >= logging.WARNING] == [named], "only the one line"
