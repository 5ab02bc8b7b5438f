"""The local server's data file: a snapshot round-trips every BSON type, indexes and options; the file is
locked, rewritten after changes and at close, and a bad file is refused without being touched."""

from __future__ import annotations

import fcntl
import io
import logging
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import bson
import pytest
from bson import Binary, Decimal128, Int64, ObjectId, Timestamp

from harel.errors import LocalDataError
from harel_dev.engine import Engine
from harel_dev.persistence import DataFile, Snapshot, decode, encode
from harel_dev.retryable import RetryRecords

DOCUMENT = {
    "_id": ObjectId("65a000000000000000000001"),
    "when": datetime(2024, 1, 2, 3, 4, 5, 678000),
    "big": Int64(2**40),
    "price": Decimal128(Decimal("12.50")),
    "token": Binary(uuid.UUID(int=7).bytes, 4),
    "ts": Timestamp(1_700_000_000, 3),
    "nested": {"list": [1, "two", {"three": None}], "dotted\uff0ekey": True},
}


def filled_engine() -> Engine:
    engine = Engine()
    engine.execute("create", "harel", {"create": "executions", "collation": {"locale": "simple"}})
    engine.execute("insert", "harel", {"insert": "executions", "documents": [DOCUMENT, {"_id": "b", "n": 1}]})
    engine.execute(
        "createIndexes",
        "harel",
        {
            "createIndexes": "executions",
            "indexes": [
                {"key": {"n": 1}, "name": "n_unique", "unique": True, "sparse": True},
                {
                    "key": {"when": -1, "n": 1},
                    "name": "due",
                    "partialFilterExpression": {"n": {"$exists": True}},
                },
            ],
        },
    )
    engine.execute("insert", "other", {"insert": "empty", "documents": []})
    return engine


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_a_snapshot_round_trips_documents_indexes_options_and_retry_records() -> None:
    engine = filled_engine()
    retries = RetryRecords()
    session = {"id": Binary(uuid.uuid4().bytes, 4)}
    retries.record(session, 5, {"n": 1, "ok": 1.0})
    payload = encode(Snapshot(engine.dump(), retries.dump()))

    snapshot = decode(Path("mem"), io.BytesIO(payload))
    restored, restored_retries = Engine(), RetryRecords()
    restored.load(snapshot.collections)
    restored_retries.load(snapshot.retryable)

    assert restored.dump() == engine.dump()
    assert snapshot.document_count == 2
    found = restored.execute("find", "harel", {"find": "executions", "filter": {"_id": DOCUMENT["_id"]}})
    assert found["cursor"]["firstBatch"] == [DOCUMENT]
    listed = restored.execute("listIndexes", "harel", {"listIndexes": "executions"})["cursor"]["firstBatch"]
    assert {index["name"]: index.get("unique") for index in listed} == {
        "_id_": None,
        "n_unique": True,
        "due": None,
    }
    collections = restored.execute("listCollections", "harel", {"listCollections": 1})["cursor"]["firstBatch"]
    assert collections[0]["options"] == {"collation": {"locale": "simple"}}
    duplicate = restored.execute(
        "insert", "harel", {"insert": "executions", "documents": [{"_id": "c", "n": 1}]}
    )
    assert duplicate["writeErrors"][0]["code"] == 11000  # the unique index was restored, not just listed
    assert restored_retries.lookup(session, 5) == {"n": 1, "ok": 1.0}


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        (b"", "empty"),
        (b"not bson at all", "not a harel.local snapshot"),
        (bson.encode({"something": "else"}), "not a harel.local snapshot of format 1"),
        (bson.encode({"harel.local": 1}), "cut short"),
        (
            bson.encode({"harel.local": 1})
            + bson.encode({"collection": {"db": "d", "name": "c", "options": {}, "indexes": [], "count": 2}})
            + bson.encode({"_id": 1}),
            "collection d.c is cut short",
        ),
        (bson.encode({"harel.local": 1}) + bson.encode({"retryable": []}) + bson.encode({"x": 1}), "after"),
    ],
)
def test_a_file_that_is_not_a_snapshot_is_refused_and_left_alone(
    tmp_path: Path, content: bytes, complaint: str
) -> None:
    path = tmp_path / "dev.db"
    path.write_bytes(content)
    data_file = DataFile(path, Snapshot)
    with pytest.raises(LocalDataError, match=complaint) as refused:
        data_file.open()
    assert refused.value.path == str(path)
    assert path.read_bytes() == content
    with path.with_name("dev.db.lock").open("ab") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # the refusal released the lock


def test_changes_are_written_after_a_pause_and_at_close(tmp_path: Path) -> None:
    path = tmp_path / "dev.db"
    engine = Engine()
    data_file = DataFile(path, lambda: Snapshot(engine.dump(), []))
    assert data_file.open().collections == []
    assert not path.exists()  # nothing changed: nothing written

    engine.execute("insert", "harel", {"insert": "items", "documents": [{"_id": 1}]})
    data_file.changed()
    wait_until(path.exists)
    assert decode(path, path.open("rb")).document_count == 1

    engine.execute("insert", "harel", {"insert": "items", "documents": [{"_id": 2}]})
    data_file.changed()
    data_file.close()  # before the pause is over: close() writes it
    assert decode(path, path.open("rb")).document_count == 2
    assert not path.with_name("dev.db.tmp").exists()


def test_a_second_server_cannot_use_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "dev.db"
    first = DataFile(path, Snapshot)
    first.open()
    with pytest.raises(LocalDataError, match="in use by another server"):
        DataFile(path, Snapshot).open()
    first.close()
    second = DataFile(path, Snapshot)
    second.open()
    second.close()


def test_a_failed_write_is_logged_once_and_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "dev.db"
    data_file = DataFile(path, Snapshot)
    data_file.open()
    path.mkdir()  # the rename over a directory fails
    with caplog.at_level(logging.WARNING, logger="harel_dev.persistence"):
        data_file.changed()
        wait_until(lambda: any("cannot write the data file" in r.message for r in caplog.records))
        time.sleep(1.2)  # two more attempts fail meanwhile
        path.rmdir()
        wait_until(path.is_file)
        data_file.close()
    messages = [record.message for record in caplog.records]
    assert sum("cannot write the data file" in message for message in messages) == 1
    assert any("written again" in message for message in messages)
