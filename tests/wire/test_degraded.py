"""A degraded deployment is an error, never a hang. A deployment that lost its majority: a worker turns
not-ready within its write bound, names why in one log line, and turns ready again when the majority is back.
A primary that stops answering: the same within the reply bound (`socketTimeoutMS`, which `connect` sets by
default)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from pymongo import MongoClient

from harel.app import ActionContext, ActionResult, App
from harel.client import send_event, start_execution
from harel.metrics import Metrics
from harel.serve import Probes
from harel.worker import Worker
from tests.fake_mongod.fail_command import fail_command
from tests.fake_mongod.server import FakeMongod
from tests.wire.in_process import Seam, open_seam, start_tally, tally_app
from tests.wire.processes import wait_until

pytestmark = pytest.mark.wire

WRITE_BOUND_MS = 300
REPLY_BOUND_MS = 300
HUNG_MS = 5_000
DEGRADED_LINE = "deployment degraded; not ready until it answers again"
HELD = {
    "id": "held",
    "version": 1,
    "initial": "idle",
    "states": {"idle": {"on": {"go": {"target": "done", "actions": ["hold"]}}}, "done": {"final": True}},
}


@dataclass
class Bumped:
    """A tally with a `bump` waiting, and a worker (not started yet) whose probes tell its readiness."""

    seam: Seam
    worker: Worker
    probes: Probes
    execution_id: str

    def turns_not_ready(self, caplog: pytest.LogCaptureFixture) -> tuple[float, str]:
        """Start the worker; how long it took to turn not ready, and why, after one named log line."""
        self.worker.start()
        began = time.monotonic()
        with caplog.at_level(logging.ERROR, logger="harel.worker"):
            wait_until(lambda: not self.probes.ready()[0], 10.0, "the worker to turn not ready")
        took = time.monotonic() - began
        assert [r.getMessage() for r in caplog.records].count(DEGRADED_LINE) == 1, (
            "one named line, not one per attempt"
        )
        return took, self.probes.ready()[1]

    def recovers(self, timeout: float) -> None:
        wait_until(lambda: self.probes.ready()[0], timeout, "the worker to turn ready again")
        assert self.probes.ready() == (True, "ready")
        wait_until(
            lambda: self.seam.store.load(self.execution_id).context.get("count") == 1,
            10.0,
            "the bump to take effect",
        )


@contextmanager
def bumped(url: str, name: str) -> Iterator[Bumped]:
    tally = tally_app()
    seam = open_seam(url, f"harel_{name}", name)
    worker = seam.worker(tally.app, concurrency=1, lease_seconds=1.0)
    probes = Probes(Metrics())
    probes.worker = worker
    execution_id = start_tally(seam, tally, worker)
    send_event(seam.store, seam.transport, tally.app, execution_id, "bump", event_id="during")
    try:
        yield Bumped(seam, worker, probes, execution_id)
    finally:
        worker.stop(drain_seconds=2)
        seam.close()


def test_a_worker_is_not_ready_while_writes_are_not_acknowledged_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with FakeMongod() as server, bumped(f"{server.url}&wTimeoutMS={WRITE_BOUND_MS}", "degraded") as run:
        server.withhold_write_concern()  # the claim of the bump is written, its acknowledgement withheld
        try:
            took, why = run.turns_not_ready(caplog)
            assert why.startswith("deployment degraded: WTimeoutError"), why
            assert took < 10 * WRITE_BOUND_MS / 1000, "within a few write bounds, not a hang"
        finally:
            server.release_write_concern()
        run.recovers(10.0)


def test_a_worker_is_not_ready_while_the_primary_does_not_answer_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        FakeMongod() as server,
        MongoClient(server.url) as admin,
        bumped(f"{server.url}&socketTimeoutMS={REPLY_BOUND_MS}", "hung") as run,
    ):
        # Every claim of the worker's queue client is held at the server far past the reply bound.
        with fail_command(
            admin,
            "alwaysOn",
            failCommands=["findAndModify"],
            blockConnection=True,
            blockTimeMS=HUNG_MS,
            appName="hung-queue",
        ):
            took, why = run.turns_not_ready(caplog)
            assert why.startswith("deployment degraded: NetworkTimeout"), why
            assert took < HUNG_MS / 1000, "within the reply bound, not when the server answers"
        run.recovers(2 * HUNG_MS / 1000)


def test_stop_returns_within_drain_and_stop_seconds_while_the_deployment_does_not_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A step still running after the drain, and then no command answered (as when the network drops every
    packet): the release of its claim cannot get through, and `stop` still returns within drain + stop
    seconds, naming the execution it could not hand back."""
    gate, running = threading.Event(), threading.Event()
    app = App("held")
    app.chart(HELD)

    @app.action("hold")
    def hold(ctx: ActionContext) -> ActionResult:
        running.set()
        gate.wait(30)
        return ActionResult()

    with FakeMongod() as server, MongoClient(server.url) as admin:
        seam = open_seam(server.url, "harel_blackholed", "blackholed")
        worker = seam.worker(app, concurrency=1, drain_seconds=0.5, stop_seconds=1.0)
        start_execution(seam.store, seam.transport, app, "held", execution_id="h")
        send_event(seam.store, seam.transport, app, "h", "go")
        worker.start()
        try:
            assert running.wait(10), "the step started"
            with fail_command(
                admin,
                "alwaysOn",
                failCommands=["update", "findAndModify", "delete", "find", "aggregate", "insert"],
                blockConnection=True,
                blockTimeMS=20_000,
            ):
                began = time.monotonic()
                with caplog.at_level(logging.ERROR, logger="harel.worker"):
                    worker.stop()
                took = time.monotonic() - began
                gate.set()
        finally:
            gate.set()
            seam.close()
    assert took < 0.5 + 1.0 + 1.0, f"stop took {took:.1f}s"
    [named] = [r for r in caplog.records if "did not answer the stop's releases" in r.getMessage()]
    assert named.executions == ["h"]  # type: ignore[attr-defined]
