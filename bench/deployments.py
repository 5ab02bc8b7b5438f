"""Where the wire benchmarks run: the fake replica set, and a real deployment when one is given.

The fake replica set (tests/fake_mongod) is a wire-protocol test double executing commands on mongomock,
one at a time: real PyMongo clients talk to it over sockets, so it counts round trips and bytes exactly,
but its speed says nothing about a database. It runs in its own process so the benchmark's threads do
not share an interpreter lock with it, and so its CPU time can be read: how busy the test double was
during a measurement says whether it was the bottleneck. Benchmark 5 also starts one with network
latency added to every command. Setting HAREL_TEST_MONGO_URL adds that deployment as a second target;
every benchmark uses a fresh database there and drops it afterwards.
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
# Benchmark 5's network: added by the test double to every command, outside its one execution lock, so
# concurrent commands overlap as they would over a network.
LATENCY_MS = 1
LATENCY_LABEL = f"fake replica set with {LATENCY_MS} ms latency per command (a test double, not a database)"
# The same with a slower network: the test double's own CPU time weighs less next to the latency.
SLOW_LATENCY_MS = 5
SLOW_LATENCY_LABEL = (
    f"fake replica set with {SLOW_LATENCY_MS} ms latency per command (a test double, not a database)"
)
REAL_LABEL = f"{REAL_MONGO_URL_VARIABLE} (a real deployment)"


@dataclass(frozen=True)
class Target:
    label: str
    url: str
    real: bool
    # the test double's process, whose CPU time tells how busy it was; None for a real deployment
    process_id: int | None = None


@contextlib.contextmanager
def wire_targets() -> Iterator[list[Target]]:
    """The fake replica set (started here, stopped on exit), then the real deployment if one is set."""
    with fake_target(FAKE_LABEL) as fake:
        targets = [fake]
        real = real_url()
        if real is not None:
            targets.append(Target(REAL_LABEL, real, real=True))
        yield targets


@contextlib.contextmanager
def fake_target(label: str, *arguments: str) -> Iterator[Target]:
    """A fake replica set in its own process (`python -m tests.fake_mongod ARGUMENTS`), stopped on exit."""
    fake = start_fake_mongod_process(*arguments)
    try:
        yield Target(label, fake.url, real=False, process_id=fake.process.pid)
    finally:
        fake.stop()


def cpu_seconds(process_id: int) -> float | None:
    """The CPU time (user + system) the process has used so far; None where /proc cannot tell."""
    try:
        with open(f"/proc/{process_id}/stat", encoding="ascii") as stat:
            # the fields after the parenthesised command name; utime and stime are the 14th and 15th
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
