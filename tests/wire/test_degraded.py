"""A degraded deployment is an error, never a hang. A deployment that lost its majority: a worker turns
not-ready within its commands' deadline (`op_timeout_seconds`, which bounds the wait for the majority too), names
why in one log line, and turns ready again when the majority is back. A primary that stops answering: the same
within that deadline. A partition that drops packets: commits stop for little more than the partition and one
deadline, and every event still takes effect once."""

from __future__ import annotations

import itertools
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
from harel.executions.fields import EXECUTIONS
from harel.metrics import Metrics
from harel.serve import Probes
from harel.worker import Worker
from tests.fake_mongod.fail_command import fail_command
from tests.fake_mongod.server import FakeMongod
from tests.wire.in_process import (
    Seam,
    bump,
    loaded,
    open_seam,
    queue_tally,
    start_tally,
    tally_app,
)
from tests.wire.partition import PartitionProxy
from tests.wire.processes import wait_until

pytestmark = pytest.mark.wire

# The worker's deadline on each command, under a third of the tests' 1 s lease.
OP_TIMEOUT_SECONDS = 0.3
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
    worker = seam.worker(tally.app, concurrency=1, lease_seconds=1.0, op_timeout_seconds=OP_TIMEOUT_SECONDS)
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
    with FakeMongod() as server, bumped(server.url, "degraded") as run:
        server.withhold_write_concern()  # the claim of the bump is written, its acknowledgement withheld
        try:
            took, why = run.turns_not_ready(caplog)
            # the deadline went to the server as maxTimeMS; its expiry while waiting for the majority is a
            # write-concern timeout, or, when the client's own clock runs out first (a loaded machine's round
            # trip eats the margin PyMongo keeps), a network timeout: either is the deadline reached
            assert why.startswith(
                ("deployment degraded: WTimeoutError", "deployment degraded: NetworkTimeout")
            ), why
            assert took < 10 * OP_TIMEOUT_SECONDS, "within a few deadlines, not a hang"
        finally:
            server.release_write_concern()
        run.recovers(10.0)


def test_a_worker_is_not_ready_while_the_primary_does_not_answer_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        FakeMongod() as server,
        MongoClient(server.url) as admin,
        bumped(server.url, "hung") as run,
    ):
        # Every claim of the worker's queue client is held at the server far past the deadline.
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
            assert took < HUNG_MS / 1000, "within the deadline, not when the server answers"
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


DB_NAME = "harel_partitioned"
PARTITION_SECONDS = 4.0
# An operation the partition swallows ends at its deadline, at most `op_timeout_seconds` after it was sent (the
# partition's start, or up to an idle poll later); the next claim and commit then go through. 2 s covers that
# poll (0.5 s at most), a new connection, and the read that settles a commit whose reply was lost.
GAP_MARGIN_SECONDS = 2.0
STREAM_EXECUTIONS = 6


@dataclass
class CommitLog:
    """When the deployment's commits happened (monotonic), read on a client that goes round the partition: the
    total of the executions' versions, polled; each rise is a commit."""

    times: list[float]

    def longest_gap(self, since: float) -> float:
        times = [t for t in self.times if t >= since]
        return max(later - earlier for earlier, later in itertools.pairwise(times))


def test_a_partition_that_drops_packets_delays_commits_by_little_more_than_itself() -> None:
    """Two workers behind a proxy that, for 4 s, discards every message both ways with the connections kept open,
    while events keep arriving: each command the partition swallowed ends at its deadline (`op_timeout_seconds`,
    not the 30 s reply bound), so commits resume about a deadline after the partition began, and every event
    takes effect once."""
    tally = tally_app()
    stop = threading.Event()
    with FakeMongod() as server, PartitionProxy(("127.0.0.1", server.port)).running() as proxy:
        feeder = open_seam(server.url, DB_NAME, "feeder")
        seams = [open_seam(proxy.url(), DB_NAME, f"partitioned-{n}") for n in range(2)]
        workers = [seam.worker(tally.app, concurrency=2) for seam in seams]
        ids = [f"tally-{n}" for n in range(STREAM_EXECUTIONS)]
        for execution_id in ids:
            queue_tally(feeder, tally, execution_id)
        sent = dict.fromkeys(ids, 0)
        commits = CommitLog([])

        def feed() -> None:
            for number in itertools.count():
                if stop.wait(0.02):
                    return
                execution_id = ids[number % len(ids)]
                bump(feeder, tally, execution_id, f"bump-{number}")
                sent[execution_id] += 1

        def watch() -> None:
            executions = feeder.clients[0][DB_NAME][EXECUTIONS]
            last = None
            while not stop.wait(0.01):
                total = sum(found["version"] for found in executions.find({}, {"version": 1}))
                if total != last:
                    commits.times.append(time.monotonic())
                    last = total

        threads = [threading.Thread(target=feed), threading.Thread(target=watch)]
        for worker in workers:
            worker.start()
        for thread in threads:
            thread.start()
        try:
            wait_until(lambda: len(commits.times) > 20, 10.0, "commits to flow")
            began = time.monotonic()
            proxy.partition()
            time.sleep(PARTITION_SECONDS)  # the partition itself
            proxy.heal()
            healed_sent = dict(sent)
            wait_until(
                lambda: all(count_of(feeder, i) >= healed_sent[i] for i in ids),
                30.0,
                "the events sent until the partition healed to take effect",
            )
            gap = commits.longest_gap(since=began - 0.5)
            stop.set()
            for thread in threads:
                thread.join()
            wait_until(
                lambda: all(min(effects_of(feeder, i)) >= sent[i] for i in ids),
                30.0,
                "every event and its relayed consequence to take effect",
            )
            effects = {i: effects_of(feeder, i) for i in ids}
        finally:
            stop.set()
            for worker in workers:
                worker.stop(drain_seconds=2)
            for seam in (*seams, feeder):
                seam.close()
    assert proxy.dropped > 0, "the partition dropped the commands in flight"
    bound = PARTITION_SECONDS + workers[0].config.op_timeout_seconds + GAP_MARGIN_SECONDS
    assert gap <= bound, (
        f"no commit for {gap:.1f}s across a {PARTITION_SECONDS:g}s partition (bound {bound:g}s)"
    )
    assert effects == {i: (sent[i], sent[i]) for i in ids}, "every event took effect once, relayed once"


def count_of(seam: Seam, execution_id: str) -> int:
    return int(loaded(seam, execution_id).context.get("count", 0))


def effects_of(seam: Seam, execution_id: str) -> tuple[int, int]:
    """The bumps the tally applied, and the `bumped` its sink received from it."""
    return count_of(seam, execution_id), int(loaded(seam, f"{execution_id}-sink").context.get("received", 0))
