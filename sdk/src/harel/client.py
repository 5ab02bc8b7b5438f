"""What clients do to executions: start one, send it an event, cancel it. Workers do the rest."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from harel.app import App
from harel.errors import ExecutionFinished, MailboxFull, UnknownEvent, UnknownExecution
from harel.ids import check_context, check_json, check_root_id
from harel.model import CANCEL_EVENT, RESERVED_EVENT_PREFIX, TERMINAL_STATUSES, Event, Execution, start_event
from harel.store.base import ExecutionStore
from harel.transport._mailbox import INBOX_LIMIT_BYTES
from harel.transport.base import SendOutcome, Transport


def start_execution(
    store: ExecutionStore,
    transport: Transport,
    app: App,
    chart_id: str,
    *,
    context: Mapping[str, Any] | None = None,
    execution_id: str | None = None,
    now: float | None = None,
) -> tuple[Execution, bool]:
    """Create an execution on the newest version of the chart, its start event already in its mailbox.

    `execution_id` is an idempotency key: starting the same id again creates nothing and returns the
    existing execution. It may not be empty or take the form of a region's child id, and the context must
    be strict JSON (InvalidExecutionId, InvalidContext). Returns the execution and whether this call
    created it.
    """
    chart = app.get_chart(chart_id)
    if execution_id is not None:
        check_root_id(execution_id)
    check_context(dict(context or {}), "start context")
    now = transport.clock.now() if now is None else now
    exe = Execution(
        id=execution_id if execution_id is not None else f"{chart.id}-{uuid.uuid4().hex[:12]}",
        definition_id=chart.id,
        definition_version=chart.version,
        context=dict(context or {}),
        created_at=now,
        updated_at=now,
    )
    if store.create(exe, [start_event(exe.id, now)], now=now):
        return exe, True
    existing = store.load(exe.id)
    if existing is None:
        raise UnknownExecution(exe.id)
    return existing, False


def _running(store: ExecutionStore, execution_id: str) -> Execution:
    exe = store.load(execution_id)
    if exe is None:
        raise UnknownExecution(execution_id)
    if exe.status in TERMINAL_STATUSES:
        raise ExecutionFinished(execution_id, exe.status.value)
    return exe


def _delivered(transport: Transport, execution_id: str, event: Event) -> Event:
    outcome = transport.send(execution_id, event)
    if outcome is SendOutcome.MISSING:
        raise UnknownExecution(execution_id)
    if outcome is SendOutcome.FULL:
        raise MailboxFull(execution_id, INBOX_LIMIT_BYTES)
    return event


def send_event(
    store: ExecutionStore,
    transport: Transport,
    app: App,
    execution_id: str,
    name: str,
    *,
    data: Mapping[str, Any] | None = None,
    event_id: str | None = None,
) -> Event:
    """Put a user event in an execution's mailbox. Unknown and finished executions and event names the
    pinned chart does not handle are refused here. Sending an event id again takes effect once."""
    exe = _running(store, execution_id)
    chart = app.get_chart(exe.definition_id, exe.definition_version)
    known = sorted(chart.event_names())
    if name.startswith(RESERVED_EVENT_PREFIX) or name not in known:
        raise UnknownEvent(chart.id, name, known)
    check_json(dict(data or {}), "event data")
    event = Event(id=event_id or uuid.uuid4().hex, name=name, data=dict(data or {}), created_at=time.time())
    return _delivered(transport, execution_id, event)


def cancel_execution(store: ExecutionStore, transport: Transport, execution_id: str) -> Event:
    """Queue a cancel behind the events already sent: the execution stops, disarms its timers and cancels
    its children."""
    _running(store, execution_id)
    event = Event(id=f"{execution_id}:cancel", name=CANCEL_EVENT, created_at=time.time())
    return _delivered(transport, execution_id, event)
