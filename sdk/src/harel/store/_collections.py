"""What MongoStore and AsyncMongoStore share beyond the document builders: how they hold their collections
and read the replies of their writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harel.errors import LeaseLost, StoreConflict
from harel.store import _documents as doc
from harel.store.base import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX

DUPLICATE_KEY = 11000


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
        from pymongo import ReturnDocument, UpdateOne
        from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

        self.trace_max = doc.require_positive("trace_max", trace_max)
        self.dedupe_window = doc.require_positive("dedupe_window", dedupe_window)
        self._client = client
        database = client[db_name]
        self._executions = database[doc.EXECUTIONS]
        self._counters = database[doc.COUNTERS]
        self._after = ReturnDocument.AFTER
        self._update_one = UpdateOne
        self._duplicate_key = DuplicateKeyError
        self._bulk_error = BulkWriteError
        self._operation_failure = OperationFailure

    def _children_requests(self, writes: Sequence[doc.CommitWrite]) -> list[Any]:
        return [self._update_one(w.filter, w.pipeline, upsert=True) for w in writes]

    def _existing_children(self, error: Exception, writes: Sequence[doc.CommitWrite]) -> list[str]:
        """The children a bulk create found already there; any other write error is raised."""
        details = getattr(error, "details", {}) or {}
        failures = details.get("writeErrors", [])
        if any(f.get("code") != DUPLICATE_KEY for f in failures):
            raise error
        return [writes[f["index"]].execution_id for f in failures]


def conflict_for(write: doc.CommitWrite, found: dict[str, Any] | None, owner: str | None) -> StoreConflict:
    """StoreConflict for a CAS that matched nothing; LeaseLost when the version is the one expected but the
    lease is no longer this claim's (it expired and another worker holds the execution)."""
    if owner is not None and found is not None and found.get("version") == write.expected:
        holder = (found.get("lease") or {}).get("owner")
        return LeaseLost(write.execution_id, write.expected, holder)
    return doc.conflict(write, found)
