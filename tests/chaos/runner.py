"""The chaos run: `harel worker` processes under fork/join load with durable timers, killed (SIGKILL) and
restarted, stopped (SIGTERM) and restarted, and stalled (SIGSTOP past their lease, then SIGCONT), against
the test replica set in its own process; then everything is verified from the store.

The load alternates two charts of `tests/wire/chaos_app.py`: the smoke chart with 0.3 s timers (three
regions greeting each other, a timer in each, a timer after the join) and the approval chart (three
reviewer regions each think on a timer, send their vote to the parent, then finish; the parent must have
every vote when the join fires, so a region's `done` must not overtake its vote).

The verdict, from the store alone: every execution completed; each child created and started once; no
event took effect twice (trace event ids, the dedupe window); no timer fired early by the server's clock;
nothing left in any mailbox, outbox, spawns, relay hold, lease or dead letter (tests/audit.py); every
smoke run passes the smoke checker; every approval's join saw all three votes, each region's vote applied
before its `done`. Timer lateness is reported (p50, p99), never asserted, with the faults dealt and what
the workers logged of them: leases taken over from a dead or stalled worker, commits refused.
"""

from __future__ import annotations

import contextlib
import random
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from harel.client import start_execution
from harel.executions.partitions import DEFAULT_SHARDED_COUNT
from harel.model import DONE_EVENT, ExecutionStatus
from harel.partitioning import init, stored_partitions
from harel.smoke import check, gather
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from tests.audit import Audit, audit
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, start_fake_mongod_process
from tests.wire import chaos_app
from tests.wire.processes import WorkerProcess, WorkerProcesses, wait_until

APP = "tests.wire.chaos_app:app"
STEALS = "took over an expired lease"
CONFLICTS = "commit refused"


@dataclass(frozen=True)
class ChaosConfig:
    workers: int = 3
    executions: int = 240
    kills: int = 12
    sigterms: int = 3
    stalls: int = 3
    lease_seconds: float = 2.0
    start_rate: float = 2.0  # executions started per second
    finish_timeout: float = 300.0
    seed: int = 1
    shards: int = 0  # 0: a replica set; else a sharded cluster of that many shards, partitioned


@dataclass
class ChaosReport:
    config: ChaosConfig
    audit: Audit
    failures: list[str]
    elapsed: float
    roots: int = 0
    kills: int = 0
    sigterms: int = 0
    stalls: int = 0
    steals: int = 0
    conflicts: int = 0
    worker_logs: list[Path] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures and self.audit.passed

    def render(self) -> str:
        late = self.audit
        p50, p99 = late.percentile(50), late.percentile(99)
        worst = max(late.lateness, default=0.0)
        verdict = "PASS" if self.passed else "FAIL"
        lines = [
            f"{verdict}  {self.roots} fork/join executions ({late.executions} with their children, "
            f"{late.steps} steps) under {self.config.workers} workers in {self.elapsed:.0f}s",
            f"      faults: {self.kills} kill -9, {self.sigterms} SIGTERM, {self.stalls} SIGSTOP past the "
            f"lease ({self.config.lease_seconds:g}s)",
            f"      the workers logged: {self.steals} leases taken over, {self.conflicts} commits refused",
            f"      {late.timers} timers, none early; lateness p50 {_s(p50)}, p99 {_s(p99)}, max {worst:.3f}s",
        ]
        lines += [f"  - {failure}" for failure in [*self.failures, *late.failures][:50]]
        return "\n".join(lines)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


class _Fleet:
    """The worker processes of the run: started, killed, stopped, stalled, replaced."""

    def __init__(self, url: str, log_dir: Path, config: ChaosConfig, admin: MongoClient[Any]) -> None:
        self._url = url
        self._processes = WorkerProcesses(log_dir)
        self._config = config
        self._admin = admin
        self.live: list[WorkerProcess] = []
        self.all: list[WorkerProcess] = []
        self._stalled: set[int] = set()
        self._lock = threading.Lock()

    def start(self) -> WorkerProcess:
        worker = self._processes.harel_worker(
            self._url,
            "--app",
            APP,
            "--lease-seconds",
            str(self._config.lease_seconds),
            "--drain-seconds",
            "2",
        )
        self.live.append(worker)
        self.all.append(worker)
        return worker

    def wait_registered(self) -> None:
        for worker in self.live:
            worker.wait_registered(self._admin)

    def victim(self, rng: random.Random) -> WorkerProcess:
        """A worker to strike, once every live worker is consuming (the last one struck was replaced and
        registered): one fault at a time, on a fleet that is otherwise up, never the stalled one."""
        self.wait_registered()
        with self._lock:
            stalled = set(self._stalled)
        return rng.choice([w for w in self.live if w.pid not in stalled])

    def kill(self, victim: WorkerProcess) -> None:
        self.live.remove(victim)
        victim.kill()
        self.start()

    def terminate(self, victim: WorkerProcess) -> int:
        self.live.remove(victim)
        code = victim.terminate()
        self.start()
        return code

    def stall(self, victim: WorkerProcess, seconds: float) -> threading.Timer:
        """SIGSTOP now, SIGCONT after `seconds` (meanwhile no other fault picks it)."""
        with self._lock:
            self._stalled.add(victim.pid)
        victim.process.send_signal(signal.SIGSTOP)

        def resume() -> None:
            victim.process.send_signal(signal.SIGCONT)
            with self._lock:
                self._stalled.discard(victim.pid)

        timer = threading.Timer(seconds, resume)
        timer.start()
        return timer

    def stop_all(self) -> list[int]:
        codes = [worker.terminate() for worker in self.live]
        self.live.clear()
        return codes

    def kill_all(self) -> None:
        self._processes.kill_all()

    def logged(self, needle: str) -> int:
        return sum(worker.log().count(needle) for worker in self.all)


@contextlib.contextmanager
def _deployment(shards: int) -> Iterator[str]:
    """The fake replica set, or a fake cluster of `shards` shards partitioned as `harel partitions init`
    leaves one, in its own process."""
    fake = start_fake_mongod_process("--shards", str(shards)) if shards else start_fake_mongod_process()
    try:
        if shards:
            with MongoClient(fake.url, **CLIENT_OPTIONS) as admin:
                init(admin, "harel", DEFAULT_SHARDED_COUNT)
        yield fake.url
    finally:
        fake.stop()


def _seams(admin: MongoClient[Any]) -> tuple[MongoStore, MongoTransport]:
    partitions = stored_partitions(admin.harel)
    return MongoStore(admin, "harel", partitions=partitions), MongoTransport(
        admin, "harel", watch=False, partitions=partitions
    )


def _plan(config: ChaosConfig, rng: random.Random, duration: float) -> list[tuple[float, str]]:
    """When each fault strikes, spread at random over the load."""
    faults = ["kill"] * config.kills + ["sigterm"] * config.sigterms + ["stall"] * config.stalls
    rng.shuffle(faults)
    return sorted((rng.uniform(1.0, max(1.5, duration)), fault) for fault in faults)


def run(
    config: ChaosConfig, log_dir: Path | None = None, progress: Callable[[str], None] = lambda _: None
) -> ChaosReport:
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="harel-chaos-"))
    rng = random.Random(config.seed)
    began = time.monotonic()
    with _deployment(config.shards) as url, MongoClient(url, **CLIENT_OPTIONS) as admin:
        fleet = _Fleet(url, log_dir, config, admin)
        try:
            for _ in range(config.workers):
                fleet.start()
            fleet.wait_registered()
            progress(f"{config.workers} workers up on {url}; logs in {log_dir}")
            report, roots = _load_and_strike(config, rng, fleet, admin, progress)
            codes = fleet.stop_all()
            if any(codes):
                report.failures.append(f"workers exited with {codes} on SIGTERM, expected 0")
        finally:
            fleet.kill_all()
        report.audit = audit(admin.harel.executions.find({}))
        if config.shards:
            report.failures += _untargeted_writes(admin)
        report.failures += _verify(admin, roots)
        report.steals, report.conflicts = fleet.logged(STEALS), fleet.logged(CONFLICTS)
        report.worker_logs = [worker.log_path for worker in fleet.all]
    report.elapsed = time.monotonic() - began
    return report


def _load_and_strike(
    config: ChaosConfig,
    rng: random.Random,
    fleet: _Fleet,
    admin: MongoClient[Any],
    progress: Callable[[str], None],
) -> tuple[ChaosReport, dict[str, list[str]]]:
    """Start the executions at the configured rate while the faults strike, then wait for them to finish.
    The report so far, and the roots started, by chart."""
    store, transport = _seams(admin)
    charts = (chaos_app.SMOKE_CHART_ID, chaos_app.APPROVAL_CHART_ID)
    roots: dict[str, list[str]] = {chart: [] for chart in charts}
    duration = config.executions / config.start_rate
    started_all = threading.Event()

    def start_load() -> None:
        for n in range(config.executions):
            chart = charts[n % len(charts)]
            execution_id = f"chaos-{n:04d}-{chart}"
            start_execution(store, transport, chaos_app.app, chart, execution_id=execution_id)
            roots[chart].append(execution_id)
            time.sleep(1 / config.start_rate)
        started_all.set()

    loader = threading.Thread(target=start_load, name="chaos-load", daemon=True)
    report = ChaosReport(config, Audit(), [], 0.0)
    t0 = time.monotonic()
    loader.start()
    stalls: list[threading.Timer] = []
    for at, fault in _plan(config, rng, duration):
        time.sleep(max(0.0, at - (time.monotonic() - t0)))
        victim = fleet.victim(rng)
        if fault == "kill":
            fleet.kill(victim)
            report.kills += 1
        elif fault == "sigterm":
            code = fleet.terminate(victim)
            if code != 0:
                report.failures.append(f"worker {victim.pid} exited with {code} on SIGTERM, expected 0")
            report.sigterms += 1
        else:
            stalls.append(fleet.stall(victim, config.lease_seconds + 1.0))
            report.stalls += 1
        progress(f"+{time.monotonic() - t0:5.1f}s {fault} worker {victim.pid}; {_count(roots)} started")
    for stall in stalls:
        stall.join()
    started_all.wait()
    loader.join()
    every = [root for ids in roots.values() for root in ids]
    report.roots = len(every)
    progress(f"+{time.monotonic() - t0:5.1f}s all {len(every)} started; waiting for them to finish")

    def finished() -> bool:
        done = admin.harel.executions.count_documents(
            {"_id": {"$in": every}, "status": {"$ne": ExecutionStatus.RUNNING.value}}
        )
        return done == len(every)

    try:
        wait_until(finished, config.finish_timeout, "every execution to finish", poll=0.5)
    except AssertionError as exc:
        report.failures.append(str(exc))
    progress(f"+{time.monotonic() - t0:5.1f}s finished; verifying")
    return report, roots


# What a router counts of single-document writes that lacked their shard key (MongoDB's own names).
UNTARGETED = (
    "updateOneNonTargetedShardedCount",
    "findAndModifyNonTargetedShardedCount",
    "deleteOneNonTargetedShardedCount",
    "updateOneWithoutShardKeyWithIdCount",
)


def _untargeted_writes(admin: MongoClient[Any]) -> list[str]:
    """On a sharded cluster: the router's counters of writes that reached every shard, each a failure."""
    counted = admin.admin.command("serverStatus")["metrics"]["query"]
    return [f"the router counted {counted[name]} {name}" for name in UNTARGETED if counted[name]]


def _count(roots: dict[str, list[str]]) -> int:
    return sum(len(ids) for ids in roots.values())


def _verify(admin: MongoClient[Any], roots: dict[str, list[str]]) -> list[str]:
    """What the audit cannot know: each chart's own promise."""
    store, transport = _seams(admin)
    failures = []
    for root in roots[chaos_app.SMOKE_CHART_ID]:
        report = check(gather(store, root, 600.0))
        failures += [f"{root}: {failure}" for failure in report.failures]
    for root in roots[chaos_app.APPROVAL_CHART_ID]:
        failures += _approval_failures(store, root)
    if transport.pending_count():
        failures.append(f"{transport.pending_count()} events left in mailboxes")
    failures += [f"{p.execution_id}: dead letter {p.event_name}: {p.error}" for p in transport.parked()]
    return failures


def _approval_failures(store: MongoStore, root: str) -> list[str]:
    exe = store.load(root)
    if exe is None:
        return [f"{root}: never created"]
    failures = []
    if exe.context.get("votes_at_join") != len(chaos_app.REVIEWERS):
        failures.append(f"{root}: the join saw {exe.context.get('votes_at_join')} votes, expected 3")
    steps = [s for s in store.read_trace(root) if s["handled"]]
    children = {child for step in store.read_trace(root) for child in step.get("spawns", [])}
    for child in children:
        from_child = [s["event"] for s in steps if s["event_id"].startswith(f"{child}@")]
        if from_child != ["vote", DONE_EVENT]:
            failures.append(f"{root}: from {child} the parent applied {from_child}, expected vote then done")
    return failures
