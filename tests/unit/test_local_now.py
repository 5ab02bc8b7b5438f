"""`$$NOW` on the local backends: bound in expression contexts, one instant per command, data left alone."""

from __future__ import annotations

from datetime import datetime

from harel.local.embedded import EmbeddedClient
from harel.local.now import bind_filter, bind_pipeline, bind_update, server_now

EPOCH = datetime(1970, 1, 1)
NOW_SECONDS = {"$divide": [{"$subtract": ["$$NOW", {"$literal": EPOCH}]}, 1000]}
INSTANT = server_now(1_700_000_000.1234)


def test_now_is_a_millisecond_date() -> None:
    assert datetime(2023, 11, 14, 22, 13, 20, 123000) == INSTANT
    assert INSTANT.tzinfo is None


def test_a_filter_binds_only_its_expr_clauses() -> None:
    query = {
        "a": "$$NOW",
        "$expr": {"$lte": ["$t", "$$NOW"]},
        "$or": [{"b": "$$NOW"}, {"$expr": {"$gt": ["$$NOW", "$u"]}}],
    }
    assert bind_filter(query, INSTANT) == {
        "a": "$$NOW",
        "$expr": {"$lte": ["$t", {"$literal": INSTANT}]},
        "$or": [{"b": "$$NOW"}, {"$expr": {"$gt": [{"$literal": INSTANT}, "$u"]}}],
    }


def test_a_literal_is_never_bound() -> None:
    stage = [{"$set": {"kept": {"$literal": "$$NOW"}, "bound": "$$NOW"}}]
    assert bind_update(stage, INSTANT) == [
        {"$set": {"kept": {"$literal": "$$NOW"}, "bound": {"$literal": INSTANT}}}
    ]


def test_a_classic_update_is_data() -> None:
    update = {"$set": {"x": "$$NOW"}}
    assert bind_update(update, INSTANT) is update


def test_an_aggregation_binds_match_as_a_filter_and_other_stages_as_expressions() -> None:
    pipeline = [{"$match": {"a": "$$NOW", "$expr": {"$eq": ["$b", "$$NOW"]}}}, {"$project": {"n": "$$NOW"}}]
    assert bind_pipeline(pipeline, INSTANT) == [
        {"$match": {"a": "$$NOW", "$expr": {"$eq": ["$b", {"$literal": INSTANT}]}}},
        {"$project": {"n": {"$literal": INSTANT}}},
    ]


def test_the_embedded_client_serves_its_own_clock() -> None:
    seconds = [1000.0]
    collection = EmbeddedClient(clock=lambda: seconds[0])["db"]["c"]
    collection.insert_one({"_id": 1, "due": 999.5, "raw": "$$NOW"})
    due_now = {"_id": 1, "$expr": {"$lte": ["$due", NOW_SECONDS]}}
    stamped = collection.find_one_and_update(due_now, [{"$set": {"seen": NOW_SECONDS}}], return_document=True)
    assert stamped is not None and stamped["seen"] == 1000.0 and stamped["raw"] == "$$NOW"
    seconds[0] = 999.0  # the server's clock now says the document is not due yet
    assert collection.find_one(due_now) is None
    assert collection.count_documents(due_now) == 0
    assert [d["n"] for d in collection.aggregate([{"$project": {"n": NOW_SECONDS}}])] == [999.0]
