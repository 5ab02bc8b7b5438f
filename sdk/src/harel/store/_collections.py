"""What MongoStore and AsyncMongoStore share beyond the document builders: how they hold their collections."""

from __future__ import annotations

from typing import Any

from harel.store import _documents as doc
from harel.store.base import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX


class MongoCollections:
    """The injected client (duck-typed: pymongo, Motor, mongomock) and the store's two collections.
    pymongo is imported here, lazily, only for the names the write path needs."""

    def __init__(
        self,
        client: Any,
        db_name: str = "harel",
        *,
        trace_max: int = DEFAULT_TRACE_MAX,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
    ) -> None:
        from pymongo import ReturnDocument
        from pymongo.errors import DuplicateKeyError

        self.trace_max = doc.require_positive("trace_max", trace_max)
        self.dedupe_window = doc.require_positive("dedupe_window", dedupe_window)
        self._client = client
        database = client[db_name]
        self._executions = database[doc.EXECUTIONS]
        self._counters = database[doc.COUNTERS]
        self._after = ReturnDocument.AFTER
        self._duplicate_key = DuplicateKeyError
