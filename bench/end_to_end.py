"""Benchmark 5: end to end — events per second and timer lateness with 1, 2 and 4 workers.

N Worker instances run in this process — threads, not processes: each with the default two consumer
threads and its own relay, sweep and heartbeat threads, all sharing the backend's one client. The workload
is the smoke workflow (fork/join, sibling greetings, durable timers), in two phases on the same workers:

- paced, first: `paced_runs` workflows start one every PACE_SECONDS, below what the workers can process,
  so a due timer mostly finds a consumer free: lateness here is the sweep and delivery delay.
- burst, then: `runs` workflows are started at once; the clock runs from the first start until the
  workers have processed every event of every run. Events per second = events ÷ that time. Timer lateness
  under the burst includes waiting in the queue behind the backlog the burst creates.

Timer lateness is, for every timer that took effect, the time its step ran minus its `fire_at`, read from
the execution traces afterwards; p50 and p99 by nearest rank.

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
PACE_SECONDS = 0.5
DEADLINE_SECONDS = 300.0
DRAIN_SECONDS = 5.0
POLL_SECONDS = 0.005


def quantile(samples: list[float], q: float) -> float:
    """The q-quantile (0 < q < 1) by nearest rank: always one of the samples."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class EndToEnd:
    backend: str
    workers: int
    runs: int
    events: int
    seconds: float
    burst_lateness: list[float]
    paced_runs: int
    paced_lateness: list[float]
    failures: list[str]

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds


def measure(url: str, label: str, workers: int, runs: int, paced_runs: int) -> EndToEnd:
    db_name = fresh_db_name()
    backend = open_backend(url, db_name=db_name)
    try:
        return _measure(backend, label, workers, runs, paced_runs)
    finally:
        if backend.client is not None and not backend.embedded:
            backend.client.drop_database(db_name)
        backend.close()


def _measure(backend: Backend, label: str, workers: int, runs: int, paced_runs: int) -> EndToEnd:
    app = App("bench")
    chart_id = smoke_workload.register(app)

    def start(n: int) -> str:
        exe, _ = start_execution(backend.store, backend.transport, app, chart_id, execution_id=f"run-{n:05d}")
        return exe.id

    pool = [
        Worker(backend.store, backend.transport, app, heartbeats=backend.heartbeats) for _ in range(workers)
    ]
    for worker in pool:
        worker.start()
    began = time.perf_counter()
    paced = []
    for n in range(paced_runs):
        paced.append(start(n))
        time.sleep(PACE_SECONDS)
    expected = paced_runs * smoke_workload.EVENTS_PER_RUN
    processed = _wait_for(pool, expected, began)
    started = time.perf_counter()
    burst = [start(n) for n in range(paced_runs, paced_runs + runs)]
    expected += runs * smoke_workload.EVENTS_PER_RUN
    processed = _wait_for(pool, expected, began)
    seconds = time.perf_counter() - started
    _stop(pool)
    failures = (
        [] if processed >= expected else [f"{processed} of {expected} events in {DEADLINE_SECONDS:.0f}s"]
    )
    burst_lateness, paced_lateness = _lateness(backend, burst, failures), _lateness(backend, paced, failures)
    return EndToEnd(
        label,
        workers,
        runs,
        runs * smoke_workload.EVENTS_PER_RUN,
        seconds,
        burst_lateness,
        paced_runs,
        paced_lateness,
        failures,
    )


def _wait_for(pool: list[Worker], events: int, started: float) -> int:
    """Until the workers have processed `events` in all, or the deadline; returns how many they did."""
    processed = 0
    while processed < events and time.perf_counter() - started < DEADLINE_SECONDS:
        time.sleep(POLL_SECONDS)
        processed = sum(worker.counters["processed"] for worker in pool)
    return processed


def _stop(pool: list[Worker]) -> None:
    stoppers = [threading.Thread(target=worker.stop, args=(DRAIN_SECONDS,)) for worker in pool]
    for stopper in stoppers:
        stopper.start()
    for stopper in stoppers:
        stopper.join()


def _lateness(backend: Backend, roots: list[str], failures: list[str]) -> list[float]:
    """Every handled timer's lateness in these runs; each run's smoke-check failures go to `failures`."""
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
    return lateness


def _percentiles(samples: list[float]) -> str:
    if not samples:
        return "no timers"
    p50, p99 = (quantile(samples, q) * 1000 for q in (0.5, 0.99))
    return f"p50 {number(p50)} ms, p99 {number(p99)} ms"


def rows(results: list[EndToEnd]) -> list[Row]:
    listed = []
    for result in results:
        workers = f"{result.workers} worker{'s' if result.workers > 1 else ''}"
        harel = (
            f"{number(result.events_per_second)} events/s; timer lateness under the burst "
            f"{_percentiles(result.burst_lateness)}, paced {_percentiles(result.paced_lateness)}"
        )
        note = (
            f"burst: {number(result.events)} events of {result.runs} smoke runs in {result.seconds:.1f} s, "
            f"{len(result.burst_lateness)} timers; paced: {result.paced_runs} runs, one every "
            f"{PACE_SECONDS} s, {len(result.paced_lateness)} timers"
        )
        if result.failures:
            note += f"; FAILED: {'; '.join(result.failures[:3])}"
        listed.append(Row(5, f"end to end, {result.backend}, {workers} (threads)", harel, "", note))
    return listed
