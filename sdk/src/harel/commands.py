"""The shapes of the MongoDB commands the SDK sends, and how each is sent on any client.

A builder (`harel.executions`, `harel.heartbeat`, `harel.catalog`) returns one of these; a store, transport
or reader sends it and parses the reply. Sending is the same call on every client (PyMongo sync and async,
Motor, mongomock): only awaiting the result differs, so the sync and async twins share every command.
PyMongo is imported only when a command is sent, so building one needs no driver.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pymongo import UpdateOne


def literal(value: Any) -> dict[str, Any]:
    """A value inside an aggregation expression or update pipeline, taken as data: a string starting with
    `$` stays a string instead of becoming a field path."""
    return {"$literal": value}


def only(*fields: str) -> dict[str, int]:
    """A fresh projection per call: some clients (mongomock) write into the projection they are given."""
    return dict.fromkeys(fields, 1)


def array(field: str) -> dict[str, Any]:
    """The array field `field` inside an expression, empty where the document has none."""
    return {"$ifNull": [f"${field}", []]}


@dataclass(frozen=True)
class IndexSpec:
    """One index: its name, keys in order, whether it holds only some documents, and a TTL.

    `sparse` and `partial` are sent only when set: a server that stored the index without an option may
    count an explicit default as different options and refuse."""

    name: str
    keys: tuple[tuple[str, int], ...]
    sparse: bool = False
    partial: Mapping[str, Any] | None = None
    expire_after: int | None = None  # seconds: a TTL index on a date field

    def options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"name": self.name}
        if self.sparse:
            options["sparse"] = True
        if self.partial is not None:
            options["partialFilterExpression"] = dict(self.partial)
        if self.expire_after is not None:
            options["expireAfterSeconds"] = self.expire_after
        return options

    def create_on(self, collection: Any) -> Any:
        """`create_index` on a sync or async collection (awaited by the caller where it is a coroutine)."""
        return collection.create_index(list(self.keys), **self.options())


@dataclass(frozen=True)
class Find:
    """One `find`: filter, projection (None: the whole document) and cursor shape."""

    filter: dict[str, Any]
    projection: dict[str, Any] | None = None
    sort: tuple[tuple[str, int], ...] = ()
    skip: int = 0
    limit: int = 0

    def open(self, collection: Any) -> Any:
        """The cursor, opened without a round trip on every client: iterating it sends the command."""
        cursor = collection.find(self.filter, self.projection)
        if self.sort:
            cursor = cursor.sort(list(self.sort))
        if self.skip:
            cursor = cursor.skip(self.skip)
        if self.limit:
            cursor = cursor.limit(self.limit)
        return cursor

    def one(self, collection: Any) -> Any:
        """`find_one`: the first match or None (awaited by the caller on an async client)."""
        return collection.find_one(self.filter, self.projection)


@dataclass(frozen=True)
class Write:
    """One update: `update_one`, `update_many` when `many`, or `find_one_and_update` when the document after
    the write is `returned` (`projection` of it, None: all of it; `sort` picks among several matches)."""

    filter: dict[str, Any]
    update: list[dict[str, Any]] | dict[str, Any]
    upsert: bool = False
    returned: bool = False
    projection: dict[str, Any] | None = None
    sort: tuple[tuple[str, int], ...] = ()
    many: bool = False  # `update_many`: every match (a one-off correction of stored documents)

    def send(self, collection: Any) -> Any:
        """The update's result (or the document after it), awaited by the caller on an async client."""
        from pymongo import ReturnDocument

        if self.many:
            return collection.update_many(self.filter, self.update)
        if not self.returned:
            return collection.update_one(self.filter, self.update, upsert=self.upsert)
        return collection.find_one_and_update(
            self.filter,
            self.update,
            projection=self.projection,
            sort=list(self.sort) or None,
            upsert=self.upsert,
            return_document=ReturnDocument.AFTER,
        )

    def request(self) -> UpdateOne:
        """The same update as one request of a `bulk_write`."""
        from pymongo import UpdateOne

        return UpdateOne(self.filter, self.update, upsert=self.upsert)


def matched(result: Any) -> bool:
    """Whether an `update_one` found its document (its filter, a CAS or a fence, held)."""
    return bool(result.matched_count == 1)


# --- async clients -----------------------------------------------------------------------------------------
# PyMongo's AsyncMongoClient makes `aggregate` and `close` coroutines; Motor and mongomock-motor return the
# cursor and None directly. These absorb both, so one async store serves every async client.


async def resolved(value: Any) -> Any:
    """Await what a client made awaitable; pass through what it returned directly."""
    return await value if inspect.isawaitable(value) else value


async def drained(cursor: Any) -> list[dict[str, Any]]:
    """Every document of an async cursor (of `find`, or of an `aggregate` not yet awaited)."""
    return [document async for document in await resolved(cursor)]
