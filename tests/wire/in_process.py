"""Workers inside the test process, over real clients and sockets: the fault suite's fine-grained half.

Each `Seam` is what one worker process would hold — a MongoStore and a MongoTransport built by
`harel.connection.connect` with the production defaults — except that the store and the queue get
clients of their own, named `<name>-store` and `<name>-queue`. A `failCommand` fail point armed for one
of those names catches that half of that worker only: `findAndModify` from `-store` is the counters
call and nothing else, `update` from `-store` is a commit or a relay's acknowledgement.

The tally chart counts what took effect: `bump` adds one to `count` and sends `bumped` to the sink execution
named in its context (through the outbox, so its commit has relay work); `bumped` adds one to the sink's
`received`. The actions log every call, so a test can tell "ran twice" from "took effect twice".
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pymongo import MongoClient, monitoring

from harel.app import ActionContext, ActionResult, App, Send
from harel.client import send_event, start_execution
from harel.connection import connect
from harel.model import Execution
from harel.servertime import ServerClock
from harel.smoke import register_smoke
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig
from tests.accounting import CommandAccounting
from tests.fake_mongod.fixtures import CLIENT_OPTIONS

TALLY_CHART_ID = "wire.tally"
TALLY_CHART: dict[str, Any] = {
    "id": TALLY_CHART_ID,
    "version": 1,
    "initial": "open",
    "states": {
        "open": {
            "on": {
                "bump": {"actions": ["tally.bump"]},
                "bumped": {"actions": ["tally.received"]},
            }
        }
    },
}
# Short timers keep the in-process smoke runs quick; the chart's shape is the one `harel smoke` runs.
SMOKE_TIMER_SECONDS = 0.3
SMOKE_TIMEOUT = 30.0
CONNECT_DEADLINE = 15.0


@dataclass
class Tally:
    """The tally chart's app and the log of every action call (event ids, in call order)."""

    app: App
    calls: list[str] = field(default_factory=list)
    slow_first_call: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def bump(self, ctx: ActionContext) -> ActionResult:
        with self._lock:
            self.calls.append(ctx.event.id)
            first = len(self.calls) == 1
        if first and self.slow_first_call:
            time.sleep(self.slow_first_call)
        return ActionResult(
            context={"count": ctx.context.get("count", 0) + 1}, send=[Send("bumped", to=ctx.context["sink"])]
        )

    @staticmethod
    def received(ctx: ActionContext) -> ActionResult:
        return ActionResult(context={"received": ctx.context.get("received", 0) + 1})


def tally_app(slow_first_call: float = 0.0) -> Tally:
    tally = Tally(App("wire-faults"), slow_first_call=slow_first_call)
    tally.app.chart(TALLY_CHART)
    tally.app.registry.actions["tally.bump"] = tally.bump
    tally.app.registry.actions["tally.received"] = tally.received
    return tally


def smoke_app() -> tuple[App, str]:
    app = App("wire-smoke")
    return app, register_smoke(app, region_timer=SMOKE_TIMER_SECONDS, final_timer=SMOKE_TIMER_SECONDS)


@dataclass
class Seam:
    name: str
    store: MongoStore
    transport: MongoTransport
    clients: tuple[MongoClient[dict[str, Any]], ...]

    @property
    def store_app(self) -> str:
        return f"{self.name}-store"

    @property
    def queue_app(self) -> str:
        return f"{self.name}-queue"

    def worker(self, app: App, **config: Any) -> Worker:
        return Worker(self.store, self.transport, app, config=WorkerConfig(**config), worker_id=self.name)

    def close(self) -> None:
        for client in self.clients:
            client.close()


def open_client(
    url: str, app_name: str, listeners: tuple[monitoring.CommandListener, ...] = ()
) -> MongoClient[dict[str, Any]]:
    # The production defaults from `connect`, with the fast heartbeat the fake's "not primary" recovery needs.
    return connect(
        url,
        app_name=app_name,
        deadline=CONNECT_DEADLINE,
        event_listeners=list(listeners),
        heartbeatFrequencyMS=CLIENT_OPTIONS["heartbeatFrequencyMS"],
    )


def open_seam(
    url: str,
    db_name: str,
    name: str,
    listeners: tuple[monitoring.CommandListener, ...] = (),
    *,
    store_class: type[MongoStore] = MongoStore,
    transport_class: type[MongoTransport] = MongoTransport,
    clock: ServerClock | None = None,
) -> Seam:
    """`store_class`/`transport_class`: a broken variant under test; `clock`: the worker's own clock."""
    store_client = open_client(url, f"{name}-store", listeners)
    queue_client = open_client(url, f"{name}-queue", listeners)
    store = store_class(store_client, db_name)
    transport = transport_class(queue_client, db_name, watch=False, clock=clock)
    store.ensure_indexes()
    transport.ensure_indexes()
    return Seam(name, store, transport, (store_client, queue_client))


class Seams:
    """Opens seams on one database and closes them when the test ends."""

    def __init__(self, url: str, db_name: str) -> None:
        self.url = url
        self.db_name = db_name
        self._open: list[Seam] = []

    def open(
        self,
        name: str,
        listeners: tuple[monitoring.CommandListener, ...] = (),
        *,
        url: str | None = None,
        **options: Any,
    ) -> Seam:
        """`url`: another way to the same deployment (through a proxy)."""
        seam = open_seam(url or self.url, self.db_name, name, listeners, **options)
        self._open.append(seam)
        return seam

    def close(self) -> None:
        for seam in self._open:
            seam.close()


def start_tally(seam: Seam, tally: Tally, worker: Worker, execution_id: str = "tally-1") -> str:
    """A started tally execution and its sink `<id>-sink` (both start events processed); the tally's id."""
    queue_tally(seam, tally, execution_id)
    assert worker.process_one() and worker.process_one(), "the start events were not claimable"
    return execution_id


def queue_tally(seam: Seam, tally: Tally, execution_id: str) -> None:
    """A tally execution and its sink `<id>-sink` started, their start events waiting for a worker."""
    sink = f"{execution_id}-sink"
    start_execution(seam.store, seam.transport, tally.app, TALLY_CHART_ID, execution_id=sink)
    start_execution(
        seam.store,
        seam.transport,
        tally.app,
        TALLY_CHART_ID,
        execution_id=execution_id,
        context={"sink": sink},
    )


def bump(seam: Seam, tally: Tally, execution_id: str, event_id: str) -> None:
    send_event(seam.store, seam.transport, tally.app, execution_id, "bump", event_id=event_id)


def loaded(seam: Seam, execution_id: str) -> Execution:
    exe = seam.store.load(execution_id)
    assert exe is not None, f"execution {execution_id} is gone"
    return exe


def handled_events(seam: Seam, execution_id: str) -> list[str]:
    """The ids of the events that took effect, in trace order."""
    return [step["event_id"] for step in seam.store.read_trace(execution_id) if step.get("handled")]


def process_until(worker: Worker, timeout: float, what: str) -> None:
    """Call `process_one` until it claims an execution (a retry waits out its backoff first)."""
    deadline = time.monotonic() + timeout
    while not worker.process_one():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


@dataclass
class Running:
    """Workers started with `start()`; stopped, drained briefly, when the block ends."""

    workers: list[Worker]

    def counter(self, name: str) -> int:
        return sum(worker.counters[name] for worker in self.workers)


@contextlib.contextmanager
def running(workers: list[Worker]) -> Iterator[Running]:
    for worker in workers:
        worker.start()
    try:
        yield Running(workers)
    finally:
        for worker in workers:
            worker.stop(drain_seconds=2)


def _role() -> str:
    """Which part of a worker the current thread is: its threads are named harel-consumer-N, -relay, -heartbeat."""
    name = threading.current_thread().name
    if name.startswith("harel-consumer-"):
        return "consumer"
    if name in ("harel-relay", "harel-heartbeat"):
        return name.removeprefix("harel-")
    return "client"


class Phased:
    """Runs each method of a store or transport under the accounting phase `<role>.<method>` and counts
    every call, the ones that raised included (`.raised`, and `.raised.<exception class>`), and claims that
    found nothing (`.empty`)."""

    def __init__(self, target: Any, calls: Counter[str]) -> None:
        self._target = target
        self._calls = calls
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            label = f"{_role()}.{name}"
            outcomes = [label]
            try:
                with CommandAccounting.phase(label):
                    result = attribute(*args, **kwargs)
                if name == "claim" and result is None:
                    outcomes.append(f"{label}.empty")
                return result
            except Exception as exc:
                outcomes += [f"{label}.raised", f"{label}.raised.{type(exc).__name__}"]
                raise
            finally:
                with self._lock:
                    self._calls.update(outcomes)

        return call
