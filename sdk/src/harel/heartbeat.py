"""Worker heartbeats: one document per live worker in the `workers` collection, refreshed periodically."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any, Protocol

WORKERS = "workers"


class Heartbeats(Protocol):
    def beat(self, worker_id: str, info: dict[str, Any], counters: dict[str, int]) -> None: ...

    def remove(self, worker_id: str) -> None: ...

    def live(self) -> list[dict[str, Any]]: ...


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

    def live(self) -> list[dict[str, Any]]:
        return list(self._workers.find({}).sort("_id", 1))


class MemoryHeartbeats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workers: dict[str, dict[str, Any]] = {}

    def beat(self, worker_id: str, info: dict[str, Any], counters: dict[str, int]) -> None:
        with self._lock:
            self._workers[worker_id] = {
                "_id": worker_id,
                **info,
                "last_beat": datetime.now(UTC),
                "counters": dict(counters),
            }

    def remove(self, worker_id: str) -> None:
        with self._lock:
            self._workers.pop(worker_id, None)

    def live(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(w) for _, w in sorted(self._workers.items())]
