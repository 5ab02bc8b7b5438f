"""`async def` actions and guards: run on the worker process's event loop, each call bounded by the worker's
async timeout; a call past it fails the attempt with an error that says so. The loop runs while a worker
holds it. Over the wire (a `harel worker` process, AsyncMongoClient): tests/wire/test_readme_api.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from harel import interpreter
from harel.app import ActionContext, ActionResult, App, Send
from harel.backend import open_backend
from harel.client import start_execution
from harel.errors import AsyncCallTimeout, AsyncUnavailable
from harel.eventloop import PROCESS_LOOP, EventLoopThread
from harel.model import Event, Execution, ExecutionStatus
from harel.worker import Worker, WorkerConfig
from tests.unit.test_worker import Clock, Deployment, deployment, pump

CHART = {
    "id": "pay",
    "version": 1,
    "initial": "new",
    "states": {
        "new": {"on": {"pay": {"target": "paying", "guard": "allowed"}}},
        "paying": {"entry": ["charge"], "on": {"charged": "paid"}},
        "paid": {"final": True},
    },
}


def paying_app(seen: dict[str, Any], *, charge_seconds: float = 0.0) -> App:
    app = App("async")
    app.chart(CHART)

    @app.guard("allowed")
    async def allowed(ctx: ActionContext) -> bool:
        await asyncio.sleep(0)
        seen["guard_thread"] = threading.current_thread().name
        return bool(ctx.context.get("ok"))

    @app.action("charge")
    async def charge(ctx: ActionContext) -> ActionResult:
        seen["loop"] = asyncio.get_running_loop()
        try:
            await asyncio.sleep(charge_seconds)
        except asyncio.CancelledError:
            seen["cancelled"] = True
            raise
        return ActionResult(context={"charged_by": ctx.event.id}, send=[Send("charged", to="self")])

    return app


@pytest.fixture
def backend() -> Deployment:
    return deployment(Clock())


@pytest.fixture
def worker_loop() -> Iterator[None]:
    """The loop a started worker holds, for tests that drive a worker step by step without starting it."""
    PROCESS_LOOP.acquire()
    yield
    PROCESS_LOOP.release()


def test_async_actions_and_guards_run_on_the_workers_loop(backend: Deployment, worker_loop: None) -> None:
    seen: dict[str, Any] = {}
    app = paying_app(seen)
    worker = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "pay", execution_id="p1", context={"ok": True})
    pump(worker)
    backend.transport.send("p1", Event(id="pay-1", name="pay"))
    pump(worker)

    exe = backend.store.load("p1")
    assert exe.status is ExecutionStatus.COMPLETED and exe.context["charged_by"] == "pay-1"
    assert seen["guard_thread"] == "harel-event-loop", (
        "the guard ran on the loop's thread, not the consumer's"
    )
    assert seen["loop"].is_running()


def test_an_async_guard_that_says_no_refuses_the_transition(backend: Deployment, worker_loop: None) -> None:
    app = paying_app({})
    worker = backend.worker(app)
    start_execution(backend.store, backend.transport, app, "pay", execution_id="p2", context={"ok": False})
    backend.transport.send("p2", Event(id="pay-2", name="pay"))
    pump(worker)

    [*_, step] = backend.store.read_trace("p2")
    assert step["handled"] is False and "guard 'allowed' on 'new' returned false" in step["reason"]


def test_a_call_past_the_async_timeout_is_cancelled_and_fails_the_attempt(
    backend: Deployment, worker_loop: None
) -> None:
    seen: dict[str, Any] = {}
    app = paying_app(seen, charge_seconds=5.0)
    worker = backend.worker(app, async_timeout_seconds=0.05)
    start_execution(backend.store, backend.transport, app, "pay", execution_id="p3", context={"ok": True})
    pump(worker)
    backend.transport.send("p3", Event(id="pay-3", name="pay"))
    pump(worker)

    document = backend.store.document("p3")
    assert document["attempts"] == 1 and [e["id"] for e in document["inbox"]] == ["pay-3"], "nothing applied"
    assert document["last_error"] == (
        "AsyncCallTimeout: async action 'charge' did not finish within 0.05s and was cancelled; make it "
        "faster, or give the worker a longer --async-timeout (HAREL_ASYNC_TIMEOUT)"
    )
    assert backend.store.load("p3").configuration == ["new"]
    deadline = asyncio.run_coroutine_threadsafe(asyncio.sleep(0.05), seen["loop"])
    deadline.result(5)
    assert seen.get("cancelled") is True, "the coroutine itself was cancelled, not left running"


def test_an_async_action_outside_a_worker_is_refused_by_name() -> None:
    app = paying_app({})
    exe = interpreter.step(
        app.get_chart("pay"),
        Execution(id="x", definition_id="pay", definition_version=1),
        Event(id="s", name="harel.start"),
        0.0,
        registry=app.registry,
    ).execution
    exe.context["ok"] = True

    with pytest.raises(AsyncUnavailable, match="async guard 'allowed' needs a running worker's event loop"):
        interpreter.step(app.get_chart("pay"), exe, Event(id="e", name="pay"), 1.0, registry=app.registry)


def test_the_loop_runs_while_a_worker_holds_it() -> None:
    live = open_backend("mongomock://")
    app = paying_app({})
    first, second = (
        Worker(live.store, live.transport, app, config=WorkerConfig(concurrency=1)) for _ in range(2)
    )
    assert not PROCESS_LOOP.running
    first.start()
    second.start()
    assert PROCESS_LOOP.running
    first.stop(drain_seconds=1)
    assert PROCESS_LOOP.running, "the other worker still holds it"
    second.stop(drain_seconds=1)
    assert not PROCESS_LOOP.running
    assert "harel-event-loop" not in {t.name for t in threading.enumerate()}, "its thread ended"


def test_a_timeout_the_coroutine_raises_itself_is_its_own_error() -> None:
    loop = EventLoopThread()
    loop.acquire()
    try:

        async def upstream() -> None:
            raise TimeoutError("the payment provider timed out")

        with pytest.raises(TimeoutError, match="the payment provider timed out"):
            loop.run(upstream(), "action 'charge'", 5.0)

        async def slow() -> None:
            await asyncio.sleep(5)

        with pytest.raises(AsyncCallTimeout, match=r"async action 'slow' did not finish within 0\.01s"):
            loop.run(slow(), "action 'slow'", 0.01)
    finally:
        loop.release()
    assert not loop.running
