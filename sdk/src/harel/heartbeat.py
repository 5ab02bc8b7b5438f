"""Worker heartbeats: one document per live worker in the `workers` collection, refreshed periodically."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

WORKERS = "workers"


class Heartbeats(Protocol):
    def beat(self, worker_id: str, info: dict[str, Any], counters: dict[str, int]) -> None: ...

    def remove(self, worker_id: str) -> None: ...


class MongoHeartbeats:
    def __init__(self, client: Any, db_name: str = "harel") -> None:
        self._workers = client[db_name][WORKERS]

    def beat(self, worker_id: str, info: dict[str, Any], counters: dict[str, int]) -> None:
        self._workers.update_one(
            {"_id": worker_id},
            {"$set": {**info, "last_beat": datetime.now(UTC), "counters": counters}},
            upsert=True,
        )

    def remove(self, worker_id: str) -> None:
        self._workers.delete_one({"_id": worker_id})
