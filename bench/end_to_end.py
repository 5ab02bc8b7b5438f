"""Benchmark 5: end to end — events per second and timer lateness with 1, 2 and 4 workers.

`runs` smoke workflows (fork/join, sibling greetings, durable timers) are started at once; then N Worker
instances start in this process — threads, not processes: each with the default two consumer threads and
its own relay, sweep and heartbeat threads, all sharing the backend's one client. The clock runs from the
workers' start until they have processed every event of every run.

- events per second: events processed ÷ that time.
- timer lateness: for every timer that took effect, the time its step ran minus its `fire_at`, read from
  the execution traces afterwards. It includes waiting behind the backlog the burst of runs creates, so it
  is lateness under load, not the sweep's resolution.

Backends: the embedded default (`mongomock://`: the production MongoStore and MongoTransport on one
in-process mongomock behind one lock) and the fake replica set over sockets — neither is a database, and
both serialise every command, so these figures show the code path end to end, not what MongoDB does.
Real figures come from HAREL_TEST_MONGO_URL, which adds that deployment as a third backend.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from bench import smoke_workload
from bench.deployments import fresh_db_name
from bench.report import Row, number
from harel.app import App
from harel.backend import Backend, open_backend
from harel.client import start_execution
from harel.model import TIMER_EVENT
from harel.smoke import check, gather
from harel.worker import Worker

EMBEDDED_URL = "mongomock://"
EMBEDDED_LABEL = "mongomock:// (embedded default, not a database)"
DEADLINE_SECONDS = 300.0
DRAIN_SECONDS = 5.0
POLL_SECONDS = 0.005


@dataclass(frozen=True)
class EndToEnd:
    backend: str
    workers: int
    runs: int
    events: int
    seconds: float
    lateness: list[float]
    failures: list[str]

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds

    def lateness_quantile(self, q: float) -> float:
        """The q-quantile (0 < q < 1) of timer lateness, in seconds, nearest rank."""
        ordered = sorted(self.lateness)
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def measure(url: str, label: str, workers: int, runs: int) -> EndToEnd:
    db_name = fresh_db_name()
    backend = open_backend(url, db_name=db_name)
    try:
        return _measure(backend, label, workers, runs)
    finally:
        if backend.client is not None and not backend.embedded:
            backend.client.drop_database(db_name)
        backend.close()


def _measure(backend: Backend, label: str, workers: int, runs: int) -> EndToEnd:
    app = App("bench")
    chart_id = smoke_workload.register(app)
    roots = [
        start_execution(backend.store, backend.transport, app, chart_id, execution_id=f"run-{n:05d}")[0].id
        for n in range(runs)
    ]
    expected = runs * smoke_workload.EVENTS_PER_RUN
    pool = [
        Worker(backend.store, backend.transport, app, heartbeats=backend.heartbeats) for _ in range(workers)
    ]
    started = time.perf_counter()
    for worker in pool:
        worker.start()
    processed = 0
    while processed < expected and time.perf_counter() - started < DEADLINE_SECONDS:
        time.sleep(POLL_SECONDS)
        processed = sum(worker.counters["processed"] for worker in pool)
    seconds = time.perf_counter() - started
    stoppers = [threading.Thread(target=worker.stop, args=(DRAIN_SECONDS,)) for worker in pool]
    for stopper in stoppers:
        stopper.start()
    for stopper in stoppers:
        stopper.join()
    failures = (
        [] if processed >= expected else [f"{processed} of {expected} events in {DEADLINE_SECONDS:.0f}s"]
    )
    lateness: list[float] = []
    for root in roots:
        run = gather(backend.store, root, DEADLINE_SECONDS)
        failures += check(run).failures
        lateness += [
            step["at"] - float(step["timer_fire_at"])
            for trace in run.traces.values()
            for step in trace
            if step["event"] == TIMER_EVENT and step["handled"]
        ]
    return EndToEnd(label, workers, runs, processed, seconds, lateness, failures)


def rows(results: list[EndToEnd]) -> list[Row]:
    listed = []
    for result in results:
        workers = f"{result.workers} worker{'s' if result.workers > 1 else ''}"
        harel = f"{number(result.events_per_second)} events/s"
        if result.lateness:
            p50, p99 = (result.lateness_quantile(q) * 1000 for q in (0.5, 0.99))
            harel += f"; timer lateness p50 {number(p50)} ms, p99 {number(p99)} ms"
        note = f"{number(result.events)} events of {result.runs} smoke runs in {result.seconds:.1f} s"
        if result.failures:
            note += f"; FAILED: {'; '.join(result.failures[:3])}"
        listed.append(Row(5, f"end to end, {result.backend}, {workers} (threads)", harel, "", note))
    return listed
