"""Ordered delivery over the wire, with `harel worker` processes (3 x 2 consumers unless said otherwise).

Each test names the reordering, loss or doubling it would notice: a later event stepped before an earlier
one from the same sender, a region's `done` applied before its last event to the parent, one application's
worker touching another's executions, an event or a child delivered twice.
"""

from __future__ import annotations

import re
import urllib.request
from typing import Any

import pytest
from pymongo import MongoClient

from harel.app import App
from harel.client import send_event, start_execution
from harel.model import ExecutionStatus
from harel.partitioning import stored_partitions
from harel.smoke import REGIONS, check, gather, register_smoke
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from tests.fake_mongod.fixtures import Deployment
from tests.wire import ordering_app
from tests.wire.processes import WorkerProcess, WorkerProcesses, free_port, wait_until

pytestmark = pytest.mark.wire

WORKERS = 3
RUNS = 100
FINISH_TIMEOUT = 120.0
CREATED_VERSION = 1  # an execution is created at version 1; each step adds one


def seams(admin: MongoClient[Any]) -> tuple[MongoStore, MongoTransport]:
    """The store and mailboxes the worker processes use (database `harel`, partitioned as its deployment
    records), read through the admin client."""
    partitions = stored_partitions(admin.harel)
    return MongoStore(admin, "harel", partitions=partitions), MongoTransport(
        admin, "harel", watch=False, partitions=partitions
    )


def workers(
    processes: WorkerProcesses,
    replica_set: Deployment,
    admin: MongoClient[Any],
    app: str,
    count: int = WORKERS,
) -> list[WorkerProcess]:
    started = [
        processes.harel_worker(
            replica_set.url, "--app", f"tests.wire.ordering_app:{app}", http_port=free_port()
        )
        for _ in range(count)
    ]
    for worker in started:
        worker.wait_registered(admin)
    return started


def finished(store: MongoStore, ids: list[str]) -> bool:
    return all((exe := store.load(i)) is not None and exe.status is not ExecutionStatus.RUNNING for i in ids)


def metric(worker: WorkerProcess, name: str) -> float:
    assert worker.http_port is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.http_port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE))


def test_a_later_event_never_overtakes_a_slow_earlier_one(
    replica_set: Deployment, admin: MongoClient[Any], worker_processes: WorkerProcesses
) -> None:
    """e1's action takes 20 ms and e2 is sent right after it: every run ends in S2, e1 applied before e2,
    and e1's action ran once."""
    running = workers(worker_processes, replica_set, admin, "ordered")
    store, transport = seams(admin)
    app = ordering_app.ordered
    ids = [f"ordered-{n:03d}" for n in range(RUNS)]
    for execution_id in ids:
        start_execution(store, transport, app, "ordering.sequence", execution_id=execution_id)
        send_event(store, transport, app, execution_id, "e1")
        send_event(store, transport, app, execution_id, "e2")
    # Until every run took its three steps (start, e1, e2), in whatever order: a run that applied e2 first
    # would wait in S1 forever, and the assertions below name it at once.
    stepped = {"_id": {"$in": ids}, "version": {"$gte": CREATED_VERSION + 3}, "inbox": []}
    wait_until(
        lambda: admin.harel.executions.count_documents(stepped) == RUNS, FINISH_TIMEOUT, "every run's steps"
    )

    for execution_id in ids:
        exe = store.load(execution_id)
        assert exe is not None and exe.configuration == ["S2"], (execution_id, exe)
        applied = [s["event"] for s in store.read_trace(execution_id) if s["handled"]]
        assert applied == ["harel.start", "e1", "e2"], (execution_id, applied)
        assert exe.context["slow_ran"] == 1
    assert sum(metric(w, "harel_event_failures_total") for w in running) == 0


@pytest.mark.semantics("sem-order-per-sender", "sem-region-results", "sem-region-join")
def test_a_regions_last_event_reaches_its_parent_before_its_done(
    replica_set: Deployment, admin: MongoClient[Any], worker_processes: WorkerProcesses
) -> None:
    """Each reviewer region sends its vote to the parent, then finishes with its verdict as its result: in
    every run the join finds both votes already applied (a `done` overtaking its region's vote would leave
    one missing) and decides from both regions' results (a result lost on the way would reject)."""
    workers(worker_processes, replica_set, admin, "approval")
    store, transport = seams(admin)
    verdicts = {f"approval-{n:03d}": {"legal": n % 2 == 0, "finance": n % 3 != 0} for n in range(RUNS)}
    assert len({all(verdict.values()) for verdict in verdicts.values()}) == 2, "both outcomes are expected"
    for execution_id, verdict in verdicts.items():
        start_execution(
            store,
            transport,
            ordering_app.approval,
            "ordering.approval",
            context=verdict,
            execution_id=execution_id,
        )
    ids = list(verdicts)
    wait_until(lambda: finished(store, ids), FINISH_TIMEOUT, "every approval to be decided", poll=0.2)

    wrong = {}
    for execution_id, verdict in verdicts.items():
        exe = store.load(execution_id)
        assert exe is not None
        expected = "approved" if all(verdict.values()) else "rejected"
        if exe.configuration != [expected]:
            wrong[execution_id] = (exe.configuration, exe.context.get("regions"))
        assert {name: region["result"] for name, region in exe.context["regions"].items()} == {
            name: "approved" if yes else "rejected" for name, yes in verdict.items()
        }, (execution_id, exe.context)
        assert exe.context["votes_at_join"] == 2, (execution_id, exe.context)
        assert sorted(exe.context["votes"]) == ["finance", "legal"]
        steps = [s for s in store.read_trace(execution_id) if s["handled"]]
        assert [s["event"] for s in steps].count("vote") == 2
        for child_id in exe.children or dict.fromkeys(_children(store, execution_id)):
            from_child = [s["event"] for s in steps if s["event_id"].startswith(f"{child_id}@")]
            assert from_child == ["vote", "harel.done"], (child_id, from_child)
    assert wrong == {}, f"{len(wrong)} of {RUNS} approvals decided wrongly: {wrong}"


def _children(store: MongoStore, execution_id: str) -> list[str]:
    return [child for step in store.read_trace(execution_id) for child in step.get("spawns", [])]


def test_two_apps_on_one_database_never_touch_each_others_executions(
    replica_set: Deployment, admin: MongoClient[Any], worker_processes: WorkerProcesses
) -> None:
    """A worker of `orders` and a worker of `billing` on one database: each completes its own 50
    executions with no failed attempt, and processes exactly its own events."""
    orders_worker, billing_worker = (
        workers(worker_processes, replica_set, admin, app, count=1)[0] for app in ("orders", "billing")
    )
    store, transport = seams(admin)
    started: dict[str, list[str]] = {"orders": [], "billing": []}
    for n in range(50):
        for name, ids in started.items():
            app = getattr(ordering_app, name)
            exe, _ = start_execution(
                store, transport, app, f"ordering.{name}", execution_id=f"{name}-{n:02d}"
            )
            send_event(store, transport, app, exe.id, "close")
            ids.append(exe.id)
    every = started["orders"] + started["billing"]
    wait_until(lambda: finished(store, every), FINISH_TIMEOUT, "both apps' executions to finish", poll=0.2)

    for execution_id in every:
        document = admin.harel.executions.find_one({"_id": execution_id})
        assert document is not None and document["attempts"] == 0 and document["last_error"] is None
    for worker in (orders_worker, billing_worker):
        assert metric(worker, "harel_event_failures_total") == 0
        assert metric(worker, "harel_events_processed_total") == 50 * 2, "its own starts and closes, no more"


def test_three_workers_deliver_each_event_and_create_each_child_once(
    replica_set: Deployment, admin: MongoClient[Any], worker_processes: WorkerProcesses
) -> None:
    """No fault: the committing worker relays its own entries, so repeated deliveries (sends refused as
    duplicates, children found existing) stay under 1% of what was relayed, those of a committer that took
    another's relay work over aside (it sends that work again first), and no child is created twice."""
    running = [worker_processes.harel_worker(replica_set.url, http_port=free_port()) for _ in range(WORKERS)]
    for worker in running:
        worker.wait_registered(admin)
    store, transport = seams(admin)
    app = App("smoke-client")
    chart_id = register_smoke(app)  # the default smoke chart, which every worker serves
    roots = [
        start_execution(store, transport, app, chart_id, execution_id=f"smoke-once-{n:02d}")[0].id
        for n in range(20)
    ]
    wait_until(lambda: finished(store, roots), FINISH_TIMEOUT, "every smoke run to finish", poll=0.2)

    relayed = sum(metric(w, "harel_relayed_total") for w in running)
    repeated = sum(metric(w, "harel_redeliveries_total") for w in running)
    taken_over = sum(metric(w, "harel_relay_takeovers_total") for w in running)
    assert relayed >= 20 * 3 * len(REGIONS)
    assert (repeated - taken_over) / relayed < 0.01, (repeated, taken_over, relayed)
    for root in roots:
        report = check(gather(store, root, 60))
        assert report.passed, report.failures
        children = admin.harel.executions.count_documents({"parent_id": root})
        assert children == len(REGIONS)
