"""The worker runtime: consume, step, commit, ack — plus the relays and the timer sweep.

One event, end to end (ARCHITECTURE.md): claim a message (a lease, not a delete) → `load_for_event`
(the execution and "already processed?" in one round trip) → `interpreter.step` (pure) → `store.commit`
(one CAS update carrying the execution, outbox, spawns, timers, dedupe mark and trace) → `ack`.

- A lost CAS (`StoreConflict`) reloads and steps again, a bounded number of times, with jitter.
- A commit whose reply was lost (connection error after the server may have applied it) is never retried
  blindly: the worker reloads and looks for the event's dedupe mark. Found: the commit happened, ack.
  Not found: it did not, step again from the reloaded state.
- An action or guard that raises fails the attempt: the message is redelivered after a backoff and
  dead-lettered after `max_attempts`, with its last error.

Relays run in every worker and are safe to run concurrently: sending is idempotent by event id, creating
a child is a version-0 commit (a second create loses the CAS), and every consumer dedupes.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from pymongo.errors import ConnectionFailure, PyMongoError

from harel import interpreter
from harel.app import App
from harel.errors import StoreConflict
from harel.heartbeat import Heartbeats
from harel.metrics import Metrics
from harel.model import (
    CANCEL_EVENT,
    START_EVENT,
    TIMER_EVENT,
    ChildSeed,
    DueTimer,
    Event,
)
from harel.store.base import ExecutionStore
from harel.transport.base import DEFAULT_LEASE_SECONDS, Message, Transport

log = logging.getLogger("harel.worker")


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 2
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    conflict_retries: int = 10
    idle_poll_max: float = 0.5
    relay_poll_max: float = 0.5
    sweep_sleep_max: float = 1.0
    heartbeat_seconds: float = 5.0
    drain_seconds: float = 20.0
    not_started_delay: float = 0.2
    trace: bool = True
    batch: int = 100


def start_event_id(execution_id: str) -> str:
    return f"{execution_id}:start"


def start_event(execution_id: str, now: float) -> Event:
    """The event that enters an execution's initial state; its id is deterministic, so sending it twice
    (a retried `harel start`, two spawn relays) takes effect once."""
    return Event(id=start_event_id(execution_id), name=START_EVENT, created_at=now)


def timer_event(due: DueTimer, now: float) -> Event:
    """The event a due timer becomes; its id is deterministic so concurrent sweeps send it once."""
    return Event(
        id=f"{due.execution_id}:timer:{due.path}@{due.fire_at!r}",
        name=TIMER_EVENT,
        data={"path": due.path, "fire_at": due.fire_at},
        created_at=now,
    )


class _Unresolved(Exception):
    """The commit's outcome could not be learned (the deployment is unreachable)."""


class Worker:
    """Consumers, relays, sweep and heartbeat over one store and one transport."""

    def __init__(
        self,
        store: ExecutionStore,
        transport: Transport,
        app: App,
        *,
        config: WorkerConfig | None = None,
        metrics: Metrics | None = None,
        heartbeats: Heartbeats | None = None,
        clock: Callable[[], float] = time.time,
        worker_id: str | None = None,
    ) -> None:
        self.store = store
        self.transport = transport
        self.app = app
        self.config = config or WorkerConfig()
        self.metrics = metrics or Metrics()
        self.heartbeats = heartbeats
        self.clock = clock
        self.id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.started_at = clock()
        self.counters = {"processed": 0, "conflicts": 0, "redeliveries": 0, "dead_lettered": 0}
        self._stopping = threading.Event()
        self._halt = threading.Event()
        self._relay_wake = threading.Event()
        self._sweep_wake = threading.Event()
        self._inflight: dict[int, Message] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._consumers: list[threading.Thread] = []
        self._last_loop = clock()
        self._connected = True

    # --- one event ---------------------------------------------------------------------------------

    def process_one(self) -> bool:
        """Claim and handle one message. False when nothing was visible."""
        message = self.transport.claim(self.config.lease_seconds)
        if message is None:
            return False
        self.metrics.queue_wait.observe(max(0.0, self.clock() - message.enqueued_at))
        with self._lock:
            self._inflight[threading.get_ident()] = message
        self.metrics.leased.inc()
        try:
            self._handle(message)
        finally:
            self.metrics.leased.dec()
            with self._lock:
                self._inflight.pop(threading.get_ident(), None)
        return True

    def _handle(self, message: Message) -> None:
        event = message.event
        fields = {"event": event.name, "event_id": event.id, "execution_id": message.target_id}
        if message.target_id is None:
            self.transport.ack(message)
            return
        try:
            outcome = self._apply(message.target_id, event)
        except _Unresolved as exc:
            log.warning(
                "commit outcome unknown, leaving the message to its lease",
                extra={**fields, "error": str(exc)},
            )
            return
        except Exception as exc:
            self._fail(message, exc, fields)
            return
        if outcome == "not-started":
            self.transport.release(message, self.config.not_started_delay)
            return
        if outcome == "missing":
            self._fail(message, LookupError(f"no execution {message.target_id!r}"), fields)
            return
        if not self.transport.ack(message):
            log.info("lease lost before ack; the redelivery will be deduped", extra=fields)

    def _apply(self, execution_id: str, event: Event) -> str:
        # What the last attempt lost to: raised (for nack) once the attempts are used up.
        failure: StoreConflict | ConnectionFailure | None = None
        for attempt in range(self.config.conflict_retries):
            exe, seen = self.store.load_for_event(execution_id, event.id)
            if exe is None:
                return "missing"
            if seen:
                self._count("redeliveries")
                self.metrics.redeliveries.inc()
                return "duplicate"
            if not exe.started and event.name not in (START_EVENT, CANCEL_EVENT):
                return "not-started"
            chart = self.app.get_chart(exe.definition_id, exe.definition_version)
            now = self.clock()
            step = interpreter.step(chart, exe, event, now, registry=self.app.registry)
            try:
                self.store.commit(
                    step.execution,
                    step.emits,
                    step.spawns,
                    step.timers,
                    processed_event_id=event.id,
                    trace=step.trace if self.config.trace else None,
                )
            except StoreConflict as lost:
                failure = lost
                self._count("conflicts")
                self.metrics.conflicts.inc()
                time.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))
                continue
            except ConnectionFailure as exc:
                self.metrics.unknown_outcomes.inc()
                if not self._committed(execution_id, event.id, exc):
                    failure = exc
                    continue
            self._after_commit(step, event, now)
            return "applied"
        assert failure is not None
        raise failure

    def _committed(self, execution_id: str, event_id: str, cause: Exception) -> bool:
        """Resolve an unknown commit outcome by the dedupe mark, retrying the read while the network heals."""
        delay = 0.05
        deadline = self.clock() + self.config.lease_seconds / 2
        while True:
            try:
                return self.store.is_processed(execution_id, event_id)
            except PyMongoError as exc:
                if self.clock() + delay > deadline:
                    raise _Unresolved(f"{cause}; then {exc}") from exc
                time.sleep(delay)
                delay = min(1.0, delay * 2)

    def _after_commit(self, step: interpreter.Step, event: Event, now: float) -> None:
        self._count("processed")
        if step.handled:
            self.metrics.events.labels(kind=_kind(event.name)).inc()
        else:
            self.metrics.ignored.inc()
        if event.name == TIMER_EVENT and step.handled:
            self.metrics.timer_lateness.observe(max(0.0, now - float(event.data["fire_at"])))
        if step.emits or step.spawns:
            self._relay_wake.set()
        if step.timers:
            self._sweep_wake.set()
        log.debug(
            "event processed",
            extra={"event": event.name, "event_id": event.id, "execution_id": step.execution.id},
        )

    def _fail(self, message: Message, exc: Exception, fields: dict[str, object]) -> None:
        self.metrics.failures.inc()
        error = f"{type(exc).__name__}: {exc}"
        dead = self.transport.nack(message, error)
        if dead:
            self._count("dead_lettered")
            self.metrics.dead_letters.inc()
            log.error("message dead-lettered", extra={**fields, "attempts": message.attempts, "error": error})
        else:
            log.warning(
                "attempt failed, will retry", extra={**fields, "attempts": message.attempts, "error": error}
            )

    # --- relays and sweep --------------------------------------------------------------------------

    def relay_once(self) -> int:
        """Deliver pending outbox events and create pending children. Returns how many entries moved."""
        moved = 0
        for entry in self.store.pending_outbox(self.config.batch):
            if entry.target_id is not None:
                self.transport.send(entry.target_id, entry.event)
                if entry.event.created_at is not None:
                    self.metrics.relay_lag.observe(max(0.0, self.clock() - entry.event.created_at))
            self.store.ack_outbox(entry.seq)
            self.metrics.relayed.labels(kind="outbox").inc()
            moved += 1
        for spawn in self.store.pending_spawns(self.config.batch):
            now = self.clock()
            child = ChildSeed.model_validate(spawn.context).to_execution(spawn, now)
            try:
                self.store.commit(child)
            except StoreConflict:
                log.debug("child already created", extra={"execution_id": spawn.child_id})
            self.transport.send(spawn.child_id, start_event(spawn.child_id, now))
            self.store.ack_spawn(spawn.seq)
            self.metrics.relayed.labels(kind="spawn").inc()
            moved += 1
        return moved

    def sweep_once(self) -> int:
        """Turn due timers into events. Returns how many fired."""
        now = self.clock()
        due = self.store.due_timers(now, self.config.batch)
        for timer in due:
            self.transport.send(timer.execution_id, timer_event(timer, now))
            self.store.delete_timer(timer.execution_id, timer.path, timer.fire_at)
            self.metrics.timers_fired.inc()
        return len(due)

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        for n in range(self.config.concurrency):
            thread = threading.Thread(target=self._consume, name=f"harel-consumer-{n}", daemon=True)
            self._consumers.append(thread)
        self._threads = [
            *self._consumers,
            threading.Thread(target=self._relay_loop, name="harel-relay", daemon=True),
            threading.Thread(target=self._sweep_loop, name="harel-sweep", daemon=True),
        ]
        if self.heartbeats is not None:
            self._threads.append(
                threading.Thread(target=self._heartbeat_loop, name="harel-heartbeat", daemon=True)
            )
        for thread in self._threads:
            thread.start()
        log.info(
            "worker started",
            extra={
                "worker_id": self.id,
                "concurrency": self.config.concurrency,
                "charts": len(self.app.charts),
            },
        )

    def stop(self, drain_seconds: float | None = None) -> None:
        """Stop claiming; let in-flight events finish until the drain deadline; release what is left."""
        drain = self.config.drain_seconds if drain_seconds is None else drain_seconds
        self._stopping.set()
        deadline = time.monotonic() + drain
        for thread in self._consumers:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            unfinished = list(self._inflight.values())
        for message in unfinished:
            self.transport.release(message)
        self._halt.set()
        self._relay_wake.set()
        self._sweep_wake.set()
        for thread in self._threads:
            if thread not in self._consumers:
                thread.join(2.0)
        if self.heartbeats is not None:
            self.heartbeats.remove(self.id)
        log.info("worker stopped", extra={"worker_id": self.id, "released": len(unfinished), **self.counters})

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def connected(self) -> bool:
        """False while the last attempt to reach the store or the queue failed."""
        return self._connected

    def alive(self) -> bool:
        """Alive while the consumer threads run and the loops turned recently."""
        running = all(t.is_alive() for t in self._consumers) if self._consumers else True
        return running and (self.clock() - self._last_loop) < max(30.0, 3 * self.config.lease_seconds)

    def _consume(self) -> None:
        idle = 0.01
        while not self._stopping.is_set():
            self._last_loop = self.clock()
            try:
                worked = self.process_one()
                self._connected = True
            except PyMongoError as exc:
                if self._connected:
                    log.warning("store or queue unavailable", extra={"error": str(exc)})
                self._connected = False
                worked = False
            except Exception:
                # a message or document this worker cannot read must not stop its consumer: log, go on
                log.exception("consumer failed; continuing")
                worked = False
            if worked:
                idle = 0.01
                continue
            self.transport.wait_hint(self._idle_wait(idle))
            idle = min(self.config.idle_poll_max, idle * 2)

    def _idle_wait(self, idle: float) -> float:
        try:
            visible = self.transport.next_visible_at()
        except PyMongoError:
            return idle
        if visible is None:
            return idle
        return max(0.0, min(idle, visible - self.clock()))

    def _relay_loop(self) -> None:
        idle = 0.01
        while not self._halt.is_set():
            try:
                moved = self.relay_once()
            except PyMongoError as exc:
                log.warning("relay failed, will retry", extra={"error": str(exc)})
                moved = 0
            except Exception:
                log.exception("relay failed on an entry it cannot read; will retry")
                moved = 0
            if moved:
                idle = 0.01
                continue
            self._relay_wake.wait(idle)
            self._relay_wake.clear()
            idle = min(self.config.relay_poll_max, idle * 2)

    def _sweep_loop(self) -> None:
        stale = 0.01
        while not self._halt.is_set():
            try:
                fired = self.sweep_once()
                earliest = self.store.next_timer_at()
            except PyMongoError as exc:
                log.warning("timer sweep failed, will retry", extra={"error": str(exc)})
                fired, earliest = 0, None
            except Exception:
                log.exception("timer sweep failed; will retry")
                fired, earliest = 0, None
            sleep = self.config.sweep_sleep_max if earliest is None else earliest - self.clock()
            if sleep <= 0 and not fired:
                # the earliest timer was already sent; its event's commit will move next_fire_at on
                sleep, stale = stale, min(self.config.sweep_sleep_max, stale * 2)
            else:
                stale = 0.01
            self._sweep_wake.wait(max(0.005, min(self.config.sweep_sleep_max, sleep)))
            self._sweep_wake.clear()

    def _heartbeat_loop(self) -> None:
        assert self.heartbeats is not None
        info = {"host": socket.gethostname(), "pid": os.getpid(), "started_at": self.started_at}
        while not self._halt.is_set():
            try:
                self.heartbeats.beat(self.id, info, dict(self.counters))
            except PyMongoError as exc:
                log.warning("heartbeat failed", extra={"error": str(exc)})
            self._halt.wait(self.config.heartbeat_seconds)

    def _count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1


def _kind(name: str) -> str:
    return name if name.startswith("harel.") else "user"
