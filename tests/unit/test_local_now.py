"""`$$NOW` on the local backends: bound in expression contexts, one instant per command, data left alone."""

from __future__ import annotations

from datetime import datetime

from harel_dev.embedded import EmbeddedClient
from harel_dev.engine import Engine
from harel_dev.now import bind_command, bind_filter, bind_pipeline, bind_update, server_now

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


def test_bind_command_binds_every_expression_context_of_each_command() -> None:
    expr = {"$expr": {"$lte": ["$due", "$$NOW"]}}
    bound_expr = {"$expr": {"$lte": ["$due", {"$literal": INSTANT}]}}
    stamp = [{"$set": {"at": "$$NOW"}}]
    bound_stamp = [{"$set": {"at": {"$literal": INSTANT}}}]
    commands = {
        "find": ({"find": "c", "filter": expr}, {"find": "c", "filter": bound_expr}),
        "count": ({"count": "c", "query": expr}, {"count": "c", "query": bound_expr}),
        "distinct": (
            {"distinct": "c", "key": "k", "query": expr},
            {"distinct": "c", "key": "k", "query": bound_expr},
        ),
        "findAndModify": (
            {"findAndModify": "c", "query": expr, "update": stamp},
            {"findAndModify": "c", "query": bound_expr, "update": bound_stamp},
        ),
        "findandmodify": (
            {"findandmodify": "c", "query": expr, "update": {"$set": {"raw": "$$NOW"}}},
            {"findandmodify": "c", "query": bound_expr, "update": {"$set": {"raw": "$$NOW"}}},
        ),
        "update": (
            {
                "update": "c",
                "updates": [{"q": expr, "u": stamp}, {"q": {"a": "$$NOW"}, "u": {"$set": {"b": "$$NOW"}}}],
            },
            {
                "update": "c",
                "updates": [
                    {"q": bound_expr, "u": bound_stamp},
                    {"q": {"a": "$$NOW"}, "u": {"$set": {"b": "$$NOW"}}},
                ],
            },
        ),
        "delete": (
            {"delete": "c", "deletes": [{"q": expr, "limit": 1}]},
            {"delete": "c", "deletes": [{"q": bound_expr, "limit": 1}]},
        ),
        "aggregate": (
            {"aggregate": "c", "pipeline": [{"$match": expr}, {"$project": {"n": "$$NOW"}}]},
            {
                "aggregate": "c",
                "pipeline": [{"$match": bound_expr}, {"$project": {"n": {"$literal": INSTANT}}}],
            },
        ),
        "insert": (
            {"insert": "c", "documents": [{"raw": "$$NOW"}]},
            {"insert": "c", "documents": [{"raw": "$$NOW"}]},
        ),
    }
    for name, (command, expected) in commands.items():
        assert bind_command(command, INSTANT) == expected, name


def test_the_engine_reads_its_clock_once_per_command() -> None:
    """Every statement of one command sees the same `$$NOW`; the next command sees the clock move."""
    readings = iter([1000.0, 2000.0, 3000.0, 4000.0])
    calls: list[float] = []

    def clock() -> float:
        calls.append(next(readings))
        return calls[-1]

    engine = Engine(clock)
    engine.execute("insert", "db", {"insert": "c", "documents": [{"_id": n} for n in range(3)]})
    stamp = [{"$set": {"at": NOW_SECONDS}}]
    engine.execute(
        "update", "db", {"update": "c", "updates": [{"q": {"_id": n}, "u": stamp} for n in range(3)]}
    )
    reply = engine.execute("find", "db", {"find": "c", "filter": {"$expr": {"$lt": ["$at", NOW_SECONDS]}}})
    projected = engine.execute(
        "aggregate", "db", {"aggregate": "c", "pipeline": [{"$project": {"n": NOW_SECONDS}}], "cursor": {}}
    )

    assert len(calls) == 4  # insert, update, find, aggregate: one reading each
    assert [d["at"] for d in reply["cursor"]["firstBatch"]] == [2000.0, 2000.0, 2000.0]
    assert {d["n"] for d in projected["cursor"]["firstBatch"]} == {4000.0}
