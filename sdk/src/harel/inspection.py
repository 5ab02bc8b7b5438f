"""What an execution's stored document tells beyond its data: its mailbox (the events waiting, the head event's
failed attempts, a dead letter), the events it sent that are still not delivered, and what became of one event.

Pure readers of the document `ExecutionStore.document` returns (its fields are in
`harel.executions.fields`). Whether a live worker serves a chart is the heartbeats' to say
(`harel.heartbeat`, `served_charts`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from harel.executions.records import Parked, Pending
from harel.executions.replies import parse_inbox, parse_parked, parse_relay_work, reading

# How long after its step committed an event sent by an execution is reported as not delivered. The committing
# worker delivers its own at once, so an event still in the outbox this long after waits on its target (not
# created yet, or its mailbox full) or on the relay of a worker that stopped.
UNDELIVERED_AFTER_SECONDS = 5.0


@dataclass(frozen=True)
class Mailbox:
    """The events waiting for an execution, in the order they will be applied."""

    chart: str  # the routing key, "<chart id>@<version>"
    pending: tuple[Pending, ...]
    attempts: int  # failed attempts at the head event
    last_error: str | None
    last_traceback: str | None
    parked: Parked | None  # the head event was dead-lettered: everything waits for an operator
    leased: bool  # a worker holds the execution now


def mailbox_of(document: Mapping[str, Any]) -> Mailbox:
    """UnreadableExecution when a mailbox entry cannot be read."""
    parked = parse_parked(document) if document.get("parked") else None
    with reading(document, "attempts"):
        attempts = int(document.get("attempts") or 0)
    return Mailbox(
        chart=str(document.get("chart", "")),
        pending=parse_inbox(document),
        attempts=attempts,
        last_error=document.get("last_error"),
        last_traceback=document.get("last_traceback"),
        parked=parked,
        leased=document.get("lease") is not None,
    )


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$', re.MULTILINE)


def raised_at(traceback: str | None) -> str | None:
    """Where a stored traceback's exception was raised: `file:line in function` of its innermost frame."""
    frames = list(_FRAME.finditer(traceback or ""))
    if not frames:
        return None
    last = frames[-1]
    return f"{last['file']}:{last['line']} in {last['function']}"


@dataclass(frozen=True)
class Undelivered:
    """An event this execution sent, committed `waiting` seconds ago and still in its outbox."""

    target_id: str
    event: str
    event_id: str
    waiting: float


def undelivered_of(document: Mapping[str, Any], now: float) -> tuple[Undelivered, ...]:
    """The sent events still not delivered UNDELIVERED_AFTER_SECONDS after their step, in the order sent."""
    return tuple(
        Undelivered(entry.target_id, entry.event.name, entry.event.id, now - entry.event.created_at)
        for entry in parse_relay_work(document).outbox
        if entry.target_id is not None
        and entry.event.created_at is not None
        and now - entry.event.created_at >= UNDELIVERED_AFTER_SECONDS
    )


# --- what became of one event ------------------------------------------------------------------------


class Disposition(StrEnum):
    HANDLED = "handled"  # a transition of this execution took it
    FORWARDED = "forwarded"  # no state of its own did; it went on to the regions (child executions)
    IGNORED = "ignored"  # nothing took it (the trace step says why)


def disposition_of(step: Mapping[str, Any]) -> Disposition:
    """A trace step's disposition: its own field where the interpreter records one, else from `handled`."""
    recorded = step.get("disposition")
    if recorded is not None:
        return Disposition(recorded)
    return Disposition.HANDLED if step.get("handled") else Disposition.IGNORED


class Stage(StrEnum):
    """Where an event is: WAITING in the mailbox; APPLIED (or dropped by an operator: both are recorded as
    processed); DEAD, dead-lettered and waiting for `harel dead retry|drop`; UNKNOWN, none of these (never
    sent there, or applied so long ago that the dedupe window forgot it)."""

    WAITING = "waiting"
    APPLIED = "applied"
    DEAD = "dead"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class EventFate:
    stage: Stage
    step: Mapping[str, Any] | None = None  # the trace step that applied it (None: no trace recorded)
    attempts: int = 0  # failed attempts so far (waiting at the head, or dead)
    error: str | None = None

    @property
    def disposition(self) -> Disposition | None:
        return disposition_of(self.step) if self.step is not None else None

    @property
    def forwarded_to(self) -> Sequence[str]:
        return tuple(self.step.get("forwarded_to") or ()) if self.step is not None else ()


def event_fate(document: Mapping[str, Any], event_id: str) -> EventFate:
    box = mailbox_of(document)
    if box.parked is not None and box.parked.event_id == event_id:
        return EventFate(Stage.DEAD, attempts=box.parked.attempts, error=box.parked.error)
    if any(p.id == event_id for p in box.pending):
        at_head = box.pending[0].id == event_id
        return EventFate(
            Stage.WAITING,
            attempts=box.attempts if at_head else 0,
            error=box.last_error if at_head else None,
        )
    step = next((s for s in reversed(document.get("trace") or ()) if s.get("event_id") == event_id), None)
    if step is not None or event_id in (document.get("processed") or ()):
        return EventFate(Stage.APPLIED, step=step)
    return EventFate(Stage.UNKNOWN)
