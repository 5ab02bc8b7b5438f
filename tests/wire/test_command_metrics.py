"""`harel_db_commands` from a `harel worker` process over the wire: the commands its real PyMongo client sent,
by the loop that sent them, as /metrics exposes them to the dashboard's "commands per event" panel."""

from __future__ import annotations

import re
import urllib.request
from typing import Any

import pytest
from pymongo import MongoClient

from harel.client import send_event, start_execution
from harel.sent import CONSUMER, HEARTBEAT, IDLE, RELAY
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from tests.fake_mongod.fixtures import Deployment
from tests.wire import ordering_app
from tests.wire.processes import WorkerProcess, WorkerProcesses, free_port, wait_until

pytestmark = pytest.mark.wire

RUNS = 20
EVENTS_PER_RUN = 3  # the start event, e1, e2
# docs/behaviour.md, "Two commands per event, or fewer": a claim and a commit, for however many events the claim found.
HOT_PATH_BOUND = 2.0
LOOPS = (CONSUMER, IDLE, RELAY, HEARTBEAT)


def scrape(worker: WorkerProcess) -> str:
    assert worker.http_port is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.http_port}/metrics", timeout=5) as reply:
        return reply.read().decode()


def samples(text: str, name: str, label: str) -> dict[str, float]:
    """Each sample of `name` by the value of its `label`."""
    found = re.findall(rf'^{name}{{{label}="([^"]*)"}} (\S+)$', text, re.MULTILINE)
    return {value: float(sample) for value, sample in found}


def test_commands_are_counted_per_loop_and_the_consumer_keeps_the_hot_path_bound(
    replica_set: Deployment, admin: MongoClient[Any], worker_processes: WorkerProcesses
) -> None:
    worker = worker_processes.harel_worker(
        replica_set.url, "--app", "tests.wire.ordering_app:ordered", http_port=free_port()
    )
    worker.wait_registered(admin)
    store, transport = MongoStore(admin, "harel"), MongoTransport(admin, "harel", watch=False)
    app = ordering_app.ordered
    ids = [f"counted-{n:02d}" for n in range(RUNS)]
    for execution_id in ids:
        start_execution(store, transport, app, "ordering.sequence", execution_id=execution_id)
        send_event(store, transport, app, execution_id, "e1")
        send_event(store, transport, app, execution_id, "e2")
    # an execution is created at version 1 and each step adds one
    stepped = {"_id": {"$in": ids}, "version": {"$gte": 1 + EVENTS_PER_RUN}, "inbox": []}
    wait_until(lambda: admin.harel.executions.count_documents(stepped) == RUNS, 60, "every run's three steps")

    def every_loop_counted() -> bool:
        commands = samples(scrape(worker), "harel_db_commands_total", "loop")
        return all(commands.get(loop, 0) > 0 for loop in LOOPS)

    # the background loops pass at least once a second; the consumer polls once it finds nothing
    wait_until(every_loop_counted, 30, "a pass of every loop")
    text = scrape(worker)
    commands = samples(text, "harel_db_commands_total", "loop")
    processed = sum(samples(text, "harel_events_processed_total", "kind").values())
    assert processed == RUNS * EVENTS_PER_RUN, text
    assert commands[CONSUMER] / processed <= HOT_PATH_BOUND, commands
