"""Fixtures of the wire tier's end-to-end, fault and check tests.

`replica_set` runs each test twice over: on the fake replica set (always), and on the deployment in
HAREL_TEST_MONGO_URL — a variant reported as skipped, with the reason, when that variable is unset. It is
`mongo_rs` under the name these tests use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from tests.fake_mongod.fixtures import CLIENT_OPTIONS, Deployment
from tests.wire.in_process import Seams
from tests.wire.processes import WorkerProcesses


@pytest.fixture
def replica_set(mongo_rs: Deployment) -> Deployment:
    """The replica set under test: `mongo_rs` (tests/fake_mongod/fixtures.py), the fake one and the real one."""
    return mongo_rs


@pytest.fixture
def admin(replica_set: Deployment) -> Iterator[MongoClient[Any]]:
    """A client no fail point catches: it arms them and reads what the workers left behind."""
    with MongoClient(replica_set.url, appName="wire-admin", **CLIENT_OPTIONS) as client:
        yield client


@pytest.fixture
def seams(replica_set: Deployment) -> Iterator[Seams]:
    opened = Seams(replica_set.url, replica_set.db_name)
    yield opened
    opened.close()


@pytest.fixture
def worker_processes(tmp_path: Path) -> Iterator[WorkerProcesses]:
    processes = WorkerProcesses(tmp_path)
    yield processes
    processes.kill_all()
