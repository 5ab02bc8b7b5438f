"""Building a store: `from_url` gets its client from harel.connection and hands the store's own options to
the store; window sizes below one are refused where they enter."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import mongomock
import pymongo
import pytest
from mongomock_motor import AsyncMongoMockClient

from harel import connection
from harel.aio_store import AsyncMongoStore
from harel.model import Execution
from harel.store.mongo import MongoStore
from tests.conftest import REAL_MONGO_URL, requires_real_mongo

URL = "mongodb://db1:27017,db2:27017/harel?replicaSet=rs0"


def test_sync_from_url_uses_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    client = mongomock.MongoClient()
    seen: list[tuple[str, dict[str, Any]]] = []

    def connect(url: str, **options: Any) -> mongomock.MongoClient:
        seen.append((url, options))
        return client

    monkeypatch.setattr(connection, "connect", connect)
    store = MongoStore.from_url(URL, "orders", trace_max=7, dedupe_window=9, deadline=5.0)
    assert seen == [(URL, {"deadline": 5.0})]
    assert (store.trace_max, store.dedupe_window) == (7, 9)
    store.commit(Execution(id="e", definition_id="d", definition_version=1))
    assert client["orders"]["executions"].find_one({"_id": "e"}, {"version": 1}) == {"_id": "e", "version": 1}


def test_async_from_url_uses_connect_async(monkeypatch: pytest.MonkeyPatch) -> None:
    sync_client = mongomock.MongoClient()
    seen: list[tuple[str, dict[str, Any]]] = []

    async def connect_async(url: str, **options: Any) -> AsyncMongoMockClient:
        seen.append((url, options))
        return AsyncMongoMockClient(mock_mongo_client=sync_client)

    monkeypatch.setattr(connection, "connect_async", connect_async)

    async def scenario() -> AsyncMongoStore:
        store = await AsyncMongoStore.from_url(URL, "orders", trace_max=7, app_name="tests")
        await store.commit(Execution(id="e", definition_id="d", definition_version=1))
        return store

    store = asyncio.run(scenario())
    assert seen == [(URL, {"app_name": "tests"})]
    assert store.trace_max == 7
    assert sync_client["orders"]["executions"].find_one({"_id": "e"}, {"version": 1}) == {
        "_id": "e",
        "version": 1,
    }


@requires_real_mongo
@pytest.mark.real
def test_from_url_on_a_real_server() -> None:
    assert REAL_MONGO_URL is not None
    db_name = f"harel_from_url_{uuid.uuid4().hex[:12]}"
    store = MongoStore.from_url(REAL_MONGO_URL, db_name, deadline=30.0)
    try:
        exe = Execution(id="e", definition_id="d", definition_version=1)
        store.commit(exe)
        assert store.load("e") == exe
    finally:
        store.close()
        with pymongo.MongoClient(REAL_MONGO_URL) as admin:
            admin.drop_database(db_name)


@pytest.mark.parametrize("option", ["trace_max", "dedupe_window"])
def test_window_sizes_must_be_positive(option: str) -> None:
    with pytest.raises(ValueError, match=option):
        MongoStore(mongomock.MongoClient(), **{option: 0})
    with pytest.raises(ValueError, match=option):
        AsyncMongoStore(AsyncMongoMockClient(), **{option: -1})
