"""Real drivers over sockets: CRUD, cursors, aggregation, indexes and collections on the replica set under
test (the fake primary, or HAREL_TEST_MONGO_URL).

Marked `fake_server`: these tests prove the test replica set (and, where HAREL_TEST_MONGO_URL is set, that a
real deployment agrees with it), not harel; harel's own behaviour over the same sockets is in the unmarked
wire tests and the conformance suite.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from motor.motor_asyncio import AsyncIOMotorClient
from pymongo import AsyncMongoClient, MongoClient, ReturnDocument
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from tests.accounting import CommandAccounting
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, Deployment

pytestmark = [pytest.mark.wire, pytest.mark.fake_server]

# The store's dedupe probe: one round trip answers "which data, and was this event already processed?".
SEEN_PIPELINE: list[dict[str, Any]] = [
    {"$match": {"_id": "exe-1"}},
    {"$project": {"data": 1, "hit": {"$in": ["evt-2", {"$ifNull": ["$processed", []]}]}}},
]


@pytest.fixture
def accounting() -> CommandAccounting:
    return CommandAccounting()


@pytest.fixture
def client(mongo_rs: Deployment, accounting: CommandAccounting) -> Any:
    with MongoClient(mongo_rs.url, event_listeners=[accounting], **CLIENT_OPTIONS) as client:
        yield client


def test_update_operators_and_upserts(client: MongoClient[Any], mongo_rs: Deployment) -> None:
    coll = client[mongo_rs.db_name].docs
    coll.insert_many(
        [{"_id": 1, "n": 0, "tags": ["a"], "log": [1, 2, 3]}, {"_id": 2, "n": 5}, {"_id": 3, "n": 9}]
    )

    coll.update_one(
        {"_id": 1}, {"$inc": {"n": 2}, "$set": {"s": "x"}, "$push": {"log": {"$each": [4, 5], "$slice": -3}}}
    )
    coll.update_one({"_id": 1}, {"$addToSet": {"tags": {"$each": ["a", "b"]}}, "$unset": {"s": ""}})
    coll.update_one({"_id": 1}, {"$pull": {"log": {"$gte": 5}}})
    assert coll.find_one({"_id": 1}) == {"_id": 1, "n": 2, "tags": ["a", "b"], "log": [3, 4]}

    first = coll.update_one({"_id": 7}, {"$set": {"n": 1}, "$setOnInsert": {"created": True}}, upsert=True)
    again = coll.update_one({"_id": 7}, {"$set": {"n": 2}, "$setOnInsert": {"created": False}}, upsert=True)
    assert (first.upserted_id, first.matched_count) == (7, 0)
    assert (again.upserted_id, again.matched_count, again.modified_count) == (None, 1, 1)
    assert coll.find_one({"_id": 7}) == {"_id": 7, "n": 2, "created": True}

    unchanged = coll.update_one({"_id": 2}, {"$set": {"n": 5}})
    assert (unchanged.matched_count, unchanged.modified_count) == (1, 0)
    assert coll.update_many({"n": {"$gte": 5}}, {"$inc": {"n": 1}}).modified_count == 2
    assert coll.replace_one({"_id": 3}, {"whole": "new"}).modified_count == 1
    assert coll.find_one({"_id": 3}) == {"_id": 3, "whole": "new"}

    assert coll.delete_one({"n": {"$gte": 0}}).deleted_count == 1
    assert coll.delete_many({}).deleted_count == 3
    assert coll.count_documents({}) == 0


def test_find_and_modify_options(client: MongoClient[Any], mongo_rs: Deployment) -> None:
    coll = client[mongo_rs.db_name].queue
    coll.insert_many([{"_id": i, "visible_at": 10 - i, "owner": None} for i in range(3)])

    claimed = coll.find_one_and_update(
        {"owner": None},
        {"$set": {"owner": "w1"}, "$inc": {"attempts": 1}},
        sort=[("visible_at", 1)],
        projection={"owner": 1, "attempts": 1},
        return_document=ReturnDocument.AFTER,
    )
    assert claimed == {"_id": 2, "owner": "w1", "attempts": 1}
    before = coll.find_one_and_update({"_id": 0}, {"$set": {"owner": "w2"}})
    assert before == {"_id": 0, "visible_at": 10, "owner": None}

    assert coll.find_one_and_update({"_id": 9}, {"$set": {"x": 1}}, upsert=True) is None
    created = coll.find_one_and_update(
        {"_id": 10}, {"$setOnInsert": {"x": 2}}, upsert=True, return_document=ReturnDocument.AFTER
    )
    assert created == {"_id": 10, "x": 2}
    assert coll.find_one_and_update({"_id": 99}, {"$set": {"x": 1}}) is None

    assert coll.find_one_and_delete({"owner": "w1"}) == {
        "_id": 2,
        "visible_at": 8,
        "owner": "w1",
        "attempts": 1,
    }
    assert coll.find_one({"_id": 2}) is None


def test_find_options_and_get_more(
    client: MongoClient[Any], mongo_rs: Deployment, accounting: CommandAccounting
) -> None:
    coll = client[mongo_rs.db_name].items
    coll.insert_many([{"_id": i, "i": i, "odd": i % 2 == 1} for i in range(30)])
    accounting.clear()

    found = list(
        coll.find({"i": {"$gte": 5}}, {"_id": 0, "i": 1}).sort("i", -1).skip(2).limit(15).batch_size(4)
    )

    assert found == [{"i": i} for i in range(27, 12, -1)]
    # 15 documents in batches of 4: the first batch, then three getMores (4, 4, 3); the limit ends the cursor.
    assert accounting.tally(command="find").commands == 1
    assert accounting.tally(command="getMore", collection="items").commands == 3
    assert accounting.tally(command="killCursors").commands == 0


def test_closing_a_cursor_early_kills_it(
    client: MongoClient[Any], mongo_rs: Deployment, accounting: CommandAccounting
) -> None:
    db = client[mongo_rs.db_name]
    db.items.insert_many([{"i": i} for i in range(10)])
    cursor = db.items.find({}, batch_size=2)
    assert [next(cursor)["i"] for _ in range(3)] == [0, 1, 2]
    cursor_id = cursor.cursor_id
    cursor.close()

    assert accounting.tally(command="killCursors").commands == 1
    with pytest.raises(OperationFailure) as caught:
        db.command("getMore", cursor_id, collection="items")
    assert caught.value.code == 43  # CursorNotFound


def test_aggregate_and_counts(client: MongoClient[Any], mongo_rs: Deployment) -> None:
    coll = client[mongo_rs.db_name].executions
    coll.insert_many(
        [
            {"_id": "exe-1", "data": {"v": 1}, "processed": ["evt-1", "evt-2"]},
            {"_id": "exe-2", "data": {"v": 2}},
        ]
    )

    assert list(coll.aggregate(SEEN_PIPELINE)) == [{"_id": "exe-1", "data": {"v": 1}, "hit": True}]
    assert list(coll.aggregate([{"$match": {"_id": "exe-2"}}, *SEEN_PIPELINE[1:]])) == [
        {"_id": "exe-2", "data": {"v": 2}, "hit": False}
    ]
    assert coll.count_documents({"processed": "evt-1"}) == 1
    assert coll.count_documents({}, skip=1) == 1
    assert coll.estimated_document_count() == 2
    assert sorted(coll.distinct("data.v")) == [1, 2]


def test_unique_index_and_duplicate_key(client: MongoClient[Any], mongo_rs: Deployment) -> None:
    coll = client[mongo_rs.db_name].children
    assert coll.create_index([("key", 1)], unique=True, name="key_unique") == "key_unique"
    assert coll.create_index([("key", 1)], unique=True, name="key_unique") == "key_unique"  # idempotent
    indexes = {index["name"]: index for index in coll.list_indexes()}
    assert set(indexes) == {"_id_", "key_unique"}
    assert indexes["key_unique"]["unique"] is True
    coll.insert_one({"_id": "c1", "key": "k1"})

    with pytest.raises(DuplicateKeyError) as single:
        coll.insert_one({"_id": "c2", "key": "k1"})
    assert single.value.code == 11000
    assert single.value.details is not None
    assert single.value.details["keyPattern"] == {"key": 1}
    assert single.value.details["keyValue"] == {"key": "k1"}

    with pytest.raises(BulkWriteError) as ordered:
        coll.insert_many([{"key": "k2"}, {"key": "k1"}, {"key": "k3"}])
    assert ordered.value.details["nInserted"] == 1
    assert [(e["index"], e["code"]) for e in ordered.value.details["writeErrors"]] == [(1, 11000)]

    with pytest.raises(BulkWriteError) as unordered:
        coll.insert_many([{"key": "k1"}, {"key": "k4"}], ordered=False)
    assert unordered.value.details["nInserted"] == 1

    with pytest.raises(DuplicateKeyError):
        coll.update_one({"key": "k2"}, {"$set": {"key": "k1"}})
    with pytest.raises(DuplicateKeyError):
        coll.find_one_and_update({"key": "k2"}, {"$set": {"key": "k1"}})
    assert sorted(d["key"] for d in coll.find()) == ["k1", "k2", "k4"]

    others = client[mongo_rs.db_name].others
    others.insert_many([{"key": "same"}, {"key": "same"}])
    with pytest.raises(OperationFailure) as build:
        others.create_index([("key", 1)], unique=True)
    assert build.value.code == 11000


def test_collections_and_databases(client: MongoClient[Any], mongo_rs: Deployment) -> None:
    db = client[mongo_rs.db_name]
    db.create_collection("plain")
    db.create_collection("localised", collation={"locale": "fr"})
    with pytest.raises(OperationFailure) as exists:
        db.command("create", "plain")
    assert exists.value.code == 48  # NamespaceExists

    options = {c["name"]: c["options"] for c in db.list_collections()}
    assert options["plain"].get("collation") is None
    assert options["localised"]["collation"]["locale"] == "fr"
    assert [c["name"] for c in db.list_collections(filter={"name": "plain"})] == ["plain"]
    assert list(db.missing.list_indexes()) == []

    db.drop_collection("plain")
    db.drop_collection("never_existed")
    assert db.list_collection_names() == ["localised"]
    assert mongo_rs.db_name in client.list_database_names()
    client.drop_database(mongo_rs.db_name)
    assert mongo_rs.db_name not in client.list_database_names()


def test_async_mongo_client(mongo_rs: Deployment) -> None:
    accounting = CommandAccounting()

    async def scenario() -> None:
        async with AsyncMongoClient(mongo_rs.url, event_listeners=[accounting], **CLIENT_OPTIONS) as client:
            coll = client[mongo_rs.db_name].executions
            await coll.insert_many([{"_id": f"exe-{i}", "processed": [f"evt-{i}"]} for i in range(1, 121)])
            seen = [doc["_id"] async for doc in coll.find({}, batch_size=50).sort("_id", 1)]
            assert seen == sorted(f"exe-{i}" for i in range(1, 121))
            assert [doc["hit"] async for doc in await coll.aggregate(SEEN_PIPELINE)] == [False]

            await coll.create_index("tag", unique=True, sparse=True)
            await coll.update_one({"_id": "exe-1"}, {"$set": {"tag": "t"}})
            with pytest.raises(DuplicateKeyError):
                await coll.update_one({"_id": "exe-2"}, {"$set": {"tag": "t"}})
            after = await coll.find_one_and_update(
                {"_id": "exe-2"}, {"$push": {"processed": "evt-x"}}, return_document=ReturnDocument.AFTER
            )
            assert after == {"_id": "exe-2", "processed": ["evt-2", "evt-x"]}

    asyncio.run(scenario())
    assert accounting.tally(command="getMore").commands == 2


def test_motor_client(mongo_rs: Deployment) -> None:
    async def scenario() -> None:
        client: AsyncIOMotorClient[Any] = AsyncIOMotorClient(mongo_rs.url, **CLIENT_OPTIONS)
        try:
            coll = client[mongo_rs.db_name].timers
            await coll.create_index("fire_at")
            await coll.insert_many([{"_id": i, "fire_at": 149 - i} for i in range(150)])
            due = await coll.find({"fire_at": {"$lte": 10}}).sort("fire_at", 1).to_list(None)
            assert [d["fire_at"] for d in due] == list(range(11))
            assert len(await coll.find().to_list(None)) == 150
            with pytest.raises(DuplicateKeyError):
                await coll.insert_one({"_id": 0})
            result = await coll.update_one({"_id": 0, "fire_at": 149}, {"$unset": {"fire_at": ""}})
            assert result.modified_count == 1
            pipeline = [
                {"$match": {"_id": {"$in": [1, 2, 3]}}},
                {"$project": {"late": {"$in": ["$fire_at", [147, 148]]}}},
            ]
            projected = await coll.aggregate(pipeline).to_list(None)
            assert sorted((d["_id"], d["late"]) for d in projected) == [(1, True), (2, True), (3, False)]
        finally:
            client.close()

    asyncio.run(scenario())
