"""The local backends' narrowed lookups give the answers of mongomock's full match, document for document."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import mongomock
import pytest
from bson import Int64, ObjectId
from mongomock import filtering

from harel_dev import lookup, mongomock_patches

# Fixed, so the parametrized ids are the same in every process that collects them (pytest-xdist workers).
OBJECT_ID = ObjectId("6b0f5cb64dc598948ebd9732")
VALUES: list[Any] = [
    None,
    0,
    1,
    -1,
    2.5,
    Int64(7),
    float("nan"),
    True,
    False,
    "3",
    [1, 5],
    [None],
    {"a": 1},
    datetime.datetime(2026, 1, 1),
]
FILTERS: list[dict[str, Any]] = [
    {"at": {"$gte": 0}},
    {"at": {"$gte": 0, "$lte": 2}},
    {"at": {"$gt": 1, "$lt": 10}},
    {"at": {"$lt": 0}},
    {"at": {"$lte": 2.5}, "kind": "b"},
    {"at": {"$gte": 0, "$lte": 3}, "$expr": {"$lte": ["$at", 2]}},
    {"at": {"$gte": 0}, "other": {"$lte": 1}},
    {"at": {"$gte": "0"}},
    {"at": {"$in": [1, None]}},
    {"at": None},
    {"_id": "doc-3"},
    {"_id": "doc-3", "kind": "b"},
    {"_id": "missing"},
    {"_id": OBJECT_ID},
    {"_id": 3},
    {"_id": {"$in": ["doc-1", "doc-2"]}},
]


@pytest.fixture(scope="module")
def documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [{"_id": OBJECT_ID, "kind": "a"}, {"_id": 3, "at": 1}]
    for n, (at, other) in enumerate(itertools.product([*VALUES, "missing"], [None, 1, 3])):
        doc: dict[str, Any] = {"_id": f"doc-{n}", "kind": "ab"[n % 2], "other": other}
        if at != "missing":
            doc["at"] = at
        docs.append(doc)
    return docs


@pytest.mark.parametrize("query", FILTERS, ids=[repr(f) for f in FILTERS])
def test_a_narrowed_find_returns_what_the_full_match_returns(
    documents: list[dict[str, Any]], query: dict[str, Any]
) -> None:
    mongomock_patches.install()
    collection = mongomock.MongoClient()["db"]["c"]
    collection.insert_many([dict(d) for d in documents])
    expected = [d["_id"] for d in documents if filtering.filter_applies(query, d)]
    assert [d["_id"] for d in collection.find(query)] == expected


def test_a_null_missing_or_out_of_range_number_is_passed_over_and_anything_else_is_matched_fully() -> None:
    ranges = lookup.numeric_ranges({"at": {"$gte": 0, "$lte": 2}, "kind": "a", "x.y": {"$gt": 1}})
    assert list(ranges) == ["at"], "only top-level fields compared with numbers"
    assert not lookup.may_match({}, ranges)
    assert not lookup.may_match({"at": None}, ranges)
    assert not lookup.may_match({"at": 3}, ranges)
    assert lookup.may_match({"at": 2}, ranges)
    for deferred in ([5], True, "1", float("nan")):
        assert lookup.may_match({"at": deferred}, ranges), deferred


def test_an_update_by_id_changes_that_document_only() -> None:
    mongomock_patches.install()
    collection = mongomock.MongoClient()["db"]["c"]
    collection.insert_many([{"_id": "a", "n": 0}, {"_id": "b", "n": 0}])
    assert collection.update_one({"_id": "b", "n": 0}, {"$inc": {"n": 1}}).matched_count == 1
    assert collection.update_one({"_id": "b", "n": 0}, {"$inc": {"n": 1}}).matched_count == 0
    assert {d["_id"]: d["n"] for d in collection.find()} == {"a": 0, "b": 1}
