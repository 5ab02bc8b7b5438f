"""The decisions behind a client call, without I/O: shared by `harel.client` and its async twin `harel.aio`,
which differ only in how they reach the deployment (a blocking call or an awaited one).

Each client call is: read or write one document, then one of these to decide what it means.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from harel.chart import Chart
from harel.errors import (
    EventTooLarge,
    ExecutionFinished,
    ExecutionIdTaken,
    MailboxFull,
    UnknownChart,
    UnknownEvent,
    UnknownExecution,
    WaitTimedOut,
)
from harel.executions.fields import INBOX_LIMIT_BYTES
from harel.executions.records import SendOutcome
from harel.ids import check_client_event_id, check_context, check_json, check_root_id
from harel.model import (
    CANCEL_EVENT,
    RESERVED_EVENT_PREFIX,
    TERMINAL_STATUSES,
    Event,
    Execution,
    start_event,
)

FIRST_PAUSE = 0.05
LONGEST_PAUSE = 0.5


class StartOptions(TypedDict, total=False):
    """What a client may give `start`: the initial context and the execution's id (an idempotency key)."""

    context: Mapping[str, Any] | None
    execution_id: str | None


class SendOptions(TypedDict, total=False):
    """What a client may give `send`: the event's data and its id (sending an id again takes effect once)."""

    data: Mapping[str, Any] | None
    event_id: str | None


def known_chart(chart: Chart | None, chart_id: str, version: int | None = None) -> Chart:
    if chart is None:
        raise UnknownChart(chart_id, version)
    return chart


def new_execution(
    chart: Chart,
    now: float,
    context: Mapping[str, Any] | None = None,
    execution_id: str | None = None,
) -> tuple[Execution, list[Event]]:
    """A version-0 execution of `chart` and the events to create it with (its start). InvalidExecutionId for
    an id a client may not start under, InvalidContext for a context that is not strict JSON."""
    if execution_id is not None:
        check_root_id(execution_id)
    initial = dict(context or {})
    check_context(initial, "start context")
    exe = Execution(
        id=execution_id if execution_id is not None else f"{chart.id}-{uuid.uuid4().hex[:12]}",
        definition_id=chart.id,
        definition_version=chart.version,
        context=initial,
        created_at=now,
        updated_at=now,
        start_request=start_digest(chart.id, initial),
    )
    return exe, [start_event(exe.id, now)]


def start_digest(chart_id: str, context: Mapping[str, Any]) -> str:
    request = json.dumps({"chart": chart_id, "context": context}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(request.encode()).hexdigest()[:32]


def same_start(existing: Execution | None, requested: Execution) -> Execution:
    """The execution already under `requested`'s id, when this start repeats the request that created it;
    ExecutionIdTaken when it asks for another chart or context (an execution created before digests were
    recorded is compared by its chart)."""
    exe = found(existing, requested.id)
    if exe.definition_id != requested.definition_id or exe.start_request not in (
        None,
        requested.start_request,
    ):
        raise ExecutionIdTaken(requested.id, exe.definition_id)
    return exe


def found(exe: Execution | None, execution_id: str) -> Execution:
    if exe is None:
        raise UnknownExecution(execution_id)
    return exe


def running(exe: Execution | None, execution_id: str) -> Execution:
    """The execution, if it can still take events."""
    exe = found(exe, execution_id)
    if exe.status in TERMINAL_STATUSES:
        raise ExecutionFinished(execution_id, exe.status.value)
    return exe


def finished(exe: Execution) -> bool:
    return exe.status in TERMINAL_STATUSES


def user_event(
    exe: Execution,
    chart: Chart,
    name: str,
    data: Mapping[str, Any] | None = None,
    event_id: str | None = None,
) -> Event:
    """A user event for `exe`, refused here when no `on` of the pinned chart matches its name (UnknownEvent),
    its id is empty or of the engine's own forms (InvalidEventId), or its data is not strict JSON
    (InvalidContext)."""
    known = sorted(chart.event_names())
    if name == CANCEL_EVENT:
        raise UnknownEvent(chart.id, name, known, f"to cancel the execution, use `harel cancel {exe.id}`")
    if name.startswith(RESERVED_EVENT_PREFIX) or not chart.accepts(name):
        raise UnknownEvent(chart.id, name, known)
    chosen = uuid.uuid4().hex if event_id is None else check_client_event_id(event_id, exe.id)
    check_json(dict(data or {}), "event data")
    return Event(id=chosen, name=name, data=dict(data or {}), created_at=time.time())


def cancel_event(execution_id: str) -> Event:
    return Event(id=f"{execution_id}:cancel", name=CANCEL_EVENT, created_at=time.time())


def delivered(outcome: SendOutcome, execution_id: str, event: Event) -> Event:
    """The event, once its send was accepted (queued, or already there)."""
    if outcome is SendOutcome.MISSING:
        raise UnknownExecution(execution_id)
    if outcome is SendOutcome.FULL:
        size = len(event.model_dump_json().encode())
        if size > INBOX_LIMIT_BYTES:
            raise EventTooLarge(execution_id, size, INBOX_LIMIT_BYTES)
        raise MailboxFull(execution_id, INBOX_LIMIT_BYTES)
    return event


@dataclass
class Waiting:
    """How long to pause between two looks at something that is not there yet: from FIRST_PAUSE, doubling up
    to LONGEST_PAUSE, never past `timeout` (None: no limit); WaitTimedOut once it has passed."""

    timeout: float | None
    started: float = field(default_factory=time.monotonic)
    pause: float = FIRST_PAUSE

    def next_pause(self, what: str) -> float:
        """`what` names what is awaited, for the error: "execution 'order-42' is still running"."""
        waited = time.monotonic() - self.started
        if self.timeout is not None and waited >= self.timeout:
            raise WaitTimedOut(what, self.timeout)
        pause, self.pause = self.pause, min(LONGEST_PAUSE, self.pause * 2)
        return pause if self.timeout is None else min(pause, self.timeout - waited)


def still_running(execution_id: str) -> str:
    return f"execution {execution_id!r} is still running"
