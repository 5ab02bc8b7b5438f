"""Fixtures of the wire tier's end-to-end, fault and check tests.

`replica_set` runs each test twice over: on the fake replica set (always), and on the deployment in
HAREL_TEST_MONGO_URL — a variant reported as skipped, with the reason, when that variable is unset.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from tests.conftest import REAL_MONGO_URL, requires_real_mongo
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, Deployment
from tests.wire.in_process import Seams
from tests.wire.processes import WorkerProcesses


@pytest.fixture(
    params=[
        pytest.param("fake", id="fake-rs"),
        pytest.param("real", id="real-rs", marks=(pytest.mark.real, requires_real_mongo)),
    ]
)
def replica_set(request: pytest.FixtureRequest) -> Iterator[Deployment]:
    """The replica set under test, with a fresh database name (dropped afterwards on a real one)."""
    db_name = f"harel_wire_{uuid.uuid4().hex[:12]}"
    if request.param == "fake":
        fake = request.getfixturevalue("fake_rs")
        yield Deployment(fake.url, db_name, fake=fake.server)
        return
    assert REAL_MONGO_URL is not None
    deployment = Deployment(REAL_MONGO_URL, db_name, fake=None)
    yield deployment
    deployment.reset()


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
