"""What clients do to executions: start one, send it an event, cancel it. Workers do the rest."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from harel.app import App
from harel.errors import StoreConflict, UnknownEvent, UnknownExecution
from harel.model import CANCEL_EVENT, RESERVED_EVENT_PREFIX, Event, Execution
from harel.store.base import ExecutionStore
from harel.transport.base import Transport
from harel.worker import start_event


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
    """Create an execution on the newest version of the chart and send its start event.

    `execution_id` is an idempotency key: starting the same id again creates nothing and returns the
    existing execution (the start event is sent again, which its deterministic id makes harmless).
    Returns the execution and whether this call created it.
    """
    chart = app.get_chart(chart_id)
    now = time.time() if now is None else now
    exe = Execution(
        id=execution_id or f"{chart.id}-{uuid.uuid4().hex[:12]}",
        definition_id=chart.id,
        definition_version=chart.version,
        context=dict(context or {}),
        created_at=now,
        updated_at=now,
    )
    created = True
    try:
        store.commit(exe)
    except StoreConflict:
        existing = store.load(exe.id)
        if existing is None:
            raise
        exe, created = existing, False
    transport.send(exe.id, start_event(exe.id, now))
    return exe, created


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
    """Queue a user event for an execution. Unknown executions and event names are refused here."""
    exe = store.load(execution_id)
    if exe is None:
        raise UnknownExecution(execution_id)
    chart = app.get_chart(exe.definition_id, exe.definition_version)
    known = sorted(chart.event_names())
    if name.startswith(RESERVED_EVENT_PREFIX) or name not in known:
        raise UnknownEvent(chart.id, name, known)
    event = Event(id=event_id or uuid.uuid4().hex, name=name, data=dict(data or {}), created_at=time.time())
    transport.send(execution_id, event)
    return event


def cancel_execution(store: ExecutionStore, transport: Transport, execution_id: str) -> Event:
    """Queue a cancel: the execution stops, disarms its timers and cancels its children."""
    if store.load(execution_id) is None:
        raise UnknownExecution(execution_id)
    event = Event(id=f"{execution_id}:cancel", name=CANCEL_EVENT, created_at=time.time())
    transport.send(execution_id, event)
    return event
