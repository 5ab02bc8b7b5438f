"""Worker heartbeats: one document per live worker in the `workers` collection, refreshed periodically.

    {_id: worker id, host, pid, started_at, charts: [<chart id>@<version> it serves], counters,
     last_beat: <date, server clock>, beat_at: <epoch seconds, server clock>}

A beat is written on the server's clock (`$$NOW`) and returns it, so every beat also tells the worker the
deployment's time. A worker that dies without saying goodbye stops beating: readers count a worker as live
only while its `beat_at` is recent (`LIVE_BEATS` intervals), and the TTL index on `last_beat` deletes its
document `EXPIRE_SECONDS` after its last beat (MongoDB's TTL monitor runs once a minute, so removal lags by
up to a minute more).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from harel.commands import IndexSpec, literal
from harel.driver_errors import translating
from harel.servertime import NOW

WORKERS = "workers"
EXPIRE_SECONDS = 60
LIVE_BEATS = 3
INDEXES = (IndexSpec("last_beat_ttl", (("last_beat", 1),), expire_after=EXPIRE_SECONDS),)


class Heartbeats(Protocol):
    def beat(self, worker_id: str, info: dict[str, Any], counters: dict[str, int]) -> float | None:
        """Record a beat; the server's time of it (epoch seconds), when the backend has a server."""

    def remove(self, worker_id: str) -> None: ...

    def served_charts(self, now: float, interval: float) -> set[str]:
        """The chart versions live workers serve (by their beats' recency at server time `now`)."""

    def ensure_indexes(self) -> None: ...


def beat_update(info: dict[str, Any], counters: dict[str, int]) -> list[dict[str, Any]]:
    fields = {key: literal(value) for key, value in info.items()}
    return [{"$set": {**fields, "counters": literal(counters), "last_beat": "$$NOW", "beat_at": NOW}}]


def live_filter(now: float, interval: float) -> dict[str, Any]:
    """Workers whose last beat is recent by the server's clock `now`."""
    return {"beat_at": {"$gte": now - LIVE_BEATS * interval}}


def served(documents: Iterable[dict[str, Any]]) -> set[str]:
    return {chart for document in documents for chart in document.get("charts", [])}


@translating
class MongoHeartbeats:
    def __init__(self, client: Any, db_name: str = "harel") -> None:
        from pymongo import ReturnDocument

        self._workers = client[db_name][WORKERS]
        self._after = ReturnDocument.AFTER

    def beat(self, worker_id: str, info: dict[str, Any], counters: dict[str, int]) -> float | None:
        written = self._workers.find_one_and_update(
            {"_id": worker_id},
            beat_update(info, counters),
            upsert=True,
            projection={"beat_at": 1},
            return_document=self._after,
        )
        return float(written["beat_at"]) if written is not None else None

    def remove(self, worker_id: str) -> None:
        self._workers.delete_one({"_id": worker_id})

    def served_charts(self, now: float, interval: float) -> set[str]:
        """The chart versions live workers serve (by their beats' recency at server time `now`)."""
        return served(self._workers.find(live_filter(now, interval), {"charts": 1}))

    def ensure_indexes(self) -> None:
        for index in INDEXES:
            index.create_on(self._workers)
