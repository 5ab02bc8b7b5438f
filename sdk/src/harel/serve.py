"""The worker process: health endpoints first, then connect and check, then work until SIGTERM, then drain."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from harel.app import App, load_app
from harel.backend import Backend, open_backend
from harel.connection import Status
from harel.health import HealthServer
from harel.metrics import Metrics
from harel.sent import SCRAPE, CommandCounter, sending
from harel.smoke import register_smoke
from harel.stats import DeploymentStats
from harel.worker import Worker, WorkerConfig

log = logging.getLogger("harel.serve")


def build_app(app_spec: str | None = None, charts_dir: str | Path | None = None, *, runs: bool = True) -> App:
    """The user's App (`package.module:app`) and/or a directory of YAML charts, plus the smoke chart. An App
    that `runs` (a worker's) must register every action and guard its charts name; a client's need not."""
    app = load_app(app_spec) if app_spec else App()
    if charts_dir is not None:
        app.charts_dir(charts_dir)
    register_smoke(app)
    if runs:
        app.validate()
    return app


class Probes:
    """/healthz: alive while connecting, then while the worker's loops turn.
    /readyz: not ready while connecting and checking the deployment (a refused deployment never gets a
    worker), while the store is unreachable, or while draining — so no traffic goes to a stopping pod.
    /metrics: the worker's own metrics, and the deployment's statistics read on scrape (`harel.stats`)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.worker: Worker | None = None
        self.stats: DeploymentStats | None = None

    def alive(self) -> bool:
        return self.worker is None or self.worker.alive()

    def ready(self) -> tuple[bool, str]:
        if self.worker is None:
            return False, "connecting and running the start-up checks"
        if self.worker.stopping:
            return False, "draining"
        if self.worker.degraded is not None:
            return False, f"deployment degraded: {self.worker.degraded}"
        return True, "ready"

    def scrape(self) -> bytes:
        self.metrics.ready.set(1 if self.ready()[0] else 0)
        if self.stats is not None:
            with sending(SCRAPE):
                self.stats.refresh()
        return self.metrics.exposition()


class StoppedStarting(BaseException):
    """SIGTERM or SIGINT before the worker started: connecting and checking are given up. A BaseException,
    as KeyboardInterrupt is, so that no `except Exception` in the driver's connecting swallows it."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


# How soon the main thread notices SIGTERM or SIGINT once its worker runs (the handler only records it).
SIGNAL_POLL_SECONDS = 0.05


@dataclass
class Stop:
    """What SIGTERM and SIGINT do: while the process is starting (connecting, checking), interrupt it; once
    its worker runs, record the signal for `wait`, which returns for a graceful drain.

    The handler takes no lock and writes nothing: it runs on the main thread between two bytecodes, possibly
    in the middle of what it would call (inside an Event's wait, holding the lock that setting the Event
    takes: it would wait for it forever; inside a log line). It appends to a list, which the main thread
    polls, and the main thread logs."""

    received: list[int] = field(default_factory=list)
    starting: bool = True

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.starting:
            raise StoppedStarting(signal.Signals(signum).name)
        self.received.append(signum)

    def wait(self) -> None:
        """Until SIGTERM or SIGINT (at once when one came already), then say that the drain begins."""
        while not self.received:
            time.sleep(SIGNAL_POLL_SECONDS)
        log.info("signal received, draining", extra={"signal": signal.Signals(self.received[0]).name})


def stop_on_signals(*, starting: bool) -> Stop:
    """Install the handlers of SIGTERM and SIGINT (instead of being killed) and return what they do;
    `starting` when a signal should interrupt what runs until `Stop.starting` is cleared."""
    stop = Stop(starting=starting)
    signal.signal(signal.SIGTERM, stop.on_signal)
    signal.signal(signal.SIGINT, stop.on_signal)
    return stop


def start_worker(backend: Backend, app: App, config: WorkerConfig, metrics: Metrics) -> Worker:
    """Publish the App's charts to the deployment's catalog, then start a worker on it."""
    backend.catalog.publish(app.charts)
    worker = Worker(
        backend.store, backend.transport, app, config=config, metrics=metrics, heartbeats=backend.heartbeats
    )
    worker.start()
    return worker


def serve(
    url: str,
    app: App,
    config: WorkerConfig,
    *,
    http_port: int | None,
    http_host: str = "0.0.0.0",
    allow_standalone: bool = False,
    deadline: float | None = 60.0,
    zones: Sequence[str] = (),
) -> int:
    """Run one worker until SIGTERM or SIGINT, then drain within `config.drain_seconds`; on a partitioned
    deployment it looks for work in `zones` only (all of them when empty).

    Raises ConnectionFailed when the deployment does not answer before `deadline` (None: wait for it
    indefinitely, /readyz saying not ready meanwhile) and DeploymentRefused when the start-up checks find
    errors — before any data is touched.
    """
    metrics = Metrics()
    probes = Probes(metrics)
    stop = stop_on_signals(starting=True)
    health = None
    if http_port is not None:
        health = HealthServer(
            http_port, alive=probes.alive, ready=probes.ready, metrics=probes.scrape, host=http_host
        )
        health.start()
    try:
        try:
            backend = open_backend(
                url,
                allow_standalone=allow_standalone,
                deadline=deadline,
                listeners=[CommandCounter(metrics)],
                zones=zones,
            )
        except StoppedStarting as stopped:
            log.info("signal received while starting; stopping", extra={"signal": stopped.signal_name})
            return 0
        stop.starting = False
        if backend.report is not None:
            for finding in backend.report.findings:
                if finding.status is not Status.OK:
                    log.warning(
                        "start-up check",
                        extra={
                            "check": finding.check,
                            "status": finding.status.value,
                            "found": finding.found,
                        },
                    )
        probes.worker = worker = start_worker(backend, app, config, metrics)
        probes.stats = DeploymentStats(
            backend.client,
            backend.db_name,
            metrics,
            worker.clock,
            config.heartbeat_seconds,
            partitions=backend.partitions,
        )
        stop.wait()
        worker.stop()
    finally:
        # /metrics reads the deployment: the endpoints stop before the client closes
        if health is not None:
            health.stop()
    # Closing the client ends its sessions on the deployment: bounded, as the worker's own stop is.
    closing = threading.Thread(target=backend.close, name="harel-closing", daemon=True)
    closing.start()
    closing.join(config.stop_seconds)
    if closing.is_alive():
        log.error("the deployment did not answer while the client closed; exiting without waiting for it")
    return 0
