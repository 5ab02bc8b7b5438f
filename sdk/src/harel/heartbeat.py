"""Worker heartbeats: one document per live worker in the `workers` collection, refreshed periodically.

    {_id: <worker id>, host, pid, started_at, charts: ["<chart id>@<version>", ...], beat_seconds,
     last_beat: <date, the worker's clock>, counters: {...}}

A worker removes its document when it stops; one that dies leaves it behind, so readers count a worker as
live only while its last beat is at most LIVE_BEATS of its own intervals old.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

WORKERS = "workers"
LIVE_BEATS = 3
DEFAULT_BEAT_SECONDS = 5.0  # for documents of workers that did not record their interval


@dataclass(frozen=True)
class Beat:
    """A worker's last heartbeat: what it serves and when it last said so (epoch seconds)."""

    worker_id: str
    host: str
    pid: int | None
    charts: tuple[str, ...]
    last_beat: float
    beat_seconds: float

    def live(self, now: float) -> bool:
        return now - self.last_beat <= LIVE_BEATS * self.beat_seconds


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return float(value or 0.0)


def parse_beat(document: dict[str, Any]) -> Beat:
    return Beat(
        worker_id=str(document["_id"]),
        host=str(document.get("host", "")),
        pid=document.get("pid"),
        charts=tuple(document.get("charts") or ()),
        last_beat=_epoch(document.get("last_beat")),
        beat_seconds=float(document.get("beat_seconds") or DEFAULT_BEAT_SECONDS),
    )


class Heartbeats(Protocol):
    def beat(self, worker_id: str, info: dict[str, Any], counters: dict[str, int]) -> None: ...

    def remove(self, worker_id: str) -> None: ...

    def beats(self) -> list[Beat]:
        """Every worker's last heartbeat, live or not (`Beat.live` tells)."""


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

    def beats(self) -> list[Beat]:
        projection = {"host": 1, "pid": 1, "charts": 1, "last_beat": 1, "beat_seconds": 1}
        return [parse_beat(document) for document in self._workers.find({}, projection)]
