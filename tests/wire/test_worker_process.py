"""The `harel worker` process over sockets: health endpoints (not ready while it waits for the deployment), and
SIGTERM mid-run losing nothing.

The deployment is the fake replica set in its own process (see tests/fake_mongod/README.md): real PyMongo
clients, real worker processes, real signals. Nothing here has run against a real replica set unless
HAREL_TEST_MONGO_URL was set for the smoke tests of the wire tier.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from harel.client import send_event, start_execution
from harel.model import Execution, ExecutionStatus
from harel.smoke import REGIONS, check, gather
from harel.store.mongo import MongoStore
from harel.transport.mongo import MongoTransport
from tests.fake_mongod.fail_command import fail_command
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, Deployment, FakeProcess
from tests.wire import shutdown_app
from tests.wire.processes import WorkerProcesses, wait_until, with_app_name

pytestmark = pytest.mark.wire

HAREL = str(Path(sys.executable).with_name("harel"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WorkerProcess:
    def __init__(self, url: str, *extra: str) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "HAREL_LOG_FORMAT": "json",
            "HAREL_HTTP_PORT": str(self.port),
            "HAREL_HTTP_HOST": "127.0.0.1",
        }
        self.process = subprocess.Popen(
            [HAREL, "worker", "--url", url, "--drain-seconds", "3", *extra],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"worker exited with {self.process.returncode}: {self.process.stderr.read()}"
                )
            try:
                if self.get("/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("worker never became ready")

    def terminate(self, timeout: float = 15) -> tuple[int, list[dict[str, object]]]:
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        lines = [json.loads(line) for line in self.process.stderr.read().splitlines() if line.startswith("{")]
        return code, lines

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)
        self.process.stderr.close()


@pytest.fixture
def workers(fake_rs_process: FakeProcess) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.kill()


def test_health_endpoints_and_structured_logs(
    fake_rs_process: FakeProcess, workers: list[WorkerProcess]
) -> None:
    worker = WorkerProcess(fake_rs_process.url)
    workers.append(worker)
    worker.wait_ready()
    assert worker.get("/healthz") == (200, "ok\n")
    assert worker.get("/readyz") == (200, "ready\n")
    status, metrics = worker.get("/metrics")
    assert (
        status == 200
        and "harel_events_processed_total" in metrics
        and "harel_timer_lateness_seconds" in metrics
    )
    with MongoClient(fake_rs_process.url) as client:
        beats = list(client.harel.workers.find())
    assert len(beats) == 1 and beats[0]["pid"] == worker.process.pid
    code, logs = worker.terminate()
    assert code == 0
    messages = [entry["msg"] for entry in logs]
    assert "worker started" in messages and "worker stopped" in messages
    assert all({"ts", "level", "logger", "msg"} <= set(entry) for entry in logs)
    with MongoClient(fake_rs_process.url) as client:
        assert client.harel.workers.count_documents({}) == 0, "a drained worker removes its heartbeat"


def test_sigterm_mid_run_loses_nothing(fake_rs_process: FakeProcess, workers: list[WorkerProcess]) -> None:
    """SIGTERM reaches the only worker once the smoke run's fork is stored (its three children exist), and
    before the run could end (the regions' timers are 1 s, the root's another 1 s after the join): the
    worker drains and exits 0 with the root still running; a new worker finishes the run, which passes."""
    first = WorkerProcess(fake_rs_process.url)
    workers.append(first)
    first.wait_ready()
    smoke = subprocess.Popen(
        [HAREL, "smoke", "--url", fake_rs_process.url, "--timeout", "60", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with MongoClient(fake_rs_process.url) as client:
            store = MongoStore(client)

            def forked_root() -> Execution | None:
                found = client.harel.executions.find_one({"parent_id": None, "status": "running"}, {"_id": 1})
                root = store.load(found["_id"]) if found else None
                return root if root is not None and len(root.children) == len(REGIONS) else None

            wait_until(lambda: forked_root() is not None, 30, "the smoke run's fork")
            code, _ = first.terminate()
            assert code == 0
            root = forked_root()
            assert root is not None and root.status is ExecutionStatus.RUNNING, (
                "the signal came after the fork, and the run was not over when the worker exited"
            )
            assert client.harel.executions.count_documents({"parent_id": root.id}) == len(REGIONS)
        second = WorkerProcess(fake_rs_process.url)
        workers.append(second)
        out, err = smoke.communicate(timeout=90)
    finally:
        if smoke.poll() is None:
            smoke.kill()
    report = json.loads(out)
    assert smoke.returncode == 0, (report["failures"], err)
    assert report["root_id"] == root.id
    store = MongoStore(MongoClient(fake_rs_process.url))
    try:
        finished = store.load(report["root_id"])
        assert finished is not None and finished.status is ExecutionStatus.COMPLETED
        assert check(gather(store, report["root_id"], 60)).passed
    finally:
        store.close()


def test_worker_refuses_a_standalone_without_dev(fake_mongod_process: Callable[..., FakeProcess]) -> None:
    standalone = fake_mongod_process("--standalone")
    result = subprocess.run(
        [HAREL, "worker", "--url", standalone.url, "--http-port", "0", "--deadline", "10"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 4, result.stderr
    assert "StandaloneDeploymentError" in result.stderr or "standalone" in result.stderr.lower()


BUSY_APP = "busy-relays"
SEND_BLOCK_MS = 20  # each update of the worker's takes this long: 200 pings keep its relay busy for 4 s


def test_sigterm_while_relays_are_busy_stops_every_thread_before_the_client_closes(
    replica_set: Deployment, admin: MongoClient[Any], worker_processes: WorkerProcesses
) -> None:
    """SIGTERM reaches the worker while it relays a fan-out of 200 pings (each of its updates held 20 ms by
    the fail point, so the relay outlasts the 1 s drain): its threads stop between sends before the client
    closes, so it exits 0 without a word about a closed client, a traceback or a thread left behind; the
    pings it had not sent are delivered by the next worker, each once, in order."""
    store, transport = MongoStore(admin, "harel"), MongoTransport(admin, "harel", watch=False)
    worker = worker_processes.harel_worker(
        with_app_name(replica_set.url, BUSY_APP),
        "--app",
        "tests.wire.shutdown_app:fanout",
        "--drain-seconds",
        "1",
    )
    worker.wait_registered(admin)
    app = shutdown_app.fanout
    start_execution(store, transport, app, "shutdown.sink", execution_id="sink")
    start_execution(store, transport, app, "shutdown.fanout", execution_id="fan")

    def pings() -> list[int]:
        sink = store.load("sink")
        return list(sink.context.get("seen", [])) if sink is not None else []

    with fail_command(
        admin,
        "alwaysOn",
        failCommands=["update"],
        blockConnection=True,
        blockTimeMS=SEND_BLOCK_MS,
        appName=BUSY_APP,
    ):
        send_event(store, transport, app, "fan", "go", data={"to": "sink"})
        wait_until(lambda: len(pings()) >= 5, 60, "the first pings to arrive")
        code = worker.terminate()
    log = worker.log()
    assert code == 0, log
    assert len(pings()) < shutdown_app.PINGS, "the relay was still busy when the signal came"
    assert "after close" not in log and "Traceback" not in log, log
    levels = [json.loads(line)["level"] for line in log.splitlines() if line.startswith("{")]
    assert not {"error", "critical"} & set(levels), log
    worker_processes.harel_worker(replica_set.url, "--app", "tests.wire.shutdown_app:fanout")
    wait_until(lambda: len(pings()) >= shutdown_app.PINGS, 60, "every ping to arrive")
    assert pings() == list(range(shutdown_app.PINGS))


def waiting_for_its_deployment(port: int, workers: list[WorkerProcess]) -> WorkerProcess:
    """A worker started with --deadline 0 on a port nothing answers yet, once its first failed attempt is
    logged: it is in its wait."""
    worker = WorkerProcess(f"mongodb://127.0.0.1:{port}/?replicaSet=rs0", "--deadline", "0")
    workers.append(worker)
    assert worker.process.stderr is not None
    for line in worker.process.stderr:
        if line.startswith("{") and "not ready (attempt 1," in json.loads(line)["msg"]:
            return worker
    raise AssertionError(f"the worker exited with {worker.process.wait()} before its first attempt failed")


def test_a_worker_waiting_for_the_deployment_is_not_ready_until_it_answers(
    fake_mongod_process: Callable[..., FakeProcess], workers: list[WorkerProcess]
) -> None:
    """With --deadline 0 the worker waits for a deployment that is not there yet as long as it takes: meanwhile it
    is alive and /readyz says it is still connecting; once the set answers, it turns ready."""
    port = free_port()
    worker = waiting_for_its_deployment(port, workers)

    assert worker.get("/readyz") == (503, "connecting and running the start-up checks\n")
    assert worker.get("/healthz") == (200, "ok\n")
    status, metrics = worker.get("/metrics")
    assert status == 200 and "harel_worker_ready 0.0" in metrics

    fake_mongod_process("--port", str(port))
    worker.wait_ready(timeout=60)
    assert worker.get("/readyz") == (200, "ready\n")


def test_sigterm_while_the_worker_waits_for_its_deployment_stops_it_at_once_and_says_so(
    workers: list[WorkerProcess],
) -> None:
    """SIGTERM during start-up (here: waiting, with --deadline 0, for a deployment that is not there) gives up
    the connecting at once: exit 0, one line saying why, no traceback."""
    worker = waiting_for_its_deployment(free_port(), workers)
    assert worker.process.stderr is not None

    signalled = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    code = worker.process.wait(timeout=10)
    took = time.monotonic() - signalled
    rest = worker.process.stderr.read()

    assert code == 0 and took < 5, (code, took, rest)
    said = [json.loads(line)["msg"] for line in rest.splitlines() if line.startswith("{")]
    assert "signal received while starting; stopping" in said
    assert "Traceback" not in rest


# The burst below: SIGTERM after SIGTERM, as fast as this process can send them, for this long from the moment
# the worker waits for a signal. A drain of 3 s takes far less than the bound; a worker whose signal handler
# waits on a lock its own interrupted main thread holds never ends, so the bound only has to be finite.
SIGTERM_BURST_SECONDS = 1.0
BURST_EXIT_TIMEOUT = 120.0


def test_a_burst_of_sigterms_while_the_worker_waits_drains_it_once_and_it_exits(
    fake_rs_process: FakeProcess, worker_processes: WorkerProcesses
) -> None:
    """SIGTERM upon SIGTERM reaches the worker while its main thread waits for one: a signal that lands in the
    middle of that wait, or of the drain the first one started, must not stop the process from exiting.
    It drains once (one line saying so), exits 0, without a traceback."""
    worker = worker_processes.harel_worker(fake_rs_process.url, "--drain-seconds", "3")
    with MongoClient(fake_rs_process.url, **CLIENT_OPTIONS) as client:
        worker.wait_registered(client)  # started: its main thread is in (or about to enter) its wait

    sent = 0
    ends = time.monotonic() + SIGTERM_BURST_SECONDS
    while time.monotonic() < ends and worker.running():
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGTERM)
            sent += 1
    try:
        code = worker.process.wait(timeout=BURST_EXIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        worker.kill()
        raise AssertionError(
            f"the worker did not exit within {BURST_EXIT_TIMEOUT:.0f}s of {sent} SIGTERMs; its log ends:\n"
            + "\n".join(worker.log().splitlines()[-40:])
        ) from None

    log = worker.log()
    messages = [json.loads(line)["msg"] for line in log.splitlines() if line.startswith("{")]
    assert code == 0, log
    assert sent > 1, "the burst was one signal: nothing was tested"
    assert messages.count("signal received, draining") == 1, log
    assert "worker stopped" in messages, log
    assert "Traceback" not in log, log
