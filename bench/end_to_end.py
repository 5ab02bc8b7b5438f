"""Benchmark 5: end to end — what each processed event costs, and contention, with 1, 2, 4 and 8 workers.

The workload is the smoke workflow (fork/join, sibling greetings, durable timers). Each worker runs one
consumer (concurrency 1), so N workers claim at most N executions at a time; each has its own relay and
heartbeat threads. On every backend and worker count, on a fresh database, in two phases:

- under load, first: `runs` workflows, started so that `in_flight` runs' worth of events are waiting at
  any time (a new run starts as the processed count shows one finished), the same at every worker count
  (`bench.sizes`); the clock runs from the first
  start until the workers have processed every event. Events per second = events ÷ that time. Timer
  lateness under load includes waiting behind the other runs in flight.
- paced, then: `paced_runs` workflows start one every PACE_SECONDS, below what the workers can process, so
  a due timer mostly finds a consumer free: lateness here is the wake-up and delivery delay.

Under load, the workers' tallies (`bench.worker_pool.Tallies`) are read as the load starts and as its last
event is processed; their difference, divided by the events processed, is the engine's figure per worker
count: all commands per processed event, and contention: claims that found nothing, commits that lost the
version CAS, claims that took over a lease that ran out. These depend on the engine, not on the machine,
and must stay flat as workers are added: the summary row gives each figure at every worker count and how
far it strays from one worker's. Events per second are kept beside them, as information about this machine.

Timer lateness is, for every timer that took effect, the time its step ran minus its `fire_at`, read from
the execution traces afterwards; p50 and p99 by nearest rank. A phase in which no event is processed for
STALL_SECONDS is reported as failed at once.

Backends (`Setup`): the fake replica set with 1 ms of network latency per command, the same without
latency, the embedded default (`mongomock://`), and the deployment in HAREL_TEST_MONGO_URL when set. Over
the wire every worker is a process of its own with its own client, as `harel worker` processes are; the
embedded backend lives inside one process, so there the workers are threads sharing it. For a test
double, its process's CPU time under load says how busy it was: near 100 % it was the bottleneck.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from bench import smoke_workload
from bench.deployments import cpu_seconds, fresh_db_name
from bench.report import Row, machine, number
from bench.worker_pool import THREADS, Tallies, WorkerPool, worker_processes, worker_threads
from harel.backend import Backend, open_backend
from harel.client import start_execution
from harel.model import TIMER_EVENT
from harel.smoke import check, gather
from harel.worker import WorkerConfig

EMBEDDED_URL = "mongomock://"
EMBEDDED_LABEL = "mongomock:// (embedded default, not a database)"
PACE_SECONDS = 0.5
# A phase that processes no event for this long cannot complete: it is reported as failed at once
# rather than waited for (the workload's timers are 50 ms, the sweep polls at least every second).
STALL_SECONDS = 10.0
POLL_SECONDS = 0.005
WORKER_CONFIG = WorkerConfig(concurrency=1)
# Benchmark 5's targets on the fake replica set with latency: commands per processed event at every worker
# count within this fraction of one worker's, and contention per processed event at most this much at every
# count (one worker's is about 0: a fraction of it would say nothing).
FLAT_WITHIN = 0.20
CONTENTION_AT_MOST = 0.05


@dataclass(frozen=True)
class Setup:
    """Where and how benchmark 5 runs: the backend, and whether its workers are threads or processes."""

    label: str
    url: str
    workers_as: str  # THREADS or PROCESSES
    # the test double's process (its CPU time is read around the burst); None for a real deployment
    process_id: int | None = None
    # the backend the scaling target (FLAT_WITHIN) applies to
    scaling_target: bool = False

    @property
    def counts_commands(self) -> bool:
        """Over the wire; the embedded backend has no commands to count."""
        return self.url != EMBEDDED_URL


def quantile(samples: list[float], q: float) -> float:
    """The q-quantile (0 < q < 1) by nearest rank: always one of the samples."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass(frozen=True)
class EndToEnd:
    setup: Setup
    workers: int
    runs: int
    in_flight: int
    seconds: float
    load_lateness: list[float]
    paced_runs: int
    paced_lateness: list[float]
    failures: list[str]
    # the share of the burst the test double's process spent on a CPU; None for a real deployment
    server_busy: float | None
    # what the workers did under load, from its first start to its last event processed
    tallies: Tallies

    @property
    def backend(self) -> str:
        return self.setup.label

    @property
    def events(self) -> int:
        """Events of the runs under load."""
        return self.runs * smoke_workload.EVENTS_PER_RUN

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds

    def per_event(self, count: int) -> float:
        """`count` (one of the tallies) per event processed under load."""
        return count / self.tallies.processed

    @property
    def contention(self) -> float:
        """Empty claims, lost CAS and lease steals per event processed under load."""
        tallies = self.tallies
        return self.per_event(tallies.empty_claims + tallies.conflicts + tallies.lease_steals)


def measure(setup: Setup, workers: int, runs: int, in_flight: int, paced_runs: int) -> EndToEnd:
    db_name = fresh_db_name()
    backend = open_backend(setup.url, db_name=db_name)
    try:
        return _measure(setup, backend, db_name, workers, runs, in_flight, paced_runs)
    finally:
        if backend.client is not None and not backend.embedded:
            backend.client.drop_database(db_name)
        backend.close()


def _measure(
    setup: Setup, backend: Backend, db_name: str, workers: int, runs: int, in_flight: int, paced_runs: int
) -> EndToEnd:
    app, chart_id = smoke_workload.bench_app()
    started: list[str] = []

    def start() -> None:
        exe, _ = start_execution(
            backend.store, backend.transport, app, chart_id, execution_id=f"run-{len(started):05d}"
        )
        started.append(exe.id)

    def top_up(processed: int) -> None:
        """Start runs while fewer than `in_flight` runs' worth of events wait to be processed."""
        while len(started) < runs and len(started) - processed / smoke_workload.EVENTS_PER_RUN < in_flight:
            start()

    failures: list[str] = []
    pool = (
        worker_threads(backend, workers, WORKER_CONFIG)
        if setup.workers_as == THREADS
        else worker_processes(setup.url, db_name, workers, WORKER_CONFIG)
    )
    with pool as running:
        cpu_before, tallies_before, began = _cpu(setup), running.tallies(), time.perf_counter()
        _wait_for(running, runs * smoke_workload.EVENTS_PER_RUN, failures, top_up)
        seconds = time.perf_counter() - began
        cpu_after, tallies = _cpu(setup), running.tallies() - tallies_before
        loaded = list(started)
        if not failures:
            for _ in range(paced_runs):
                start()
                time.sleep(PACE_SECONDS)
            _wait_for(running, len(started) * smoke_workload.EVENTS_PER_RUN, failures)
    paced = started[len(loaded) :]
    return EndToEnd(
        setup,
        workers,
        runs,
        in_flight,
        seconds,
        _lateness(backend, loaded, failures),
        paced_runs,
        _lateness(backend, paced, failures),
        failures,
        None if cpu_before is None or cpu_after is None else (cpu_after - cpu_before) / seconds,
        tallies,
    )


def _wait_for(
    pool: WorkerPool,
    events: int,
    failures: list[str],
    on_progress: Callable[[int], None] = lambda processed: None,
) -> None:
    """Until the workers have processed `events` in all, telling `on_progress` each new count; a failure
    once none was processed for STALL_SECONDS, so a flow that cannot complete fails in seconds."""
    processed, moved_at = pool.processed(), time.monotonic()
    on_progress(processed)
    while processed < events:
        time.sleep(POLL_SECONDS)
        now, seen = time.monotonic(), pool.processed()
        if seen != processed:
            processed, moved_at = seen, now
            on_progress(processed)
        elif now - moved_at > STALL_SECONDS:
            failures.append(f"{processed} of {events} events; none processed in the last {STALL_SECONDS:g} s")
            return


def _cpu(setup: Setup) -> float | None:
    """The test double's CPU time so far; None for a real deployment, or where it cannot be read."""
    return None if setup.process_id is None else cpu_seconds(setup.process_id)


def _lateness(backend: Backend, roots: list[str], failures: list[str]) -> list[float]:
    """Every handled timer's lateness in these runs; each run's smoke-check failures go to `failures`."""
    lateness: list[float] = []
    for root in roots:
        run = gather(backend.store, root, STALL_SECONDS)
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


def drift(values: list[float]) -> float | None:
    """How far the figure strays from its first value (one worker's) at most, as a fraction of it; None when
    the first is 0 and another is not."""
    first = values[0]
    if first == 0:
        return 0.0 if not any(values) else None
    return max(abs(value / first - 1) for value in values)


def rows(results: list[EndToEnd]) -> list[Row]:
    listed = []
    setups = list(dict.fromkeys(result.setup for result in results))
    for setup in setups:
        flows = [result for result in results if result.setup == setup]
        listed += [_row(result) for result in flows]
        listed.append(_flatness(setup, flows))
    return listed


def _flatness(setup: Setup, flows: list[EndToEnd]) -> Row:
    """The engine's figure: commands and contention per processed event at each worker count."""
    counts = ", ".join(str(flow.workers) for flow in flows)
    figure = f"end to end, {setup.label}: per processed event with {counts} workers"
    target = (
        f"target: commands within {FLAT_WITHIN:.0%} of 1 worker's, contention at most "
        f"{CONTENTION_AT_MOST:.2f} at every count"
        if setup.scaling_target
        else "no target: see bench/README.md"
    )
    if any(flow.failures for flow in flows) or flows[0].workers != 1:
        return Row(5, figure, "n/a (a run failed)", "", target)
    parts = []
    if setup.counts_commands:
        parts.append(_series("commands", [flow.per_event(flow.tallies.commands) for flow in flows]))
    parts.append(
        _series("contention (empty claims + lost CAS + lease steals)", [flow.contention for flow in flows])
    )
    return Row(5, figure, "; ".join(parts), "", target)


def _series(name: str, values: list[float]) -> str:
    strays = drift(values)
    spread = "n/a from 0" if strays is None else f"at most {strays:.0%} from 1 worker's"
    return f"{name} {' → '.join(f'{value:.2f}' for value in values)} ({spread})"


def _row(result: EndToEnd) -> Row:
    workers = f"{result.workers} worker{'s' if result.workers > 1 else ''}"
    kind = "threads of one process" if result.setup.workers_as == THREADS else "one process each"
    figure = f"end to end, {result.setup.label}, {workers} ({kind}, one consumer each)"
    if result.failures:
        return Row(5, figure, "n/a (a run failed)", "", f"FAILED: {'; '.join(result.failures[:3])}")
    tallies = result.tallies
    commands = (
        f"{result.per_event(tallies.commands):.2f} commands"
        if result.setup.counts_commands
        else "commands not counted (no wire)"
    )
    harel = (
        f"per processed event: {commands}, {result.per_event(tallies.empty_claims):.2f} empty claims, "
        f"{result.per_event(tallies.conflicts):.2f} lost CAS, {result.per_event(tallies.lease_steals):.2f} "
        "lease steals"
    )
    note = (
        f"under load: {number(tallies.processed)} events of {result.runs} smoke runs, {result.in_flight} in "
        f"flight, {tallies.claims} claims"
    )
    if result.setup.counts_commands:
        note += f", {number(tallies.commands)} commands"
    note += (
        f"; on this machine ({machine()}): {number(result.events_per_second)} events/s in "
        f"{result.seconds:.2f} s"
    )
    if result.server_busy is not None:
        note += f", the test double on a CPU {result.server_busy:.0%} of that time"
    note += (
        f"; timer lateness under load {_percentiles(result.load_lateness)} ({len(result.load_lateness)} "
        f"timers), paced {_percentiles(result.paced_lateness)} ({result.paced_runs} runs, one every "
        f"{PACE_SECONDS} s, {len(result.paced_lateness)} timers)"
    )
    return Row(5, figure, harel, "", note)
