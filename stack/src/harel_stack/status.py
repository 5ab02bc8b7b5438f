"""`status`: one table of the stack's services, replica-set members (or the sharded cluster's router and shards),
workers and executions by status."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from harel_stack.engine import ServiceState
from harel_stack.errors import ProbeFailure
from harel_stack.probe import StackProbe
from harel_stack.readiness import BEAT_FRESHNESS

HEADER = ("KIND", "NAME", "STATE", "DETAIL")


@dataclass(frozen=True)
class StatusReport:
    rows: list[tuple[str, str, str, str]]
    healthy: bool

    def render(self) -> str:
        table = [HEADER, *self.rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(HEADER) - 1)]
        lines = [
            "  ".join(
                [*(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)), row[-1]]
            ).rstrip()
            for row in table
        ]
        return "\n".join(lines) + "\n"


def _age(seconds: float) -> str:
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


Row = tuple[str, str, str, str]


def service_rows(services: Sequence[ServiceState]) -> list[Row]:
    rows = []
    for service in services:
        state = f"exited ({service.exit_code})" if service.state == "exited" else service.state
        detail = service.health or ("one-shot" if service.state == "exited" else "no healthcheck")
        rows.append(("service", service.container, state, detail))
    return rows


@dataclass(frozen=True)
class DatabaseRows:
    rows: list[Row]
    # What publishes the port (mongo1, mongos) answered: the workers and executions can be asked for.
    answering: bool
    # A primary; the router listing every shard.
    ready: bool


def replica_set_rows(probe: StackProbe) -> DatabaseRows:
    try:
        replica_set = probe.replica_set()
    except ProbeFailure as exc:
        return DatabaseRows([("replica set", "rs0", "unreachable", exc.reason)], answering=False, ready=False)
    rows = [("member", m.name, m.state, "up" if m.healthy else "down") for m in replica_set.members]
    return DatabaseRows(rows, answering=True, ready=replica_set.primary is not None)


def cluster_rows(probe: StackProbe, shards: Sequence[str]) -> DatabaseRows:
    """The router's row, then one per shard: those the cluster should have, then any other listShards lists."""
    try:
        address = probe.router()
    except ProbeFailure as exc:
        return DatabaseRows([("router", "mongos", "unreachable", exc.reason)], answering=False, ready=False)
    rows: list[Row] = [("router", "mongos", "answering", address)]
    try:
        listed = {shard.name: shard.host for shard in probe.shards()}
    except ProbeFailure as exc:
        rows.append(("shards", "listShards", "unreadable", exc.reason))
        return DatabaseRows(rows, answering=True, ready=False)
    for name in shards:
        rows.append(
            ("shard", name, "listed", listed[name])
            if name in listed
            else ("shard", name, "missing", "sharded-init adds it")
        )
    rows += [("shard", name, "listed", host) for name, host in listed.items() if name not in shards]
    return DatabaseRows(rows, answering=True, ready=all(name in listed for name in shards))


def build_status(
    services: Sequence[ServiceState], probe: StackProbe, now: datetime, shards: Sequence[str] | None = None
) -> StatusReport:
    """`shards`: the sharded cluster's, whose router and shards take the place of the replica set's members; None
    for the replica set."""
    database = cluster_rows(probe, shards) if shards is not None else replica_set_rows(probe)
    rows = [*service_rows(services), *database.rows]
    if not database.answering:
        return StatusReport(rows, healthy=False)
    healthy = bool(services) and all(service.settled for service in services) and database.ready
    try:
        beats = probe.workers()
        executions = probe.executions_by_status()
    except ProbeFailure as exc:
        rows.append(("harel", "harel", "unreadable", exc.reason))
        return StatusReport(rows, healthy=False)
    for beat in beats:
        age = (now - beat.last_beat).total_seconds()
        state = "beating" if now - beat.last_beat <= BEAT_FRESHNESS else "silent"
        rows.append(
            (
                "worker",
                beat.worker_id,
                state,
                f"last beat {_age(age)} on {beat.host}, {beat.processed} processed",
            )
        )
    if not executions:
        rows.append(("executions", "-", "0", "none yet (make smoke starts some)"))
    for status, count in executions.items():
        rows.append(("executions", status, str(count), ""))
    return StatusReport(rows, healthy=healthy)
