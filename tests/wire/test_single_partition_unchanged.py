"""One replica set pays nothing for partitions: with P = 1 (no `harel_meta`, as every replica-set
deployment) a worker and the smoke check send exactly the command shapes, and leave exactly the indexes,
they sent and left before partitions existed (`tests/golden/replica_set_commands.json`, recorded then).
A shape is the command, its collection, the fields of its filter, its sort and its write options
(`tests/command_shapes.py`): what decides the index that serves it and the shards a router would send it
to. The command counts per event are the benchmark's (`make bench`, benchmark 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from bench import smoke_workload
from harel.heartbeat import MongoHeartbeats
from harel.smoke import run_smoke
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from harel.worker import Worker, WorkerConfig
from tests.command_shapes import ShapeRecorder
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, Deployment

pytestmark = pytest.mark.wire

GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "replica_set_commands.json").read_text())


def _smoke_run_shapes(url: str, db_name: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    recorder = ShapeRecorder()
    with MongoClient(url, event_listeners=[recorder], **CLIENT_OPTIONS) as client:
        store, transport = MongoStore(client, db_name), MongoTransport(client, db_name)
        store.ensure_indexes()
        transport.ensure_indexes()
        app, chart_id = smoke_workload.bench_app()
        worker = Worker(
            store,
            transport,
            app,
            config=WorkerConfig(concurrency=2),
            heartbeats=MongoHeartbeats(client, db_name),
        )
        worker.start()
        try:
            report = run_smoke(store, transport, app, chart_id=chart_id, timeout=60)
        finally:
            worker.stop(drain_seconds=5.0)
        assert report.passed, report.failures
        stored = client[db_name]["executions"].index_information()
        indexes = {name: [list(key) for key in spec["key"]] for name, spec in stored.items()}
        transport.close()  # its change-stream watcher stops before the client closes under it
    return [s for s in recorder.shapes() if s["collection"] == "executions"], indexes


def test_a_replica_set_sends_the_command_shapes_and_keeps_the_indexes_it_had_before_partitions(
    mongo_rs: Deployment,
) -> None:
    shapes, indexes = _smoke_run_shapes(mongo_rs.url, mongo_rs.db_name)
    assert shapes == GOLDEN["shapes"]
    assert indexes == GOLDEN["indexes"]
    assert not any("p" in shape.get("filter", []) for shape in shapes)
