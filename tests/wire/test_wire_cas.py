"""Concurrent compare-and-set over the wire: for every version exactly one writer wins.

Each writer reads the version and then tries `update_one({_id, version: v}, {version: v + 1, push (v, me)})`.
If the server ever let two updates match the same version, the pushed history would hold that version twice.
mongomock called in one process cannot show this; a server with concurrent connections can.

Marked `fake_server`: these tests prove the test replica set (and, where HAREL_TEST_MONGO_URL is set, that a
real deployment agrees with it), not harel; harel's own behaviour over the same sockets is in the unmarked
wire tests and the conformance suite.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient

from tests.fake_mongod.fixtures import CLIENT_OPTIONS, Deployment

pytestmark = [pytest.mark.wire, pytest.mark.fake_server]

WRITERS = 6
ATTEMPTS = 40


@pytest.fixture(autouse=True)
def frequent_thread_switches() -> Iterator[None]:
    """Switch threads as often as possible, so that a server whose match and write could interleave
    (mongomock without the server's execution lock) shows it here rather than once in a thousand runs."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def cas_filter(version: int) -> dict[str, Any]:
    return {"_id": "exe", "version": version}


def cas_update(version: int, writer: int) -> dict[str, Any]:
    return {"$set": {"version": version + 1}, "$push": {"history": {"version": version, "writer": writer}}}


def assert_one_winner_per_version(document: dict[str, Any], wins: Counter[int]) -> None:
    versions = [entry["version"] for entry in document["history"]]
    assert sorted(versions) == list(range(document["version"]))
    assert sum(wins.values()) == document["version"]
    assert sum(wins.values()) < WRITERS * ATTEMPTS, "no attempt ever lost: the writers never raced"


def test_threads_with_separate_clients(mongo_rs: Deployment) -> None:
    with MongoClient(mongo_rs.url, **CLIENT_OPTIONS) as admin:
        admin[mongo_rs.db_name].executions.insert_one({"_id": "exe", "version": 0, "history": []})
        wins: Counter[int] = Counter()
        wins_lock = threading.Lock()
        start = threading.Barrier(WRITERS)

        def writer(number: int) -> None:
            with MongoClient(mongo_rs.url, **CLIENT_OPTIONS) as client:
                coll = client[mongo_rs.db_name].executions
                start.wait()
                for _ in range(ATTEMPTS):
                    version = coll.find_one({"_id": "exe"}, {"version": 1})["version"]
                    won = coll.update_one(cas_filter(version), cas_update(version, number)).modified_count
                    with wins_lock:
                        wins[number] += won

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert_one_winner_per_version(admin[mongo_rs.db_name].executions.find_one({"_id": "exe"}), wins)


def test_async_tasks_sharing_one_client(mongo_rs: Deployment) -> None:
    wins: Counter[int] = Counter()

    async def scenario() -> dict[str, Any]:
        async with AsyncMongoClient(mongo_rs.url, **CLIENT_OPTIONS) as client:
            coll = client[mongo_rs.db_name].executions
            await coll.insert_one({"_id": "exe", "version": 0, "history": []})

            async def writer(number: int) -> None:
                for _ in range(ATTEMPTS):
                    version = (await coll.find_one({"_id": "exe"}, {"version": 1}))["version"]
                    result = await coll.update_one(cas_filter(version), cas_update(version, number))
                    wins[number] += result.modified_count

            await asyncio.gather(*(writer(n) for n in range(WRITERS)))
            return await coll.find_one({"_id": "exe"})

    assert_one_winner_per_version(asyncio.run(scenario()), wins)
