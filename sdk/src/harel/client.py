"""What clients do to executions: start one, send it an event, cancel it, read it, wait for it to finish.
Workers do the rest.

The functions take a store, a transport and the App whose charts they check against; `Client` holds them
for one deployment. `harel.aio` is the async twin (the same calls, awaited), and both decide with
`harel.calls`, so they cannot drift apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Self, TypeVar, Unpack

from harel import calls
from harel.app import App
from harel.backend import Backend, open_backend
from harel.calls import SendOptions, StartOptions
from harel.model import Event, Execution
from harel.store.base import ExecutionStore
from harel.transport.base import Transport

T = TypeVar("T")


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
    now = transport.clock.now() if now is None else now
    exe, events = calls.new_execution(app.get_chart(chart_id), now, context, execution_id)
    if store.create(exe, events, now=now):
        return exe, True
    return calls.same_start(store.load(exe.id), exe), False


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
    exe = calls.running(store.load(execution_id), execution_id)
    chart = app.get_chart(exe.definition_id, exe.definition_version)
    event = calls.user_event(exe, chart, name, data, event_id)
    return calls.delivered(transport.send(execution_id, event), execution_id, event)


def cancel_execution(store: ExecutionStore, transport: Transport, execution_id: str) -> Event:
    """Queue a cancel behind the events already sent: the execution stops, disarms its timers and cancels
    its children."""
    calls.running(store.load(execution_id), execution_id)
    event = calls.cancel_event(execution_id)
    return calls.delivered(transport.send(execution_id, event), execution_id, event)


def poll_until(look: Callable[[], T | None], what: str, timeout: float | None) -> T:
    """What `look` returns once it returns something, looking again after growing pauses; WaitTimedOut after
    `timeout` seconds (None: no limit). `what` says what is awaited: "execution 'x' is still running"."""
    waiting = calls.Waiting(timeout)
    while (found := look()) is None:
        time.sleep(waiting.next_pause(what))
    return found


def wait_for_execution(
    store: ExecutionStore, execution_id: str, *, timeout: float | None = None
) -> Execution:
    """The execution once it has finished (completed, failed or cancelled); WaitTimedOut after `timeout`
    seconds (None: no limit)."""

    def finished() -> Execution | None:
        exe = calls.found(store.load(execution_id), execution_id)
        return exe if calls.finished(exe) else None

    return poll_until(finished, calls.still_running(execution_id), timeout)


class Client:
    """The calls above on one deployment, for programs: `Client.connect(url, app)`. `harel.aio.Client` is its
    async twin."""

    def __init__(self, store: ExecutionStore, transport: Transport, app: App | None = None) -> None:
        self.store = store
        self.transport = transport
        self.app = app or App()
        self._backend: Backend | None = None

    @classmethod
    def connect(
        cls,
        url: str,
        app: App | None = None,
        *,
        deadline: float | None = 60.0,
        allow_standalone: bool = False,
    ) -> Client:
        """Connect and run the start-up checks (DeploymentRefused on errors). Charts `app` does not register
        are read from the catalog the workers publish to."""
        backend = open_backend(url, allow_standalone=allow_standalone, deadline=deadline)
        client = cls(backend.store, backend.transport, app)
        client.app.use_catalog(backend.catalog)
        client._backend = backend
        return client

    def start(self, chart_id: str, **options: Unpack[StartOptions]) -> Execution:
        """A new execution of the chart's newest version (or the existing one with `execution_id`)."""
        exe, _ = start_execution(self.store, self.transport, self.app, chart_id, **options)
        return exe

    def send(self, execution_id: str, name: str, **options: Unpack[SendOptions]) -> Event:
        return send_event(self.store, self.transport, self.app, execution_id, name, **options)

    def cancel(self, execution_id: str) -> Event:
        return cancel_execution(self.store, self.transport, execution_id)

    def status(self, execution_id: str) -> Execution:
        return calls.found(self.store.load(execution_id), execution_id)

    def wait(self, execution_id: str, *, timeout: float | None = None) -> Execution:
        return wait_for_execution(self.store, execution_id, timeout=timeout)

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
