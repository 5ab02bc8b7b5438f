"""The worker process: health endpoints first, then connect and check, then work until SIGTERM, then drain."""

from __future__ import annotations

import logging
import signal
import threading
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


@dataclass
class Stop:
    """What SIGTERM and SIGINT do: while the process is starting (connecting, checking), interrupt it; once
    its worker runs, set `requested` for a graceful drain."""

    requested: threading.Event = field(default_factory=threading.Event)
    starting: bool = True


def stop_on_signals(*, starting: bool) -> Stop:
    """Install the handlers of SIGTERM and SIGINT (instead of being killed) and return what they do;
    `starting` when a signal should interrupt what runs until `Stop.starting` is cleared."""
    stop = Stop(starting=starting)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.starting:
            log.info("signal received while starting; stopping", extra={"signal": name})
            raise StoppedStarting(name)
        log.info("signal received, draining", extra={"signal": name})
        stop.requested.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
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
        except StoppedStarting:
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
        stop.requested.wait()
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
