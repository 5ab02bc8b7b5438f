"""`mongomock://`: the serialized mongomock client behind the embedded default."""

from __future__ import annotations

import threading

import mongomock
import pytest

from harel.errors import StoreConflict
from harel.model import Execution
from harel.store.mongo import MongoStore
from harel_dev.embedded import EmbeddedClient

PIPELINE = [
    {"$match": {"_id": "a"}},
    {"$project": {"data": 1, "hit": {"$in": ["e1", {"$ifNull": ["$processed", []]}]}}},
]


def test_a_leading_match_gives_what_mongomock_gives() -> None:
    embedded, plain = EmbeddedClient(), mongomock.MongoClient()
    for client in (embedded, plain):
        client["db"]["c"].insert_many(
            [{"_id": "a", "data": "x", "processed": ["e1"]}, {"_id": "b", "data": "y"}]
        )
    for pipeline in (PIPELINE, PIPELINE[1:], [{"$match": {"_id": "zz"}}]):
        assert list(embedded["db"]["c"].aggregate(pipeline)) == list(plain["db"]["c"].aggregate(pipeline))


def test_cursors_chain_and_read_under_the_lock() -> None:
    client = EmbeddedClient()
    collection = client["db"]["c"]
    collection.insert_many([{"_id": n, "n": n} for n in range(10)])
    assert [d["n"] for d in collection.find({}).sort("n", -1).skip(2).limit(3)] == [7, 6, 5]


@pytest.mark.usefixtures("eager_thread_switches")
def test_racing_version_cas_has_one_winner_per_version() -> None:
    """Without the lock, mongomock can let two threads match the same version and both write."""
    store = MongoStore(EmbeddedClient())
    store.commit(Execution(id="x", definition_id="d", definition_version=1))
    wins: list[int] = []
    barrier = threading.Barrier(8)

    def racer() -> None:
        barrier.wait()
        for _ in range(50):
            exe = store.load("x")
            assert exe is not None
            exe.context["n"] = exe.context.get("n", 0) + 1
            try:
                store.commit(exe)
                wins.append(exe.version)
            except StoreConflict:
                pass

    threads = [threading.Thread(target=racer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = store.load("x")
    assert final is not None
    assert len(wins) == len(set(wins)), "no version was won twice"
    assert final.context["n"] == len(wins) == final.version - 1, "every win counted exactly once"
