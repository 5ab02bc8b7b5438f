"""The worker process: wire the application to the backend, serve health endpoints, drain on SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from harel.app import App, load_app
from harel.backend import Backend
from harel.health import HealthServer
from harel.metrics import Metrics
from harel.smoke import register_smoke
from harel.worker import Worker, WorkerConfig

log = logging.getLogger("harel.serve")


def build_app(app_spec: str | None = None, charts_dir: str | Path | None = None) -> App:
    """The user's App (`package.module:app`) and/or a directory of YAML charts, plus the smoke chart."""
    app = load_app(app_spec) if app_spec else App()
    if charts_dir is not None:
        app.charts_dir(charts_dir)
    register_smoke(app)
    app.validate()
    return app


@dataclass
class Readiness:
    """Ready while the store answers; a worker only exists once the start-up checks passed (`open_backend`
    refuses otherwise). Not ready while draining, so no new traffic is routed to a stopping pod."""

    worker: Worker

    def __call__(self) -> tuple[bool, str]:
        if self.worker.stopping:
            return False, "draining"
        if not self.worker.connected:
            return False, "store or queue unreachable"
        return True, "ready"


def serve(backend: Backend, app: App, config: WorkerConfig, http_port: int | None) -> int:
    """Run one worker until SIGTERM or SIGINT, then drain within `config.drain_seconds`. Returns an exit code."""
    metrics = Metrics()
    worker = Worker(
        backend.store, backend.transport, app, config=config, metrics=metrics, heartbeats=backend.heartbeats
    )
    health = None
    if http_port is not None:
        health = HealthServer(
            http_port, alive=worker.alive, ready=Readiness(worker), metrics=metrics.exposition
        )
        health.start()
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal received, draining", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker.start()
    stop.wait()
    worker.stop()
    if health is not None:
        health.stop()
    backend.close()
    return 0
