"""Awaitable execution stores: the AsyncExecutionStore protocol and AsyncMongoStore."""

from harel.aio_store.mongo import AsyncMongoStore
from harel.store.base import AsyncExecutionStore

__all__ = ["AsyncExecutionStore", "AsyncMongoStore"]
