"""A chart run through harel as a user runs it: the real worker over the embedded store, started and sent
events through the client API, its state read back from the store.

`wait_until_quiescent` is the one place that knows how to tell that the engine has nothing left to do.

The deployment is the one `open_backend("mongomock://")` builds, on a clock the script moves: every lease,
mailbox due time and timer is decided by the deployment's clock (`$$NOW`), so a `JumpClock` (real time
plus an offset) given to the embedded client stands for the server's clock; waiting jumps it from one due
timer to the next, so a chart's timers (seconds long) fire on time without the test sleeping."""

from __future__ import annotations

import time

from harel.app import App
from harel.backend import Backend
from harel.catalog import MongoCatalog
from harel.chart import Chart
from harel.client import send_event, start_execution
from harel.heartbeat import MongoHeartbeats
from harel.model import Execution, ExecutionStatus
from harel.servertime import ServerClock
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig
from harel_dev.embedded import EmbeddedClient

from .observation import ROOT_LANE, Observation
from .vocabulary import harel_registry

SETTLED_POLLS = 3  # the same versions, nothing pending, this many polls in a row
POLL = 0.02
BUSY_POLL_MAX = 0.2


class JumpClock:
    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def embedded_backend(clock: JumpClock) -> Backend:
    """`open_backend("mongomock://")` with the deployment's clock given."""
    client = EmbeddedClient(clock)
    transport = MongoTransport(client, clock=ServerClock(local=clock, monotonic=clock), watch=False)
    backend = Backend(
        "mongomock://", MongoStore(client), transport, MongoHeartbeats(client), MongoCatalog(client), client
    )
    backend.store.ensure_indexes()
    backend.transport.ensure_indexes()
    return backend


def wait_until_quiescent(backend: Backend, clock: JumpClock, timeout: float = 60.0) -> None:
    """Return once nothing is pending anywhere (events in mailboxes, outbox entries, spawns, due timers)
    and no execution's version moved over SETTLED_POLLS polls. Timers not yet due do not count. A parked
    execution (an event that failed every attempt) fails the wait with its error. While work is pending
    the polls back off (every poll takes the embedded store's lock the workers need)."""
    deadline = time.monotonic() + timeout
    previous: tuple[tuple[str, int], ...] | None = None
    settled = 0
    pause = POLL
    while time.monotonic() < deadline:
        parked = backend.transport.parked()
        if parked:
            raise AssertionError(f"parked: {[(p.execution_id, p.event_name, p.error) for p in parked]}")
        store = backend.store
        pending = (
            backend.transport.pending_count()
            or store.pending_outbox(1)
            or store.pending_spawns(1)
            or store.due_timers(clock(), 1)
        )
        if pending:
            settled, previous, pause = 0, None, min(BUSY_POLL_MAX, pause * 2)
        else:
            versions = tuple((s.id, s.version) for s in store.list_executions(limit=1000).items)
            settled = settled + 1 if versions == previous else 0
            if settled >= SETTLED_POLLS:
                return
            previous, pause = versions, POLL
        time.sleep(pause)
    raise AssertionError(f"the executions did not come to rest within {timeout}s")


def next_timer(backend: Backend) -> float | None:
    """The earliest armed timer of any execution."""
    armed = [
        at
        for summary in backend.store.list_executions(limit=1000).items
        if (exe := backend.store.load(summary.id)) is not None
        for at in exe.timers.values()
    ]
    return min(armed, default=None)


class HarelRun:
    def __init__(self, chart: Chart, root_id: str) -> None:
        self.chart = chart
        self.root_id = root_id
        self.clock = JumpClock()
        self.backend = embedded_backend(self.clock)
        self.app = App("differential")
        self.app.chart(chart)
        registry = harel_registry(chart)
        self.app.registry.actions.update(registry.actions)
        self.app.registry.guards.update(registry.guards)
        config = WorkerConfig(
            concurrency=1,
            idle_poll_max=0.02,
            relay_poll_max=0.02,
        )
        self.worker = Worker(self.backend.store, self.backend.transport, self.app, config=config)
        self.worker.start()
        self.started_at = self.clock()
        start_execution(self.backend.store, self.backend.transport, self.app, chart.id, execution_id=root_id)
        wait_until_quiescent(self.backend, self.clock)

    def elapsed(self) -> float:
        """Seconds on the worker's clock since the run started."""
        return self.clock() - self.started_at

    def send(self, *names: str) -> None:
        for name in names:
            send_event(self.backend.store, self.backend.transport, self.app, self.root_id, name)
        wait_until_quiescent(self.backend, self.clock)

    def wait(self, seconds: float) -> None:
        """Let `seconds` pass: the clock jumps from one due timer to the next (each fires at its time, as
        it would in real time), then to the end."""
        end = self.clock() + seconds
        while (due := next_timer(self.backend)) is not None and due <= end:
            self.clock.offset += max(0.0, due - self.clock())
            wait_until_quiescent(self.backend, self.clock)
        self.clock.offset += max(0.0, end - self.clock())
        wait_until_quiescent(self.backend, self.clock)

    def close(self) -> None:
        self.worker.stop(drain_seconds=2.0)
        self.backend.close()

    def _load(self, execution_id: str) -> Execution:
        exe = self.backend.store.load(execution_id)
        assert exe is not None, f"execution {execution_id!r} is missing"
        return exe

    def observe(self) -> Observation:
        root = self._load(self.root_id)
        active: set[str] = set()
        if root.status is ExecutionStatus.RUNNING:
            self._add_active(root, active)
        lanes: dict[str, list[str]] = {}
        self._add_actions(self.root_id, lanes)
        return Observation(frozenset(active), root.status is not ExecutionStatus.RUNNING, lanes)

    def _add_active(self, exe: Execution, active: set[str]) -> None:
        """The execution's active states, and for each region it waits for, the region and its states."""
        if exe.configuration:
            active.update(self.chart.node(exe.configuration[-1]).chain)
        for child_id in exe.children:
            child = self._load(child_id)
            active.add(child.root_path or "")
            self._add_active(child, active)

    def _add_actions(self, execution_id: str, lanes: dict[str, list[str]]) -> None:
        exe = self._load(execution_id)
        steps = self.backend.store.read_trace(execution_id)
        lanes.setdefault(exe.root_path or ROOT_LANE, []).extend(a for s in steps for a in s["actions"])
        for child_id in (child for s in steps for child in s["spawns"]):
            self._add_actions(child_id, lanes)
