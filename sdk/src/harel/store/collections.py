"""How MongoStore and AsyncMongoStore hold the injected client and their two collections."""

from __future__ import annotations

from typing import Any

from harel.executions.fields import (
    COUNTERS,
    DEFAULT_DEDUPE_WINDOW,
    DEFAULT_TRACE_MAX,
    EXECUTIONS,
    require_positive,
)
from harel.executions.partitions import SINGLE, Partitions


class MongoCollections:
    """The client (duck-typed: PyMongo sync or async, Motor, mongomock) and the `executions` and `counters`
    collections of `db_name`; `partitions` (read from the deployment's `harel_meta` by whoever connects,
    `read_partitions`) gives every command on `executions` its shard key."""

    def __init__(
        self,
        client: Any,
        db_name: str = "harel",
        *,
        trace_max: int = DEFAULT_TRACE_MAX,
        dedupe_window: int = DEFAULT_DEDUPE_WINDOW,
        partitions: Partitions = SINGLE,
    ) -> None:
        self.trace_max = require_positive("trace_max", trace_max)
        self.dedupe_window = require_positive("dedupe_window", dedupe_window)
        self._client = client
        self.partitions = partitions
        database = client[db_name]
        self._executions = database[EXECUTIONS]
        self._counters = database[COUNTERS]
