"""Where the wire benchmarks run: the fake replica set, and a real deployment when one is given.

The fake replica set (tests/fake_mongod) is a wire-protocol test double executing commands on mongomock,
one at a time: real PyMongo clients talk to it over sockets, so it counts round trips and bytes exactly,
but its speed says nothing about a database. It runs in its own process so the benchmark's threads do
not share an interpreter lock with it. Setting HAREL_TEST_MONGO_URL adds that deployment as a second
target; every benchmark uses a fresh database there and drops it afterwards.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pymongo import MongoClient

from harel.connection import connect
from tests.fake_mongod.fixtures import REAL_MONGO_URL_VARIABLE, start_fake_mongod_process

FAKE_LABEL = "fake replica set (a test double, not a database)"
REAL_LABEL = f"{REAL_MONGO_URL_VARIABLE} (a real deployment)"


@dataclass(frozen=True)
class Target:
    label: str
    url: str
    real: bool


@contextlib.contextmanager
def wire_targets() -> Iterator[list[Target]]:
    """The fake replica set (started here, stopped on exit), then the real deployment if one is set."""
    fake = start_fake_mongod_process()
    try:
        targets = [Target(FAKE_LABEL, fake.url, real=False)]
        real = real_url()
        if real is not None:
            targets.append(Target(REAL_LABEL, real, real=True))
        yield targets
    finally:
        fake.stop()


def real_url() -> str | None:
    """The real deployment to measure as well, from HAREL_TEST_MONGO_URL; None when unset or empty."""
    return os.environ.get(REAL_MONGO_URL_VARIABLE) or None


def fresh_db_name() -> str:
    return f"harel_bench_{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def client_for(url: str, **options: Any) -> Iterator[MongoClient[dict[str, Any]]]:
    """A client with the production connection defaults (harel.connection.connect), closed on exit."""
    client = connect(url, deadline=30.0, **options)
    try:
        yield client
    finally:
        client.close()


@contextlib.contextmanager
def scratch_database(client: MongoClient[dict[str, Any]]) -> Iterator[str]:
    """A fresh database name on `client`, dropped on exit so repeated runs leave nothing behind."""
    name = fresh_db_name()
    try:
        yield name
    finally:
        client.drop_database(name)
