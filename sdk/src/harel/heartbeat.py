"""Worker heartbeats: one document per live worker in the `workers` collection, refreshed periodically.

    {_id: worker id, host, pid, started_at, charts: [<chart id>@<version> it serves], counters,
     last_beat: <date, server clock>, beat_at: <epoch seconds, server clock>,
     pause_requested: true (set by a pause, `harel.pausing`), paused_at: <epoch seconds, server clock>}

A beat is written on the server's clock (`$$NOW`) and returns it, so every beat also tells the worker the
deployment's time. A worker that dies without saying goodbye stops beating: readers count a worker as live
only while its `beat_at` is recent (`LIVE_BEATS` intervals), and the TTL index on `last_beat` deletes its
document `EXPIRE_SECONDS` after its last beat (MongoDB's TTL monitor runs once a minute, so removal lags by
up to a minute more).

The beat also carries the engine's pause (`harel.pausing`) at no command of its own: a pause sets
`pause_requested` on the worker documents, which the beat leaves as it is and returns; a worker that has
paused says so in its next beat (`paused_at`, the server's time it first said so, kept while the request
stands and removed by the first beat that does not say it, or by the resume). A worker that starts looks once
for a pause that stands, after its first beat stored its document, and flags its own document if one does
(`join_pause`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from harel.commands import IndexSpec, literal
from harel.driver_errors import translating
from harel.executions.partitions import META
from harel.servertime import NOW

WORKERS = "workers"
EXPIRE_SECONDS = 60
LIVE_BEATS = 3
INDEXES = (IndexSpec("last_beat_ttl", (("last_beat", 1),), expire_after=EXPIRE_SECONDS),)
# The pause (`harel.pausing`): its document in `harel_meta`, and the fields it sets on the worker documents.
PAUSE_ID = "pause"
PAUSE_REQUESTED = "pause_requested"
PAUSED_AT = "paused_at"


@dataclass(frozen=True)
class Beat:
    """What a beat returned: the server's time of it (epoch seconds; None without a server) and whether a
    pause is requested of this worker."""

    server_time: float | None
    pause_requested: bool = False


class Heartbeats(Protocol):
    def beat(
        self, worker_id: str, info: dict[str, Any], counters: dict[str, int], *, paused: bool = False
    ) -> Beat:
        """Record a beat (`paused`: this worker has stopped for a pause); what the deployment said back."""

    def join_pause(self, worker_id: str) -> bool:
        """At a worker's start, once its first beat stored its document: whether a pause stands (its document
        in `harel_meta`); if one does, the worker's document is flagged as the pause flags every other."""

    def remove(self, worker_id: str) -> None: ...

    def served_charts(self, now: float, interval: float) -> set[str]:
        """The chart versions live workers serve (by their beats' recency at server time `now`)."""

    def ensure_indexes(self) -> None: ...


def beat_update(info: dict[str, Any], counters: dict[str, int], paused: bool = False) -> list[dict[str, Any]]:
    """The beat's pipeline. `pause_requested` is left as the pause set it; `paused_at` is kept (or set, on the
    server's clock) only while this worker says it paused and the request still stands, removed otherwise."""
    fields = {key: literal(value) for key, value in info.items()}
    acknowledged: Any = "$$REMOVE"
    if paused:
        acknowledged = {
            "$cond": [{"$eq": [f"${PAUSE_REQUESTED}", True]}, {"$ifNull": [f"${PAUSED_AT}", NOW]}, "$$REMOVE"]
        }
    return [
        {
            "$set": {
                **fields,
                "counters": literal(counters),
                "last_beat": "$$NOW",
                "beat_at": NOW,
                PAUSED_AT: acknowledged,
            }
        }
    ]


BEAT_PROJECTION = {"beat_at": 1, PAUSE_REQUESTED: 1}


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
        self._meta = client[db_name][META]
        self._after = ReturnDocument.AFTER

    def beat(
        self, worker_id: str, info: dict[str, Any], counters: dict[str, int], *, paused: bool = False
    ) -> Beat:
        written = self._workers.find_one_and_update(
            {"_id": worker_id},
            beat_update(info, counters, paused),
            upsert=True,
            projection=BEAT_PROJECTION,
            return_document=self._after,
        )
        if written is None:
            return Beat(None)
        return Beat(float(written["beat_at"]), written.get(PAUSE_REQUESTED) is True)

    def join_pause(self, worker_id: str) -> bool:
        if not self._standing():
            return False
        self._workers.update_one({"_id": worker_id}, {"$set": {PAUSE_REQUESTED: True}})
        if self._standing():
            return True
        # lifted meanwhile: the resume's unset may have come before this flag
        self._workers.update_one({"_id": worker_id}, {"$unset": {PAUSE_REQUESTED: "", PAUSED_AT: ""}})
        return False

    def _standing(self) -> bool:
        return self._meta.find_one({"_id": PAUSE_ID}, {"_id": 1}) is not None

    def remove(self, worker_id: str) -> None:
        self._workers.delete_one({"_id": worker_id})

    def served_charts(self, now: float, interval: float) -> set[str]:
        """The chart versions live workers serve (by their beats' recency at server time `now`)."""
        return served(self._workers.find(live_filter(now, interval), {"charts": 1}))

    def ensure_indexes(self) -> None:
        for index in INDEXES:
            index.create_on(self._workers)
