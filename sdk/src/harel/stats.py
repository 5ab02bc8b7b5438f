"""What the deployment holds, read for `/metrics` when it is scraped: mailbox depth and age (and, on a
partitioned deployment, the depth per zone: per shard), executions by status, parked executions, executions no live worker serves, pending relay work, the newest backup.

Each query is served by an index (status, the partial mailbox and relay indexes, `parked.at`), and they run
at most once per `STATS_TTL_SECONDS` however often Prometheus scrapes, so an unscraped worker sends none.
Times are compared on the deployment's clock (the worker's estimate of it: these are reports, not decisions).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from harel.backups import latest_success, parse_statuses, read_statuses
from harel.driver_errors import mapped
from harel.errors import DeploymentError
from harel.executions import queries, replies
from harel.executions.fields import EXECUTIONS
from harel.executions.partitions import SINGLE, Partitions
from harel.heartbeat import MongoHeartbeats
from harel.metrics import STATS_TTL_SECONDS, Metrics
from harel.model import ExecutionStatus
from harel.servertime import ServerClock

log = logging.getLogger("harel.stats")

# An execution due this long with no live worker serving its chart version counts as unserved.
UNSERVED_AFTER_SECONDS = 30.0


class DeploymentStats:
    """Reads the gauges of `metrics` from the deployment behind `client`, at most once per TTL."""

    def __init__(
        self,
        client: Any,
        db_name: str,
        metrics: Metrics,
        clock: ServerClock,
        heartbeat_seconds: float,
        monotonic: Callable[[], float] = time.monotonic,
        partitions: Partitions = SINGLE,
    ) -> None:
        self._database = client[db_name]
        self._executions = self._database[EXECUTIONS]
        self._heartbeats = MongoHeartbeats(client, db_name)
        self._metrics = metrics
        self._clock = clock
        self._heartbeat_seconds = heartbeat_seconds
        self._monotonic = monotonic
        self._partitions = partitions
        self._lock = threading.Lock()
        self._read_at: float | None = None

    def refresh(self) -> None:
        """Read the gauges again unless they were read within the TTL. A deployment that cannot answer
        leaves the previous values and says so in the log; the scrape still succeeds."""
        with self._lock:
            if self._read_at is not None and self._monotonic() - self._read_at < STATS_TTL_SECONDS:
                return
            self._read_at = self._monotonic()
            try:
                with mapped():
                    self._read()
            except DeploymentError as exc:
                log.warning("deployment statistics not read", extra={"error": str(exc)})

    def _read(self) -> None:
        metrics, now = self._metrics, self._clock.now()
        metrics.mailbox_events.set(
            replies.parse_count(list(self._executions.aggregate(queries.PENDING_COUNT)))
        )
        if not self._partitions.single:
            by_partition = self._executions.aggregate(queries.PENDING_BY_PARTITION)
            for zone, waiting in replies.parse_zone_backlog(by_partition, self._partitions).items():
                metrics.zone_mailbox_events.labels(zone=zone.name, shard=zone.shard or "").set(waiting)
        oldest = replies.parse_oldest(self._executions.aggregate(queries.oldest_due(now)))
        metrics.oldest_due_age.set(max(0.0, now - oldest) if oldest is not None else 0.0)
        for status in ExecutionStatus:
            count = self._executions.count_documents(queries.status_filter(status))
            metrics.executions.labels(status=status.value).set(count)
        metrics.parked.set(self._executions.count_documents(queries.parked_filter()))
        served = self._heartbeats.served_charts(now, self._heartbeat_seconds)
        unserved = queries.unserved_filter(now, served, UNSERVED_AFTER_SECONDS)
        metrics.unserved.set(self._executions.count_documents(unserved))
        relays = list(self._executions.aggregate(queries.PENDING_RELAYS))
        for kind in ("outbox", "spawn"):
            metrics.pending_relays.labels(kind=kind).set(replies.parse_count(relays, kind))
        newest = latest_success(parse_statuses(read_statuses(self._database))[0])
        metrics.last_backup.set(newest.finished_at if newest is not None else 0.0)
