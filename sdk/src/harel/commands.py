"""Shapes of the MongoDB commands the SDK sends, shared by the stores, the transport and the catalog.

The sync and async twins build every command from these, so they differ only in how they await it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harel.model import Execution


def literal(value: Any) -> dict[str, Any]:
    """A value inside an aggregation expression or update pipeline, taken as data: a string starting with
    `$` stays a string instead of becoming a field path."""
    return {"$literal": value}


def only(*fields: str) -> dict[str, int]:
    """A fresh projection per call: some clients (mongomock) write into the projection they are given."""
    return dict.fromkeys(fields, 1)


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
    """One `find`: filter, projection and cursor shape. Opening the cursor is the same call on every
    client (PyMongo sync and async, Motor, mongomock): only iterating it differs."""

    filter: dict[str, Any]
    projection: dict[str, Any]
    sort: tuple[tuple[str, int], ...] = ()
    skip: int = 0
    limit: int = 0

    def open(self, collection: Any) -> Any:
        cursor = collection.find(self.filter, self.projection)
        if self.sort:
            cursor = cursor.sort(list(self.sort))
        if self.skip:
            cursor = cursor.skip(self.skip)
        if self.limit:
            cursor = cursor.limit(self.limit)
        return cursor


def parse_execution(document: Mapping[str, Any] | None) -> Execution | None:
    """A document without `data` holds only a trace appended before the execution was created."""
    if document is None or "data" not in document:
        return None
    return Execution.model_validate_json(document["data"])
