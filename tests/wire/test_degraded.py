"""A degraded deployment is an error, never a hang. A deployment that lost its majority: a worker turns
not-ready within its write bound, names why in one log line, and turns ready again when the majority is back.
A primary that stops answering: the same within the reply bound (`socketTimeoutMS`, which `connect` sets by
default)."""

from __future__ import annotations

import logging
import time

import pytest
from pymongo import MongoClient

from harel.client import send_event
from harel.metrics import Metrics
from harel.serve import Probes
from tests.fake_mongod.fail_command import fail_command
from tests.fake_mongod.server import FakeMongod
from tests.wire.in_process import open_seam, start_tally, tally_app
from tests.wire.processes import wait_until

pytestmark = pytest.mark.wire

WRITE_BOUND_MS = 300
REPLY_BOUND_MS = 300
HUNG_MS = 5_000


def test_a_worker_is_not_ready_while_writes_are_not_acknowledged_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tally = tally_app()
    with FakeMongod() as server:
        seam = open_seam(f"{server.url}&wTimeoutMS={WRITE_BOUND_MS}", "harel_degraded", "degraded")
        worker = seam.worker(tally.app, concurrency=1, lease_seconds=1.0)
        probes = Probes(Metrics())
        probes.worker = worker
        execution_id = start_tally(seam, tally, worker)
        send_event(seam.store, seam.transport, tally.app, execution_id, "bump", event_id="during")
        server.withhold_write_concern()  # the claim of the bump is written, its acknowledgement withheld
        worker.start()
        try:
            began = time.monotonic()
            with caplog.at_level(logging.ERROR, logger="harel.worker"):
                wait_until(lambda: not probes.ready()[0], 10.0, "the worker to turn not ready")
            took = time.monotonic() - began
            _, why = probes.ready()
            assert why.startswith("deployment degraded: WTimeoutError"), why
            assert took < 10 * WRITE_BOUND_MS / 1000, "within a few write bounds, not a hang"
            assert [r.getMessage() for r in caplog.records].count(
                "deployment degraded; not ready until it answers again"
            ) == 1, "one named line, not one per attempt"
            server.release_write_concern()
            wait_until(lambda: probes.ready()[0], 10.0, "the worker to turn ready again")
            assert probes.ready() == (True, "ready")
            wait_until(
                lambda: seam.store.load(execution_id).context.get("count") == 1,
                10.0,
                "the bump to take effect",
            )
        finally:
            server.release_write_concern()
            worker.stop(drain_seconds=2)
            seam.close()


def test_a_worker_is_not_ready_while_the_primary_does_not_answer_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tally = tally_app()
    with FakeMongod() as server, MongoClient(server.url) as admin:
        seam = open_seam(f"{server.url}&socketTimeoutMS={REPLY_BOUND_MS}", "harel_hung", "hung")
        worker = seam.worker(tally.app, concurrency=1, lease_seconds=1.0)
        probes = Probes(Metrics())
        probes.worker = worker
        execution_id = start_tally(seam, tally, worker)
        send_event(seam.store, seam.transport, tally.app, execution_id, "bump", event_id="during")
        try:
            # Every claim of the worker's queue client is held at the server far past the reply bound.
            with fail_command(
                admin,
                "alwaysOn",
                failCommands=["findAndModify"],
                blockConnection=True,
                blockTimeMS=HUNG_MS,
                appName="hung-queue",
            ):
                worker.start()
                began = time.monotonic()
                with caplog.at_level(logging.ERROR, logger="harel.worker"):
                    wait_until(lambda: not probes.ready()[0], 10.0, "the worker to turn not ready")
                took = time.monotonic() - began
                _, why = probes.ready()
                assert why.startswith("deployment degraded: NetworkTimeout"), why
                assert took < HUNG_MS / 1000, "within the reply bound, not when the server answers"
                assert [r.getMessage() for r in caplog.records].count(
                    "deployment degraded; not ready until it answers again"
                ) == 1, "one named line, not one per attempt"
            wait_until(lambda: probes.ready()[0], 2 * HUNG_MS / 1000, "the worker to turn ready again")
            wait_until(
                lambda: seam.store.load(execution_id).context.get("count") == 1,
                10.0,
                "the bump to take effect",
            )
        finally:
            worker.stop(drain_seconds=2)
            seam.close()
