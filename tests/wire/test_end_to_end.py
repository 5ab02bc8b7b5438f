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
from harel.transport.base import Claim
from tests.accounting import CommandAccounting
from tests.fake_mongod.fixtures import Deployment
from tests.wire.in_process import SMOKE_TIMEOUT, Phased, Seams, running, smoke_app
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
    assert workers[0].http_port is not None
    _, exported = http_get(workers[0].http_port, "/metrics")
    completed = re.search(r'^harel_executions\{status="completed"\} (\S+)$', exported, re.MULTILINE)
    assert completed is not None and float(completed.group(1)) >= 1 + len(REGIONS), (
        "statistics read on scrape"
    )
    assert re.search(r"^harel_worker_ready 1\.0$", exported, re.MULTILINE)
    handled = sum(1 for trace in run.traces.values() for step in trace if step.get("handled"))
    if replica_set.is_real:  # the workers also serve whatever else is queued in that deployment's `harel`
        assert processed >= handled
    else:
        assert processed == handled

    for worker in workers:
        assert worker.terminate() == 0, worker.log()
    assert admin.harel.workers.count_documents({"pid": {"$in": [w.pid for w in workers]}}) == 0


# --- command accounting ----------------------------------------------------------------------------------


class RivalFirst:
    """A store whose first commit of an execution that already took a step finds a rival's commit ahead of
    it (made on a client of its own, outside the accounting): one lost CAS, forced, in every run."""

    def __init__(self, store: MongoStore, rival: MongoStore, done: threading.Event) -> None:
        self._store = store
        self._rival = rival
        self._done = done
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def commit_claim(self, claim: Claim, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            first = claim.execution.version > 0 and not self._done.is_set()
            if first:
                self._done.set()
        if first:
            ahead = self._rival.load(claim.execution_id)
            assert ahead is not None
            self._rival.commit(ahead, processed_event_id="rival-commit")
        return self._store.commit_claim(claim, *args, **kwargs)


def test_hot_path_commands_per_processed_event(
    replica_set: Deployment, seams: Seams, request: pytest.FixtureRequest
) -> None:
    """Per claim: one findAndModify that leases the execution and returns it with its pending events, and
    one update that commits every step and settles the mailbox. A refused commit (a lost lease or version)
    adds exactly its one version read; one is forced (a rival commits ahead of one claim) and counted.
    Nothing else runs on the consumer's path but the relay of what it committed: children in one bulk
    write, each outbox event in one send, one acknowledgement."""
    accounting = CommandAccounting()
    calls: Counter[str] = Counter()
    app, chart_id = smoke_app()
    opened = [seams.open(f"accounted-{n}", listeners=(accounting,)) for n in range(WORKERS)]
    rival, rival_done = seams.open("rival").store, threading.Event()
    workers = []
    for seam in opened:
        worker = seam.worker(app)
        worker.store = Phased(RivalFirst(seam.store, rival, rival_done), calls)  # type: ignore[assignment]
        worker.transport = Phased(seam.transport, calls)  # type: ignore[assignment]
        workers.append(worker)
    client = opened[0]

    with running(workers) as run:
        report = run_smoke(client.store, client.transport, app, chart_id=chart_id, timeout=SMOKE_TIMEOUT)
    assert report.passed, report.failures

    phase: Callable[..., Any] = accounting.tally
    handled = run.counter("processed")
    # The root: start, one done per region, the final timer; each region: start, greeting, its timer.
    assert handled == 2 + 4 * len(REGIONS)
    claims = calls["consumer.claim"] - calls["consumer.claim.empty"] - calls["consumer.claim.raised"]
    commits, refused = calls["consumer.commit_claim"], calls["consumer.commit_claim.raised"]
    assert rival_done.is_set() and refused >= 1, "the rival's commit did not cost a claim its CAS"
    assert refused == run.counter("conflicts"), "each refused commit is a lost CAS the workers counted"
    # At most one claim per event, and one more per refused commit: its events are claimed again.
    assert 0 < claims <= handled + refused

    consumer_calls = {label.split(".")[1] for label in calls if label.startswith("consumer.")}
    assert consumer_calls <= {
        "claim",
        "commit_claim",
        "release",
        "fail",
        "wait_hint",
        "wake",
        "send",
        "create_children",
        "ack_relay",
        "is_processed",
        "commit_outcome",
    }

    # claim: one findAndModify on executions per call, whether it found an execution or not.
    assert phase(phase="consumer.claim").commands == calls["consumer.claim"]
    assert (
        phase(phase="consumer.claim", collection="executions", command="findAndModify").commands
        == calls["consumer.claim"]
    )
    # commit: one update per call; a refused one adds its version read, counted apart.
    assert phase(phase="consumer.commit_claim", command="update").commands == commits
    assert phase(phase="consumer.commit_claim", command="find").commands == refused
    assert phase(phase="consumer.commit_claim").commands == commits + refused
    # A claim ends in a commit, in a release or a failure with nothing applied, or in a refused commit,
    # followed by a release unless it was the lease that was lost.
    lease_lost = calls["consumer.commit_claim.raised.LeaseLost"]
    assert commits == claims - (calls["consumer.release"] - (refused - lease_lost)) - calls["consumer.fail"]

    # The hot path: two commands per claim and at most one claim per event; a refused commit costs its
    # claim, its update and its version read.
    hot_path = claims + commits + refused
    assert hot_path <= 2 * handled + 3 * refused
    # The relay of what was committed: one update per send, one bulk update for the children, one ack.
    for method in ("send", "create_children", "ack_relay"):
        assert phase(phase=f"consumer.{method}", command="update").commands == calls[f"consumer.{method}"]
    assert calls["consumer.create_children"] == 1, "the root's fork: three children in one command"
    assert phase(phase="consumer.create_children", command="update").commands == 1
    request.node.user_properties += [
        ("events_processed", handled),
        ("claims", claims),
        ("hot_path_commands_per_event", round(hot_path / handled, 2)),
        ("lost_cas", refused),
    ]
