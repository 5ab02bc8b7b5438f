"""The engine's pause: every live worker stops claiming and relaying, whatever runs it (Kubernetes, compose,
systemd), so that a logical dump through a sharded cluster's routers sees one moment (`harel pause`, the
sharded mode of helm/harel-stack/files/backup/harel-backup.sh).

    harel_meta  {_id: "pause", requested_at: <epoch seconds, server clock>, reason}
    workers     {..., pause_requested: true, paused_at: <epoch seconds, server clock, once acknowledged>}

A worker hears of the pause through its heartbeat (`harel.heartbeat`), which returns `pause_requested` from its
own document: the pause costs the claim and commit path no command. The worker stops claiming, lets its steps
in flight commit and relay, acknowledges what it delivered, stops its background relay, and beats at once with
`paused_at`. A worker that starts while the meta document exists starts paused (it looks once, after its first
beat stored its document).

Requesting: upsert the meta document (a pause that stands keeps its time and reason), then set
`pause_requested` on every worker document. The order closes the race with a worker starting: it stores its
document before it looks for the meta document, so either it sees the document or its document is flagged.
A waiter flags again on every look (`flag`), which costs nothing once every document is flagged.
Status: the live workers (a beat within `LIVE_BEATS` heartbeat intervals of the server's `$$NOW`), each
acknowledged or not. Resuming: delete the meta document, then unset both fields on every worker document.

The backup script sends the same commands from mongosh (files/backup/pause-workers.js): this module is the
contract both follow. What it writes is on the deployment, so a dump taken while paused holds the pause: a
deployment restored from it starts paused too, until `harel resume`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harel.commands import literal
from harel.driver_errors import translating
from harel.executions.partitions import META
from harel.heartbeat import LIVE_BEATS, PAUSE_ID, PAUSE_REQUESTED, PAUSED_AT, WORKERS
from harel.servertime import NOW


@dataclass(frozen=True)
class PauseRequest:
    """The pause that stands: when it was asked for (server clock) and why."""

    requested_at: float
    reason: str

    def document(self) -> dict[str, Any]:
        return {"requested_at": self.requested_at, "reason": self.reason}


@dataclass(frozen=True)
class WorkerPause:
    """One live worker, and whether it acknowledged the pause (`paused_at`, server clock)."""

    worker_id: str
    host: str | None
    pid: int | None
    paused_at: float | None

    @property
    def acknowledged(self) -> bool:
        return self.paused_at is not None

    def document(self) -> dict[str, Any]:
        return {"worker_id": self.worker_id, "host": self.host, "pid": self.pid, "paused_at": self.paused_at}


@dataclass(frozen=True)
class PauseStatus:
    """The pause (None: none stands) and the live workers."""

    request: PauseRequest | None
    workers: tuple[WorkerPause, ...]

    @property
    def acknowledged(self) -> tuple[WorkerPause, ...]:
        return tuple(w for w in self.workers if w.acknowledged)

    @property
    def waiting(self) -> tuple[WorkerPause, ...]:
        return tuple(w for w in self.workers if not w.acknowledged)

    @property
    def complete(self) -> bool:
        """A pause stands and every live worker acknowledged it (vacuously so with none live)."""
        return self.request is not None and not self.waiting

    def document(self) -> dict[str, Any]:
        return {
            "paused": self.request is not None,
            "request": None if self.request is None else self.request.document(),
            "complete": self.complete,
            "acknowledged": [w.document() for w in self.acknowledged],
            "waiting": [w.document() for w in self.waiting],
        }


def live_expression(heartbeat_seconds: float) -> dict[str, Any]:
    """Workers whose last beat is recent by the server's `$$NOW` (as `harel.heartbeat.live_filter`, decided on
    the server, so the reader's clock does not matter)."""
    return {"$expr": {"$gte": ["$beat_at", {"$subtract": [NOW, LIVE_BEATS * heartbeat_seconds]}]}}


def request_update(reason: str) -> list[dict[str, Any]]:
    """The meta document's upsert: a pause that stands keeps its time and reason."""
    return [
        {
            "$set": {
                "requested_at": {"$ifNull": ["$requested_at", NOW]},
                "reason": {"$ifNull": ["$reason", literal(reason)]},
            }
        }
    ]


FLAG_FILTER = {PAUSE_REQUESTED: {"$ne": True}}
FLAG_UPDATE = {"$set": {PAUSE_REQUESTED: True}}
RESUME_FILTER = {"$or": [{PAUSE_REQUESTED: {"$exists": True}}, {PAUSED_AT: {"$exists": True}}]}
RESUME_UPDATE = {"$unset": {PAUSE_REQUESTED: "", PAUSED_AT: ""}}


def _request(document: dict[str, Any] | None) -> PauseRequest | None:
    if document is None:
        return None
    return PauseRequest(float(document.get("requested_at") or 0.0), str(document.get("reason") or ""))


def _worker(document: dict[str, Any]) -> WorkerPause:
    paused_at = document.get(PAUSED_AT)
    pid = document.get("pid")
    return WorkerPause(
        str(document["_id"]),
        document.get("host"),
        pid if isinstance(pid, int) else None,
        float(paused_at) if isinstance(paused_at, int | float) else None,
    )


@translating
class MongoPauses:
    """Request, read and lift the pause of the deployment whose `db_name` the workers use."""

    def __init__(self, client: Any, db_name: str = "harel", *, heartbeat_seconds: float = 5.0) -> None:
        from pymongo import ReturnDocument

        self._meta = client[db_name][META]
        self._workers = client[db_name][WORKERS]
        self._heartbeat_seconds = heartbeat_seconds
        self._after = ReturnDocument.AFTER

    def request(self, reason: str) -> PauseRequest:
        """Ask every worker to pause (the request that stands, when one does), and flag every worker document."""
        stored = self._meta.find_one_and_update(
            {"_id": PAUSE_ID}, request_update(reason), upsert=True, return_document=self._after
        )
        self.flag()
        request = _request(stored)
        assert request is not None, "an upsert returning the document after it returns one"
        return request

    def flag(self) -> int:
        """Flag the worker documents that are not (a worker that started since); how many were."""
        return int(self._workers.update_many(FLAG_FILTER, FLAG_UPDATE).modified_count)

    def status(self) -> PauseStatus:
        request = _request(self._meta.find_one({"_id": PAUSE_ID}))
        live = self._workers.find(
            live_expression(self._heartbeat_seconds), {"host": 1, "pid": 1, PAUSED_AT: 1}
        ).sort("_id", 1)
        return PauseStatus(request, tuple(_worker(document) for document in live))

    def resume(self) -> PauseRequest | None:
        """Lift the pause: the request that stood (None: none did). Every worker document loses its flags."""
        lifted = _request(self._meta.find_one_and_delete({"_id": PAUSE_ID}))
        self._workers.update_many(RESUME_FILTER, RESUME_UPDATE)
        return lifted
