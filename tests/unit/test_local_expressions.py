"""mongomock's expression results corrected to MongoDB's (harel_dev.expressions), on the embedded client
and therefore on the local server, which evaluates with the same corrected mongomock."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from pymongo.errors import OperationFailure

from harel_dev.embedded import EmbeddedClient

DAY = datetime(2020, 1, 1)
DOCUMENT = {
    "_id": 1,
    "a": 1,
    "b": 2,
    "day": DAY,
    "lease": {"owner": "w1", "until": 5},
    "keep": {"k": 1, "j": 2},
}


@pytest.fixture
def items() -> Any:
    collection = EmbeddedClient()["db"]["items"]
    collection.insert_one(dict(DOCUMENT))
    return collection


def evaluate(items: Any, expression: Any) -> Any:
    """What MongoDB's `$project` gives for `expression` on DOCUMENT (the field is absent when missing)."""
    [result] = items.aggregate([{"$project": {"_id": 0, "value": expression}}])
    return result.get("value", "<missing>")


def updated(items: Any, *pipeline: dict[str, Any]) -> dict[str, Any]:
    items.update_one({"_id": 1}, list(pipeline))
    document = items.find_one({"_id": 1})
    assert document is not None
    return document


@pytest.mark.parametrize("removed", ["$$REMOVE", "$absent", {"$cond": [True, "$$REMOVE", 0]}])
def test_setting_a_missing_value_removes_the_field(items: Any, removed: Any) -> None:
    document = updated(items, {"$set": {"a": removed, "lease.owner": removed}})
    assert "a" not in document
    assert document["lease"] == {"until": 5}
    assert document["b"] == 2


def test_set_evaluates_every_field_against_the_input_document(items: Any) -> None:
    document = updated(items, {"$set": {"a": "$b", "b": "$a"}})
    assert (document["a"], document["b"]) == (2, 1)


def test_unset_stage(items: Any) -> None:
    assert "a" not in updated(items, {"$unset": "a"})
    document = updated(items, {"$unset": ["b", "keep.k"]})
    assert "b" not in document
    assert document["keep"] == {"j": 2}
    with pytest.raises(OperationFailure):
        updated(items, {"$unset": []})


@pytest.mark.parametrize(
    ("expression", "mongodb"),
    [
        # A missing operand sorts below null and equals only another missing value.
        ({"$lte": ["$absent", 5]}, True),
        ({"$lt": ["$absent", None]}, True),
        ({"$gt": ["$absent", 5]}, False),
        ({"$eq": ["$absent", None]}, False),
        ({"$eq": ["$absent", "$also_absent"]}, True),
        ({"$ne": ["$absent", None]}, True),
        ({"$cmp": ["$absent", 1]}, -1),
        ({"$lte": ["$lease.until", 5]}, True),
        ({"$gte": ["$a", 1]}, True),
        # A boolean is never a number.
        ({"$eq": [1, True]}, False),
        ({"$eq": [0, False]}, False),
        ({"$lt": [100, False]}, True),
        ({"$eq": [1, 1.0]}, True),
        ({"$in": ["$absent", [None, 1]]}, False),
        ({"$in": ["$a", [0, 1]]}, True),
        # $not in its array form.
        ({"$not": [{"$eq": ["$a", 2]}]}, True),
        ({"$not": [{"$eq": ["$a", 1]}]}, False),
        ({"$not": {"$eq": ["$a", 2]}}, True),
        (
            {
                "$cond": [
                    {"$and": [{"$or": [{"$eq": ["$a", 1]}, False]}, {"$not": [{"$eq": ["$b", 3]}]}]},
                    "y",
                    "n",
                ]
            },
            "y",
        ),
        ({"$cond": {"if": {"$lte": ["$lease.gone", 0]}, "then": "free", "else": "taken"}}, "free"),
        # Array literals hold expressions; a missing element is null.
        ([{"id": "$a", "at": "$b"}, "$absent", {"$add": [1, 1]}], [{"id": 1, "at": 2}, None, 2]),
        ({"$concatArrays": [[], [{"id": "e1", "n": "$b"}]]}, [{"id": "e1", "n": 2}]),
        ({"$size": [["$a", "$b"]]}, 2),
        ({"$in": [2, ["$a", "$b"]]}, True),
        # Dates.
        ({"$add": ["$day", 1500]}, datetime(2020, 1, 1, 0, 0, 1, 500000)),
        ({"$add": [1000, "$day", 500]}, datetime(2020, 1, 1, 0, 0, 1, 500000)),
        ({"$add": ["$day", None]}, None),
        ({"$add": [1, 2]}, 3),
        ({"$toLong": "$day"}, 1_577_836_800_000),
        ({"$toLong": "12"}, 12),
    ],
)
def test_expressions_answer_as_mongodb_does(items: Any, expression: Any, mongodb: Any) -> None:
    assert evaluate(items, expression) == mongodb
    assert updated(items, {"$set": {"value": expression}})["value"] == mongodb


def test_expr_filters_with_a_missing_field_match_as_on_mongodb(items: Any) -> None:
    assert [d["_id"] for d in items.find({"$expr": {"$lte": ["$absent", 5]}})] == [1]
    assert list(items.find({"$expr": {"$gt": ["$absent", 5]}})) == []


@pytest.mark.parametrize(
    "expression",
    [
        {"$in": [1, "$absent"]},
        {"$add": ["$day", "$day"]},
        {"$not": [True, False]},
    ],
)
def test_invalid_expressions_are_refused(items: Any, expression: Any) -> None:
    with pytest.raises(OperationFailure):
        evaluate(items, expression)


@pytest.mark.parametrize(
    "unimplemented", [{"$mergeObjects": [{"a": 1}]}, {"$reduce": {"input": [], "initialValue": 0, "in": 0}}]
)
def test_what_mongomock_does_not_implement_still_fails_loudly(items: Any, unimplemented: Any) -> None:
    with pytest.raises(NotImplementedError):
        evaluate(items, unimplemented)
