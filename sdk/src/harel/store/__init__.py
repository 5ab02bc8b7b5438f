"""Execution stores: the protocol and MongoStore."""

from harel.errors import ExecutionTooLarge, StoreConflict
from harel.store.base import DEFAULT_DEDUPE_WINDOW, DEFAULT_TRACE_MAX, AsyncExecutionStore, ExecutionStore

__all__ = [
    "DEFAULT_DEDUPE_WINDOW",
    "DEFAULT_TRACE_MAX",
    "AsyncExecutionStore",
    "ExecutionStore",
    "ExecutionTooLarge",
    "StoreConflict",
]
