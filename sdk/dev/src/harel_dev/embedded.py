"""`mongomock://`: the production MongoStore and MongoTransport on an in-process mongomock.

mongomock executes an update's match and its write without a lock between them, so two threads could
both win one version CAS — which a real server never allows. The embedded client therefore runs every
collection operation under one process-wide lock (cursors are read whole under it), giving each command
the single-document atomicity the store's correctness rests on. It also serves `$$NOW` from its own clock
(`harel_dev.now`), bound once per operation, as a server does, and evaluates expressions with the
corrections of `harel_dev.expressions` where mongomock answers differently from MongoDB.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, NoReturn

import mongomock
from mongomock.aggregate import process_pipeline
from pymongo import UpdateMany, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure
from pymongo.results import BulkWriteResult

from harel_dev import mongomock_patches
from harel_dev.now import Clock, bind_filter, bind_pipeline, bind_update, server_now

_CHAINED = {"sort", "skip", "limit", "batch_size", "max_time_ms", "hint", "collation"}
# Collection methods whose first argument is a query filter, and those whose second is an update.
_FILTER_FIRST = frozenset(
    {
        "find",
        "find_one",
        "find_one_and_update",
        "find_one_and_delete",
        "find_one_and_replace",
        "update_one",
        "update_many",
        "replace_one",
        "delete_one",
        "delete_many",
        "count_documents",
    }
)
_UPDATE_SECOND = frozenset({"find_one_and_update", "update_one", "update_many"})


def _bound(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], clock: Clock) -> tuple[Any, ...]:
    """The call's filter and update with `$$NOW` bound to this one instant (keyword forms included)."""
    if name not in _FILTER_FIRST:
        return args
    now = server_now(clock())
    listed = list(args)
    if listed:
        listed[0] = bind_filter(listed[0], now)
    elif "filter" in kwargs:
        kwargs["filter"] = bind_filter(kwargs["filter"], now)
    if name in _UPDATE_SECOND:
        if len(listed) > 1:
            listed[1] = bind_update(listed[1], now)
        elif "update" in kwargs:
            kwargs["update"] = bind_update(kwargs["update"], now)
    return tuple(listed)


class _Cursor:
    """A mongomock cursor read whole under the lock the first time it is iterated."""

    def __init__(self, cursor: Any, lock: threading.RLock) -> None:
        self._cursor = cursor
        self._lock = lock
        self._read: Iterator[dict[str, Any]] | None = None

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._cursor, name)
        if name in _CHAINED:
            return lambda *args, **kwargs: _Cursor(attr(*args, **kwargs), self._lock)
        return attr

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._read is None:
            with self._lock:
                self._read = iter(list(self._cursor))
        return next(self._read)

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()


class _Collection:
    def __init__(self, collection: Any, lock: threading.RLock, clock: Clock) -> None:
        self._collection = collection
        self._lock = lock
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._collection, name)
        if not callable(attr):
            return attr

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                args = _bound(name, args, kwargs, self._clock)
                result = attr(*args, **kwargs)
                if name == "find":
                    return _Cursor(result, self._lock)
                return result

        return locked

    def watch(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: mongomock has no change streams, and the embedded client does not model them (the local
        server does, `harel_dev.change_streams`); mongomock's collections would answer an unknown name such
        as `watch` with a sub-collection, which then fails when called."""
        raise OperationFailure("harel_dev does not model change streams", 238)

    def bulk_write(self, requests: list[Any], ordered: bool = True) -> BulkWriteResult:
        """Update operations (`UpdateOne`, `UpdateMany`), each applied as its own command would be, with
        PyMongo's error report: mongomock's own `bulk_write` no longer accepts PyMongo's operations."""
        written: dict[str, Any] = {
            "nMatched": 0,
            "nModified": 0,
            "nUpserted": 0,
            "upserted": [],
            "writeErrors": [],
        }
        with self._lock:
            for index, request in enumerate(requests):
                if not isinstance(request, UpdateOne | UpdateMany):
                    raise NotImplementedError(
                        f"the embedded client's bulk_write takes updates, not {request!r}"
                    )
                apply = self.update_one if isinstance(request, UpdateOne) else self.update_many
                try:
                    result = apply(request._filter, request._doc, upsert=request._upsert)
                except DuplicateKeyError as exc:
                    written["writeErrors"].append({"index": index, "code": exc.code, "errmsg": str(exc)})
                    if ordered:
                        break
                    continue
                written["nMatched"] += result.matched_count
                written["nModified"] += result.modified_count
                if result.upserted_id is not None:
                    written["nUpserted"] += 1
                    written["upserted"].append({"index": index, "_id": result.upserted_id})
        if written["writeErrors"]:
            raise BulkWriteError(written)
        return BulkWriteResult(written, acknowledged=True)

    def aggregate(self, pipeline: list[dict[str, Any]], **options: Any) -> _Cursor:
        """mongomock copies the whole collection before a pipeline's first stage; a leading `$match` is
        answered by a find instead, so `load_for_event` costs a lookup, not a collection scan."""
        with self._lock:
            pipeline = bind_pipeline(pipeline, server_now(self._clock()))
            if pipeline and set(pipeline[0]) == {"$match"}:
                matched = list(self._collection.find(pipeline[0]["$match"]))
                result = process_pipeline(matched, self._collection.database, pipeline[1:], None)
            else:
                result = self._collection.aggregate(pipeline, **options)
            return _Cursor(iter(list(result)), self._lock)


class _Database:
    def __init__(self, database: Any, lock: threading.RLock, clock: Clock) -> None:
        self._database = database
        self._lock = lock
        self._clock = clock

    def __getitem__(self, name: str) -> _Collection:
        return _Collection(self._database[name], self._lock, self._clock)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._database, name)

    def get_collection(self, name: str, **options: Any) -> _Collection:
        return _Collection(self._database.get_collection(name, **options), self._lock, self._clock)


class EmbeddedClient:
    """A mongomock client whose every collection operation is serialized and whose `$$NOW` is `clock()`
    (see the module docstring)."""

    def __init__(self, clock: Clock = time.time) -> None:
        mongomock_patches.install()
        self._client: mongomock.MongoClient[dict[str, Any]] = mongomock.MongoClient()
        self._lock = threading.RLock()
        self.clock = clock

    def __getitem__(self, name: str) -> _Database:
        return _Database(self._client[name], self._lock, self.clock)

    def get_database(self, name: str, **options: Any) -> _Database:
        return _Database(self._client.get_database(name, **options), self._lock, self.clock)

    def close(self) -> None:
        """Nothing to close: the data lives as long as the process."""
