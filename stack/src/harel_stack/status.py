"""`status`: one table of the stack's services, replica-set members, workers and executions by status."""

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


def service_rows(services: Sequence[ServiceState]) -> list[tuple[str, str, str, str]]:
    rows = []
    for service in services:
        state = f"exited ({service.exit_code})" if service.state == "exited" else service.state
        detail = service.health or ("one-shot" if service.state == "exited" else "no healthcheck")
        rows.append(("service", service.container, state, detail))
    return rows


def build_status(services: Sequence[ServiceState], probe: StackProbe, now: datetime) -> StatusReport:
    rows = service_rows(services)
    healthy = bool(services) and all(service.settled for service in services)
    try:
        replica_set = probe.replica_set()
    except ProbeFailure as exc:
        rows.append(("replica set", "rs0", "unreachable", exc.reason))
        return StatusReport(rows, healthy=False)
    for member in replica_set.members:
        rows.append(("member", member.name, member.state, "up" if member.healthy else "down"))
    healthy = healthy and replica_set.primary is not None
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
