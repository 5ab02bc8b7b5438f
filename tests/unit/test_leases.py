"""Bounded actions, counted takeovers: a worker extends the lease of a step while its actions run, up to the
maximum step time; a step that outlives it fails its attempt, and a lease that runs out counts an attempt when
another worker takes it over, so an action that always outlives its lease is parked after `max_attempts` runs
instead of running again without end. Worker threads on mongomock://, on the real clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from harel.app import ActionContext, ActionResult, App
from harel.backend import Backend, open_backend
from harel.client import send_event, start_execution
from harel.worker import Worker, WorkerConfig

SLOW = {
    "id": "slow",
    "version": 1,
    "initial": "idle",
    "states": {"idle": {"on": {"go": {"target": "done", "actions": ["work"]}}}, "done": {"final": True}},
}


@pytest.fixture
def backend() -> Iterator[Backend]:
    opened = open_backend("mongomock://")
    yield opened
    opened.close()


def slow_app(seconds: float, runs: list[float]) -> App:
    app = App("slow")
    app.chart(SLOW)
    lock = threading.Lock()

    @app.action("work")
    def work(ctx: ActionContext) -> ActionResult:
        with lock:
            runs.append(time.monotonic())
        time.sleep(seconds)
        return ActionResult()

    return app


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.02)


@pytest.mark.semantics("sem-step-time")
def test_a_step_slower_than_its_lease_runs_once_its_lease_extended_meanwhile(backend: Backend) -> None:
    runs: list[float] = []
    # two and a half leases of 1 s: a lease long enough that a loaded machine's scheduling pauses (a claim
    # taken, its thread not run for a few hundred ms) cannot outlast it before the first extension
    app = slow_app(2.5, runs)
    config = WorkerConfig(concurrency=2, lease_seconds=1.0, async_timeout_seconds=0.1, idle_poll_max=0.02)
    workers = [Worker(backend.store, backend.transport, app, config=config) for _ in range(2)]
    start_execution(backend.store, backend.transport, app, "slow", execution_id="s")
    for worker in workers:
        worker.start()
    try:
        send_event(backend.store, backend.transport, app, "s", "go")
        wait_until(lambda: backend.store.load("s").status.value == "completed", 20, "the step committed")
    finally:
        for worker in workers:
            worker.stop(drain_seconds=1)
    assert len(runs) == 1, "no other worker took the lease over and ran the action again"
    assert sum(w.metrics.lease_steals._value.get() for w in workers) == 0
    assert backend.store.document("s")["attempts"] == 0


@pytest.mark.semantics("sem-step-time")
def test_an_action_outliving_the_maximum_step_time_is_parked_after_at_most_max_attempts_runs(
    backend: Backend,
) -> None:
    runs: list[float] = []
    app = slow_app(0.9, runs)  # three leases of 0.3 s
    backend.transport.max_attempts = 3
    config = WorkerConfig(
        concurrency=1, lease_seconds=0.3, max_step_seconds=0.3, async_timeout_seconds=0.1, idle_poll_max=0.02
    )
    workers = [Worker(backend.store, backend.transport, app, config=config) for _ in range(2)]
    start_execution(backend.store, backend.transport, app, "slow", execution_id="s")
    for worker in workers:
        worker.start()
    try:
        send_event(backend.store, backend.transport, app, "s", "go", event_id="go-1")
        wait_until(backend.transport.parked, 30, "the execution parked")
        time.sleep(1.0)  # any run still under way ends, and nothing starts another
    finally:
        for worker in workers:
            worker.stop(drain_seconds=2)
    [parked] = backend.transport.parked()
    assert (parked.execution_id, parked.event_id, parked.attempts) == ("s", "go-1", 3)
    assert parked.error.startswith(("LeaseExpired: the lease ran out", "StepTimedOut: the step of 'go' took"))
    assert 1 <= len(runs) <= 3, f"ran {len(runs)} times for 3 attempts"
    assert backend.store.load("s").configuration == ["idle"], "nothing of the step was committed"
