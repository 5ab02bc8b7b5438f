"""Benchmark 5's workers: N harel Workers on one database, as threads of this process or as processes.

Threads share this process's interpreter lock and the backend's one client. Processes (multiprocessing,
spawned) each open their own client on the same database, as separate `harel worker` processes do, and
publish the events they processed in shared memory, which this process reads. An embedded backend
(mongomock://) lives inside one process, so its workers can only be threads.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.context import SpawnProcess
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event as ProcessEvent
from typing import Protocol

from bench.smoke_workload import bench_app
from harel.backend import Backend, open_backend
from harel.worker import Worker, WorkerConfig

THREADS = "threads"
PROCESSES = "processes"
# A spawned process imports harel and connects before it is ready; past this it is reported as failed.
READY_SECONDS = 30.0
CONNECT_SECONDS = 10.0
# How often a worker process publishes its count: the end of a run is seen this much late at most.
PUBLISH_SECONDS = 0.002
DRAIN_SECONDS = 5.0


class WorkerPool(Protocol):
    kind: str

    def processed(self) -> int:
        """Events processed so far by all the workers."""


@dataclass
class _Threads:
    workers: list[Worker]
    kind: str = THREADS

    def processed(self) -> int:
        return sum(worker.counters["processed"] for worker in self.workers)


@contextlib.contextmanager
def worker_threads(backend: Backend, count: int, config: WorkerConfig) -> Iterator[WorkerPool]:
    """`count` Workers in this process, each with its own threads, all on `backend`'s one client."""
    app, _ = bench_app()
    pool = _Threads(
        [
            Worker(backend.store, backend.transport, app, config=config, heartbeats=backend.heartbeats)
            for _ in range(count)
        ]
    )
    for worker in pool.workers:
        worker.start()
    try:
        yield pool
    finally:
        stoppers = [threading.Thread(target=w.stop, args=(DRAIN_SECONDS,)) for w in pool.workers]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()


@dataclass
class _Processes:
    counts: list[Synchronized[int]] = field(default_factory=list)
    kind: str = PROCESSES

    def processed(self) -> int:
        return sum(count.value for count in self.counts)


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
            ready, processed = context.Event(), context.Value("q", 0)
            process = context.Process(
                target=serve, args=(url, db_name, config, ready, stop, processed), name=f"bench-worker-{n}"
            )
            process.start()
            started.append((process, ready))
            pool.counts.append(processed)
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
    processed: Synchronized[int],
) -> None:
    """A worker process: one Worker until `stop`, its count published."""
    backend = open_backend(url, db_name=db_name, deadline=CONNECT_SECONDS)
    try:
        worker = Worker(
            backend.store, backend.transport, bench_app()[0], config=config, heartbeats=backend.heartbeats
        )
        worker.start()
        ready.set()
        while not stop.wait(PUBLISH_SECONDS):
            processed.value = worker.counters["processed"]
        worker.stop(DRAIN_SECONDS)
        processed.value = worker.counters["processed"]
    finally:
        backend.close()
