"""How executions, their mailboxes, their traces and an event's fate are shown, as text and as JSON."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from harel.cli.output import pairs, styled, table
from harel.errors import UnreadableExecution
from harel.executions.records import Parked
from harel.inspection import Disposition, EventFate, Mailbox, Stage, Undelivered, disposition_of, raised_at
from harel.model import Execution, ExecutionStatus
from harel.worker import RELAY_RETRY_SECONDS, UNDELIVERABLE_AFTER_SECONDS

# Widths `trace --follow` fixes, so rows printed as they come line up under the header.
TRACE_WIDTHS = {"#": 4, "at": 24, "event": 12, "from": 12, "to": 12}


def when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def chart_name(key: str) -> str:
    """`order@1` as people read it: `order v1`."""
    chart_id, _, version = key.rpartition("@")
    return f"{chart_id} v{version}"


def ended(exe: Execution) -> Text:
    """`order-42 completed in delivered`: how a finished execution ended."""
    where = ", ".join(exe.configuration) or "-"
    return Text.assemble(
        f"{exe.id} ", styled(exe.status.value), f" in {where} ({exe.definition_id} v{exe.definition_version})"
    )


# --- status ----------------------------------------------------------------------------------------------


def status_view(
    exe: Execution,
    box: Mailbox | None,
    served: set[str] | None,
    now: float,
    undelivered: Sequence[Undelivered] = (),
) -> RenderableType:
    """`served`: the chart versions live workers serve (None: not read, as nothing waits); `undelivered`:
    events it sent that are still not delivered."""
    rows: list[tuple[str, RenderableType]] = [
        ("execution", exe.id),
        ("chart", f"{exe.definition_id} v{exe.definition_version}"),
        ("status", Text.assemble(styled(exe.status.value), f" (version {exe.version})")),
        ("active", ", ".join(exe.configuration) or "-"),
    ]
    if exe.reason:
        rows.insert(3, ("reason", Text(exe.reason, style="red")))
    if exe.parent_id:
        rows.append(("parent", f"{exe.parent_id} (region {exe.root_path})"))
    for n, (child_id, child) in enumerate(sorted(exe.children.items())):
        rows.append(("children" if n == 0 else "", f"{child_id}  {'done' if child.done else 'running'}"))
    for n, (path, fire_at) in enumerate(sorted(exe.timers.items(), key=lambda t: t[1])):
        due = fire_at - now
        rows.append(
            (
                "timers" if n == 0 else "",
                f"{path}  {f'fires in {due:.1f}s' if due > 0 else f'due {-due:.1f}s ago'}",
            )
        )
    if box is not None:
        rows += mailbox_rows(exe.id, box, served)
    rows += undelivered_rows(undelivered)
    rows.append(("updated", when(exe.updated_at)))
    return pairs(rows)


def mailbox_rows(
    execution_id: str, box: Mailbox, served: set[str] | None
) -> list[tuple[str, RenderableType]]:
    if not box.pending:
        return [("mailbox", "empty")]
    names = ", ".join(p.event.name for p in box.pending)
    rows: list[tuple[str, RenderableType]] = [("mailbox", f"{len(box.pending)} waiting: {names}")]
    if box.parked is not None:
        dead = box.parked
        rows.append(
            (
                "dead letter",
                Text(
                    f"{dead.event_name} ({dead.event_id}) after {dead.attempts} attempts: {dead.error}",
                    "bold red",
                ),
            )
        )
        if where := raised_at(dead.traceback):
            rows.append(("raised at", Text(where, "red")))
        rows.append(
            (
                "",
                f"the events behind it wait: `harel dead retry {execution_id}` or `harel dead drop {execution_id}`",
            )
        )
        return rows
    if box.attempts:
        head = box.pending[0]
        rows.append(
            ("", Text(f"{head.event.name}: attempt {box.attempts} failed: {box.last_error}", "yellow"))
        )
        if where := raised_at(box.last_traceback):
            rows.append(("raised at", Text(where, "yellow")))
    if served is not None and box.chart not in served:
        rows.append(("", Text(unserved(box.chart, served), "yellow")))
    return rows


# The undelivered events `harel status` lists one a line; the rest it counts (`--json` lists them all).
UNDELIVERED_SHOWN = 5


def undelivered_rows(undelivered: Sequence[Undelivered]) -> list[tuple[str, RenderableType]]:
    if not undelivered:
        return []
    rows: list[tuple[str, RenderableType]] = [
        (
            "sent" if n == 0 else "",
            Text(
                f"{u.event} ({u.event_id}) to {u.target_id}: not delivered after {u.waiting:.0f}s", "yellow"
            ),
        )
        for n, u in enumerate(undelivered[:UNDELIVERED_SHOWN])
    ]
    if len(undelivered) > UNDELIVERED_SHOWN:
        rest = undelivered[UNDELIVERED_SHOWN:]
        targets = ", ".join(sorted({u.target_id for u in rest}))
        rows.append(("", Text(f"and {len(rest)} more to {targets}", "yellow")))
    rows.append(
        (
            "",
            f"each is sent again every {RELAY_RETRY_SECONDS:g}s while its target is missing or its mailbox full; "
            f"a target that never appears fails this execution after {UNDELIVERABLE_AFTER_SECONDS:.0f}s",
        )
    )
    return rows


def undelivered_document(undelivered: Sequence[Undelivered]) -> list[dict[str, Any]]:
    return [
        {
            "target": u.target_id,
            "event": u.event,
            "event_id": u.event_id,
            "waiting_seconds": round(u.waiting, 3),
        }
        for u in undelivered
    ]


def unserved(chart: str, served: set[str]) -> str:
    names = ", ".join(chart_name(c) for c in sorted(served))
    others = f"live workers serve {names}" if served else "no worker is live"
    return f"no live worker serves {chart_name(chart)}, so the events wait ({others})"


def mailbox_document(box: Mailbox, served: set[str] | None) -> dict[str, Any]:
    return {
        "chart": box.chart,
        "pending": [{"id": p.id, "event": p.event.name, "at": p.at} for p in box.pending],
        "attempts": box.attempts,
        "last_error": box.last_error,
        "last_traceback": box.last_traceback,
        "leased": box.leased,
        "dead_letter": dead_letter_document(box.parked),
        "served": None if served is None else box.chart in served,
    }


def dead_letter_document(dead: Parked | None) -> dict[str, Any] | None:
    if dead is None:
        return None
    return {
        "event_id": dead.event_id,
        "event": dead.event_name,
        "error": dead.error,
        "traceback": dead.traceback,
        "attempts": dead.attempts,
        "at": dead.at,
    }


# --- an execution that cannot be read ------------------------------------------------------------------


def unreadable_view(
    document: Mapping[str, Any], unreadable: UnreadableExecution, dead: Parked | None
) -> RenderableType:
    """What the document still tells, read past the models: its chart, the status and version last
    written, why it cannot be read, and its dead letter (a worker that claims it parks it)."""
    execution_id = unreadable.execution_id
    chart = document.get("chart")
    rows: list[tuple[str, RenderableType]] = [
        ("execution", execution_id),
        ("chart", chart_name(chart) if isinstance(chart, str) else "-"),
        (
            "status",
            Text.assemble(
                ("unreadable", "bold red"),
                f" (stored as {document.get('status')}, version {document.get('version')})",
            ),
        ),
        ("reason", Text(unreadable.what, style="red")),
    ]
    if dead is None:
        rows.append(("", "the next worker to claim it parks it with this reason"))
    else:
        rows.append(("dead letter", Text(f"{dead.event_name} ({dead.event_id}): {dead.error}", "bold red")))
        rows.append(
            (
                "",
                f"repair the stored document (`harel status {execution_id} --document` prints it), then "
                f"`harel dead retry {execution_id}`; or `harel dead drop {execution_id}` drops its head event",
            )
        )
    return pairs(rows)


def unreadable_document(
    document: Mapping[str, Any], unreadable: UnreadableExecution, dead: Parked | None
) -> dict[str, Any]:
    """`harel status --json` of it: `unreadable` says what cannot be read; the rest is as stored."""
    return {
        "id": unreadable.execution_id,
        "unreadable": unreadable.what,
        "status": document.get("status"),
        "version": document.get("version"),
        "chart": document.get("chart"),
        "last_error": document.get("last_error"),
        "dead_letter": dead_letter_document(dead),
    }


# --- trace -----------------------------------------------------------------------------------------------


def trace_table(steps: Sequence[dict[str, Any]], *, header: bool = True) -> Table:
    rows = table("#", "at", "event", "from", "to", "note") if header else _headless()
    for step in steps:
        rows.add_row(
            str(step["index"]),
            when(step["at"]),
            step["event"],
            ",".join(step.get("from", [])) or "-",
            ",".join(step.get("to", [])) or "-",
            trace_note(step),
        )
    return rows


def _headless() -> Table:
    rows = Table(box=None, padding=(0, 1), pad_edge=False, show_header=False)
    for _ in range(6):
        rows.add_column(no_wrap=True)
    return rows


def fixed_widths(rows: Table) -> Table:
    for column, width in zip(rows.columns, TRACE_WIDTHS.values(), strict=False):
        column.min_width = width
    return rows


def trace_note(step: dict[str, Any]) -> Text | str:
    disposition = disposition_of(step)
    if disposition is Disposition.FORWARDED:
        regions = len(step.get("forwarded_to") or ())
        return Text(f"forwarded to {regions} region{'s' if regions != 1 else ''}", style="cyan")
    if disposition is Disposition.IGNORED:
        return Text(f"ignored: {step.get('reason')}", style="yellow")
    return ""


# --- an event's fate -------------------------------------------------------------------------------------


def fate_line(execution_id: str, name: str, fate: EventFate) -> Text:
    if fate.stage is Stage.DEAD:
        return Text(
            f"{name} dead-lettered at {execution_id} after {fate.attempts} attempts: {fate.error}; "
            f"`harel dead retry {execution_id}` or `harel dead drop {execution_id}`",
            style="bold red",
        )
    step = fate.step
    if step is None:
        return Text(
            f"{name} applied by {execution_id} (no trace step recorded, so how it was taken is not known)"
        )
    moves = f"{','.join(step.get('from', [])) or '-'} → {','.join(step.get('to', [])) or '-'}"
    if fate.disposition is Disposition.FORWARDED:
        regions = ", ".join(fate.forwarded_to)
        return Text.assemble((f"{name} forwarded", "cyan"), f" by {execution_id} to its regions {regions}")
    if fate.disposition is Disposition.IGNORED:
        return Text.assemble((f"{name} ignored", "yellow"), f" by {execution_id}: {step.get('reason')}")
    return Text.assemble((f"{name} handled", "green"), f" by {execution_id}: {moves}")


def finished_well(exe: Execution) -> bool:
    return exe.status is ExecutionStatus.COMPLETED
