"""The fake cluster's chunk map and targeting (tests/fake_mongod/chunks.py, targeting.py) on their own:
which shards a filter reaches, and how chunks split and move. Marked `fake_server`: they prove the test
double, not harel."""

from __future__ import annotations

import math

import pytest
from bson import MaxKey, MinKey

from tests.fake_mongod.chunks import (
    COMPOUND_KEY,
    HASHED_KEY,
    ShardedCollection,
    initial_chunks,
    pinned_hash,
)
from tests.fake_mongod.targeting import has_exact_shard_key, pinned_values, target

pytestmark = pytest.mark.fake_server
SHARDS = ["shard0", "shard1", "shard2"]


def three_zones() -> ShardedCollection:
    """p < 4 on shard0, 4 <= p < 8 on shard1, p >= 8 on shard2."""
    collection = ShardedCollection(
        "harel.executions", COMPOUND_KEY, initial_chunks(COMPOUND_KEY, SHARDS, "shard0")
    )
    collection.assign(4, 8, "shard1")
    collection.assign(8, math.inf, "shard2")
    return collection


@pytest.mark.parametrize(
    ("query", "shards"),
    [
        ({"p": 5, "_id": "x"}, ["shard1"]),
        ({"p": {"$eq": 9}}, ["shard2"]),
        ({"p": {"$in": [4, 5, 7]}}, ["shard1"]),
        ({"p": {"$in": [1, 9]}}, ["shard0", "shard2"]),
        ({"$and": [{"p": {"$in": [1, 5, 9]}}, {"p": {"$in": [5, 9]}}]}, ["shard1", "shard2"]),
        ({"$and": [{"due": {"$lte": 3}}, {"p": 2}]}, ["shard0"]),
        ({"p": {"$gte": 4, "$lt": 8}}, SHARDS),  # ranges are not used to target
        ({"_id": "x"}, SHARDS),
        ({}, SHARDS),
        ({"$or": [{"p": 1}, {"p": 2}]}, SHARDS),
    ],
)
def test_filters_reach_the_shards_owning_their_p(query: dict[str, object], shards: list[str]) -> None:
    assert target(query, three_zones()) == shards


def test_an_exact_shard_key_needs_both_p_and_id() -> None:
    collection = three_zones()

    assert has_exact_shard_key({"p": 1, "_id": "a"}, collection)
    assert has_exact_shard_key({"p": {"$eq": 1}, "_id": {"$eq": "a"}}, collection)
    assert not has_exact_shard_key({"_id": "a"}, collection)
    assert not has_exact_shard_key({"p": {"$in": [1, 2]}, "_id": "a"}, collection)
    assert pinned_values({"p": {"$gt": 1}}, "p") is None


def test_the_hashed_key_targets_by_the_pinned_hash_of_id() -> None:
    collection = ShardedCollection("harel.h", HASHED_KEY, initial_chunks(HASHED_KEY, SHARDS, "shard0"))
    owners = {collection.owner(float(pinned_hash(i))) for i in range(50)}

    assert pinned_hash("a") == pinned_hash("a") != pinned_hash("b")
    assert owners == set(SHARDS)
    assert target({"_id": 7}, collection) == [collection.owner(float(pinned_hash(7)))]
    assert has_exact_shard_key({"_id": 7}, collection)


def test_chunks_split_at_zone_bounds_and_report_minkey_bounds() -> None:
    collection = three_zones()

    assert [(c.low, c.high, c.shard) for c in collection.chunks] == [
        (-math.inf, 4, "shard0"),
        (4, 8, "shard1"),
        (8, math.inf, "shard2"),
    ]
    assert collection.bound(-math.inf) == {"p": MinKey(), "_id": MinKey()}
    assert collection.bound(math.inf) == {"p": MaxKey(), "_id": MinKey()}
    assert collection.parse_bound({"p": 4, "_id": MinKey()}, "min") == 4
    with pytest.raises(ValueError, match="_id must be MinKey"):
        collection.parse_bound({"p": 4, "_id": "x"}, "min")
