"""Benchmark 5's workers: N harel Workers on one database, as threads of this process or as processes.

Threads share this process's interpreter lock and the backend's one client. Processes (multiprocessing,
spawned) each open their own client on the same database, as separate `harel worker` processes do, and
publish their tallies in shared memory, which this process reads. An embedded backend (mongomock://) lives
inside one process, so its workers can only be threads.

The tallies (`Tallies`) are what benchmark 5 divides by the events processed: every command the worker's
client sent (the command accounting listener, `tests/accounting.py`; none on mongomock://, which has no
wire), its claims that leased an execution and those that found nothing (its transport wrapped in
`bench.labels.Labelled`), the commits that lost the version CAS and the claims that took over a lease that
ran out (the worker's own counters). A process publishes them with its processed count, together, whenever
that count moves and otherwise every TALLY_SECONDS, so a reading taken when the count reaches a total holds
the commands that processed those events.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from collections.abc import Iterator
from dataclasses import astuple, dataclass, field, fields
from multiprocessing.context import SpawnProcess
from multiprocessing.sharedctypes import SynchronizedArray
from multiprocessing.synchronize import Event as ProcessEvent
from typing import Protocol

from bench.labels import Labelled
from bench.smoke_workload import bench_app
from harel.backend import Backend, open_backend
from harel.worker import Worker, WorkerConfig
from tests.accounting import CommandAccounting

THREADS = "threads"
PROCESSES = "processes"
# A spawned process imports harel and connects before it is ready; past this it is reported as failed. Eight
# of them starting at once on a busy two-core machine have taken over 40 s.
READY_SECONDS = 120.0
CONNECT_SECONDS = 10.0
# How often a worker process publishes its count: the end of a run is seen this much late at most.
PUBLISH_SECONDS = 0.002
# How stale a process's published tallies may be while its processed count stands still.
TALLY_SECONDS = 0.05
DRAIN_SECONDS = 5.0
LEASE_STEALS = "harel_lease_steals_total"


@dataclass(frozen=True)
class Tallies:
    """What workers did, summed over them."""

    processed: int = 0
    commands: int = 0  # every command their clients sent; 0 where none is counted (mongomock://)
    claims: int = 0  # claims that leased an execution
    empty_claims: int = 0  # claims that found nothing due
    conflicts: int = 0  # commits that lost the version CAS
    lease_steals: int = 0  # claims that took over a lease that had run out

    def __add__(self, other: Tallies) -> Tallies:
        return Tallies(*(mine + theirs for mine, theirs in zip(astuple(self), astuple(other), strict=True)))

    def __sub__(self, other: Tallies) -> Tallies:
        return Tallies(*(mine - theirs for mine, theirs in zip(astuple(self), astuple(other), strict=True)))


TALLIED = len(fields(Tallies))


def tallies_of(worker: Worker, transport: Labelled, accounting: CommandAccounting | None) -> Tallies:
    """One worker's tallies so far; `transport` is the Labelled transport it claims through."""
    empty = transport.returned_none["claim"]
    return Tallies(
        processed=worker.counters["processed"],
        commands=0 if accounting is None else accounting.tally().commands,
        claims=transport.calls["claim"] - empty,
        empty_claims=empty,
        conflicts=worker.counters["conflicts"],
        lease_steals=int(worker.metrics.registry.get_sample_value(LEASE_STEALS) or 0),
    )


class WorkerPool(Protocol):
    kind: str

    def processed(self) -> int:
        """Events processed so far by all the workers."""

    def tallies(self) -> Tallies:
        """All the workers' tallies so far."""


@dataclass
class _Threads:
    workers: list[tuple[Worker, Labelled]]
    kind: str = THREADS

    def processed(self) -> int:
        return sum(worker.counters["processed"] for worker, _ in self.workers)

    def tallies(self) -> Tallies:
        return sum((tallies_of(worker, transport, None) for worker, transport in self.workers), Tallies())


@contextlib.contextmanager
def worker_threads(backend: Backend, count: int, config: WorkerConfig) -> Iterator[WorkerPool]:
    """`count` Workers in this process, each with its own threads, all on `backend`'s one client (whose
    commands are not counted: the embedded backend has no wire)."""
    app, _ = bench_app()
    pool = _Threads([])
    for _ in range(count):
        transport = Labelled(backend.transport, CommandAccounting())
        worker = Worker(backend.store, transport, app, config=config, heartbeats=backend.heartbeats)
        pool.workers.append((worker, transport))
    for worker, _ in pool.workers:
        worker.start()
    try:
        yield pool
    finally:
        stoppers = [threading.Thread(target=w.stop, args=(DRAIN_SECONDS,)) for w, _ in pool.workers]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()


@dataclass
class _Processes:
    published: list[SynchronizedArray[int]] = field(default_factory=list)
    kind: str = PROCESSES

    def processed(self) -> int:
        return self.tallies().processed

    def tallies(self) -> Tallies:
        total = Tallies()
        for shared in self.published:
            with shared.get_lock():
                total += Tallies(*shared[:])
        return total


class WorkerProcessFailed(RuntimeError):
    """A worker process exited before it was ready, or did not stop cleanly."""


@contextlib.contextmanager
def worker_processes(url: str, db_name: str, count: int, config: WorkerConfig) -> Iterator[WorkerPool]:
    """`count` processes, each one Worker on its own client to `url`, database `db_name`; yields once all
    of them are claiming, so their start-up is not part of any measurement."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    pool = _Processes()
    started: list[tuple[SpawnProcess, ProcessEvent]] = []
    try:
        for n in range(count):
            ready, published = context.Event(), context.Array("q", TALLIED)
            process = context.Process(
                target=serve, args=(url, db_name, config, ready, stop, published), name=f"bench-worker-{n}"
            )
            process.start()
            started.append((process, ready))
            pool.published.append(published)
        for process, ready in started:
            _await_ready(process, ready)
        yield pool
    finally:
        stop.set()
        for process, _ in started:
            process.join(DRAIN_SECONDS + 10.0)
            if process.is_alive():
                process.kill()
                process.join()
    failed = [f"{process.name} exited with {process.exitcode}" for process, _ in started if process.exitcode]
    if failed:
        raise WorkerProcessFailed("; ".join(failed))


def _await_ready(process: SpawnProcess, ready: ProcessEvent) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while not ready.wait(0.05):
        if process.exitcode is not None:
            raise WorkerProcessFailed(f"{process.name} exited with {process.exitcode} before it was ready")
        if time.monotonic() > deadline:
            raise WorkerProcessFailed(f"{process.name} was not ready after {READY_SECONDS:.0f}s")


def serve(
    url: str,
    db_name: str,
    config: WorkerConfig,
    ready: ProcessEvent,
    stop: ProcessEvent,
    published: SynchronizedArray[int],
) -> None:
    """A worker process: one Worker until `stop`, its tallies published."""
    accounting = CommandAccounting()
    backend = open_backend(url, db_name=db_name, deadline=CONNECT_SECONDS, listeners=[accounting])
    try:
        transport = Labelled(backend.transport, accounting)
        worker = Worker(
            backend.store, transport, bench_app()[0], config=config, heartbeats=backend.heartbeats
        )

        def publish() -> Tallies:
            tallies = tallies_of(worker, transport, accounting)
            with published.get_lock():
                published[:] = list(astuple(tallies))
            return tallies

        worker.start()
        last, at = publish(), time.monotonic()
        ready.set()
        while not stop.wait(PUBLISH_SECONDS):
            if worker.counters["processed"] != last.processed or time.monotonic() - at > TALLY_SECONDS:
                last, at = publish(), time.monotonic()
        worker.stop(DRAIN_SECONDS)
        publish()
    finally:
        backend.close()
