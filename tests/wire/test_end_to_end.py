"""End to end over sockets: worker processes, the smoke CLI, health endpoints, and the hot path's commands.

- Three `harel worker` processes and the `harel smoke` command complete the fork/join + durable-timer
  workflow; each worker answers /healthz, /readyz and /metrics, and drains on SIGTERM.
- Command accounting: workers in this process run the same workflow over real clients, every store and
  queue call labelled by the worker thread that made it, and the commands behind each processed event are
  counted (never timed): claim, load_for_event, commit (plus at most one counters call), ack.
"""

from __future__ import annotations

import re
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from pymongo import MongoClient

from harel.model import ExecutionStatus
from harel.smoke import REGIONS, check, gather, run_smoke
from harel.store.mongo import MongoStore
from tests.accounting import CommandAccounting
from tests.fake_mongod.fixtures import Deployment
from tests.wire.in_process import SMOKE_TIMEOUT, Seams, running, smoke_app
from tests.wire.processes import WorkerProcesses, free_port, run_harel

pytestmark = pytest.mark.wire

WORKERS = 3


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_three_worker_processes_and_the_smoke_cli(
    replica_set: Deployment, admin: MongoClient[Any], worker_processes: WorkerProcesses
) -> None:
    workers = [
        worker_processes.harel_worker(replica_set.url, "--drain-seconds", "5", http_port=free_port())
        for _ in range(WORKERS)
    ]
    for worker in workers:
        worker.wait_registered(admin)
        assert worker.http_port is not None
        assert http_get(worker.http_port, "/healthz") == (200, "ok\n")
        assert http_get(worker.http_port, "/readyz") == (200, "ready\n")

    smoke = run_harel("smoke", "--url", replica_set.url, "--timeout", "60")

    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert "PASS" in smoke.stdout
    # The checker's verdict, re-derived from the stored executions by a client of this test.
    match = re.search(r"^smoke run (\S+)$", smoke.stdout, re.MULTILINE)
    assert match is not None, smoke.stdout
    run = gather(MongoStore(admin, "harel"), match.group(1), 60.0)
    assert check(run).passed
    assert len(run.executions) == 1 + len(REGIONS)
    assert all(exe.status is ExecutionStatus.COMPLETED for exe in run.executions.values())
    children = admin.harel.executions.count_documents({"_id": {"$regex": f"^{re.escape(run.root_id)}/"}})
    assert children == len(REGIONS)

    processed = 0
    for worker in workers:
        assert worker.http_port is not None
        status, metrics = http_get(worker.http_port, "/metrics")
        assert status == 200
        processed += sum(
            float(value)
            for value in re.findall(r"^harel_events_processed_total\{[^}]*\} (\S+)$", metrics, re.MULTILINE)
        )
    handled = sum(1 for trace in run.traces.values() for step in trace if step.get("handled"))
    if replica_set.is_real:  # the workers also serve whatever else is queued in that deployment's `harel`
        assert processed >= handled
    else:
        assert processed == handled

    for worker in workers:
        assert worker.terminate() == 0, worker.log()
    assert admin.harel.workers.count_documents({"pid": {"$in": [w.pid for w in workers]}}) == 0


# --- command accounting ----------------------------------------------------------------------------------


def _role() -> str:
    """Which part of a worker the current thread is: its threads are named harel-consumer-N, -relay, -sweep."""
    name = threading.current_thread().name
    if name.startswith("harel-consumer-"):
        return "consumer"
    if name in ("harel-relay", "harel-sweep"):
        return name.removeprefix("harel-")
    return "client"


class Phased:
    """Runs each method of a store or transport under the accounting phase `<role>.<method>` and counts
    the calls (a claim that found nothing is also counted as `consumer.claim.empty`)."""

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
            with CommandAccounting.phase(label):
                result = attribute(*args, **kwargs)
            with self._lock:
                self._calls[label] += 1
                if name == "claim" and result is None:
                    self._calls[f"{label}.empty"] += 1
            return result

        return call


def test_hot_path_commands_per_processed_event(
    replica_set: Deployment, seams: Seams, request: pytest.FixtureRequest
) -> None:
    accounting = CommandAccounting()
    calls: Counter[str] = Counter()
    app, chart_id = smoke_app()
    opened = [seams.open(f"accounted-{n}", listeners=(accounting,)) for n in range(WORKERS)]
    workers = []
    for seam in opened:
        worker = seam.worker(app)
        worker.store = Phased(seam.store, calls)  # type: ignore[assignment]
        worker.transport = Phased(seam.transport, calls)  # type: ignore[assignment]
        workers.append(worker)
    client = opened[0]

    with running(workers) as run:
        report = run_smoke(client.store, client.transport, app, chart_id=chart_id, timeout=SMOKE_TIMEOUT)
    assert report.passed, report.failures

    phase: Callable[..., Any] = accounting.tally
    conflicts = run.counter("conflicts")
    handled = calls["consumer.claim"] - calls["consumer.claim.empty"]
    # The root: start, one done per region, the final timer; each region: start, greeting, its timer.
    assert handled >= 2 + 4 * len(REGIONS)

    # Every consumer-side store or queue call is one of the hot path's (or the idle wait's).
    consumer_calls = {label.split(".")[1] for label in calls if label.startswith("consumer.")}
    assert consumer_calls <= {
        "claim",
        "load_for_event",
        "commit",
        "ack",
        "release",
        "next_visible_at",
        "wait_hint",
    }

    # claim: one findAndModify on the queue per call, whether it found a message or not.
    assert phase(phase="consumer.claim").commands == calls["consumer.claim"]
    assert (
        phase(phase="consumer.claim", collection="queue", command="findAndModify").commands
        == calls["consumer.claim"]
    )
    # load_for_event: one aggregate per call; one call per handled event, one more per lost CAS.
    assert phase(phase="consumer.load_for_event").commands == calls["consumer.load_for_event"]
    assert (
        phase(phase="consumer.load_for_event", command="aggregate").commands
        == calls["consumer.load_for_event"]
    )
    assert calls["consumer.load_for_event"] == handled + conflicts
    # commit: one write on executions per call, at most one counters call, and a version read per lost CAS.
    commits = calls["consumer.commit"]
    writes = phase(phase="consumer.commit", collection="executions", command="update").commands
    writes += phase(phase="consumer.commit", collection="executions", command="insert").commands
    counters = phase(phase="consumer.commit", collection="counters").commands
    version_reads = phase(phase="consumer.commit", collection="executions", command="find").commands
    assert writes == commits
    assert counters <= commits
    assert phase(phase="consumer.commit", collection="counters", command="findAndModify").commands == counters
    assert version_reads == conflicts
    assert phase(phase="consumer.commit").commands == writes + counters + version_reads
    # ack (or, for an event that came before its execution's start, release): one command per handled event.
    assert phase(phase="consumer.ack", collection="queue", command="delete").commands == calls["consumer.ack"]
    assert (
        phase(phase="consumer.release", collection="queue", command="update").commands
        == calls["consumer.release"]
    )
    assert calls["consumer.ack"] + calls["consumer.release"] == handled

    # The hot path: per processed event at most claim + load_for_event + commit + ack, plus at most one
    # counters call per commit (a lost CAS adds its own load, version read and commit).
    event_path = (
        handled
        + phase(phase="consumer.load_for_event").commands
        + phase(phase="consumer.commit").commands
        + phase(phase="consumer.ack").commands
        + phase(phase="consumer.release").commands
    )
    assert event_path <= 4 * handled + counters + 3 * conflicts
    assert counters <= commits
    # Recorded (not asserted) for the reports: what one processed event costs on the wire.
    path_phases = ("claim", "load_for_event", "commit", "ack", "release")
    path = [phase(phase=f"consumer.{name}") for name in path_phases]
    request.node.user_properties += [
        ("events_processed", handled),
        ("commands_per_event", round(event_path / handled, 2)),
        ("request_bytes_per_event", sum(t.request_bytes for t in path) // handled),
        ("reply_bytes_per_event", sum(t.reply_bytes for t in path) // handled),
    ]
