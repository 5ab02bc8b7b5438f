"""`harel dev`: your app with a worker on a development store that other terminals reach, until Ctrl-C.

One process runs the local server of harel-dev (`harel_dev.server`, a one-member replica set on loopback)
and a worker for the App's charts against it, and records the store's URL in `.harel/dev.json` so that
`harel start/send/status/trace/...` run in the same folder (or below it) use it without flags
(`harel.cli.devstate`). No Docker, no MongoDB. A development store: no authentication, no replication, and
no durability unless given a data file. harel-dev (sdk/dev) is imported when the command runs: without it,
`harel dev` is one line saying how to install it (DevServerNotInstalled).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.text import Text

from harel.app import App
from harel.backend import open_backend
from harel.cli.devstate import DevState
from harel.cli.exits import Exit, epilog
from harel.cli.logsetup import configure
from harel.cli.options import (
    app_options,
    async_timeout_option,
    concurrency_option,
    json_option,
    worker_config,
)
from harel.cli.output import Output, pairs
from harel.cli.settings import URL_FILE_VARIABLE, URL_VARIABLE
from harel.devdist import requires_harel_dev
from harel.metrics import Metrics
from harel.serve import Stop, start_worker, stop_on_signals
from harel.worker import WorkerConfig

if TYPE_CHECKING:
    from harel_dev.server import LocalServer


@click.command(
    short_help="run your app with a worker on a local development store, until Ctrl-C",
    epilog=epilog(Exit.USAGE),
)
@app_options(runs=True)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    metavar="PORT",
    help="the store's port on 127.0.0.1; 0 takes a free one",
)
@click.option(
    "--data",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="keep the store's data in FILE across runs (saved shortly after changes and at stop); without it "
    "the data is gone when harel dev stops",
)
@concurrency_option
@async_timeout_option
@json_option(help="print what runs where as one JSON document, and log JSON lines")
def dev(
    app: App, port: int, data: Path | None, concurrency: int, async_timeout: float | None, out: Output
) -> int:
    """Run your app (--app MODULE:APP and/or --charts DIR) with a worker on a local development store, until
    Ctrl-C. Other harel commands run in this folder or below it use the store without --url.

    The store is harel-dev's local server on 127.0.0.1: one member, no authentication, no replication, for
    development only, never for production. Its data lives in memory unless --data FILE keeps it.

    Logs go to stderr: HAREL_LOG_LEVEL (default INFO: one line per applied event, with its duration) and
    HAREL_LOG_FORMAT (text or json; default text)."""
    with requires_harel_dev("the local development server"):
        from harel_dev.server import LocalServer
    if out.json:
        configure("dev", json_lines=True)
    config = worker_config(concurrency=concurrency, async_timeout=async_timeout)
    stop = stop_on_signals(
        starting=False
    )  # from here on Ctrl-C ends the run below in order, whenever it comes
    state = DevState.claim(Path.cwd())
    try:
        server = LocalServer(port=port, data=data).start()
        try:
            serve_app(out, server, app, config, state, stop)
        finally:
            server.stop()
    finally:
        state.release()
    if not out.json:
        kept = f"the data is in {server.data}" if server.data else "its data was in memory and is gone"
        out.show(f"harel dev: stopped; {kept}")
    return Exit.OK


def serve_app(
    out: Output, server: LocalServer, app: App, config: WorkerConfig, state: DevState, stop: Stop
) -> None:
    """A worker on the server until SIGTERM or SIGINT (`stop`); the state file says where the store is once
    the worker runs (so a command that finds it finds the App's charts published too)."""
    backend = open_backend(server.url)
    try:
        worker = start_worker(backend, app, config, Metrics())
        try:
            state.publish(server.url, server.data)
            announce(out, server, worker.charts, state.path)
            stop.wait()
        finally:
            worker.stop()
    finally:
        backend.close()


def announce(out: Output, server: LocalServer, charts: list[str], state_file: Path) -> None:
    if out.json:
        out.document(
            {
                "url": server.url,
                "data": str(server.data) if server.data else None,
                "charts": charts,
                "state_file": str(state_file),
                "pid": os.getpid(),
            }
        )
        return
    data = (
        f"{server.data}: saved shortly after changes and at stop; a crash loses the last changes"
        if server.data
        else "in memory only: gone when harel dev stops (--data FILE keeps it)"
    )
    out.show(
        Text("harel dev: your app and a worker on a development store, until Ctrl-C", style="bold"),
        pairs(
            [
                ("store", server.url),
                ("", Text("one member, no authentication, no replication: never for production", "yellow")),
                ("data", data),
                ("charts", ", ".join(_shown(chart) for chart in charts) or "none"),
                ("commands", f"harel commands run in {state_file.parent.parent} or below use this store"),
            ]
        ),
    )
    for variable in (URL_VARIABLE, URL_FILE_VARIABLE):
        if os.environ.get(variable):
            out.note(f"{variable} is set here: commands where it is set use that deployment, not this store")


def _shown(chart: str) -> str:
    chart_id, _, version = chart.rpartition("@")
    return f"{chart_id} v{version}"


COMMANDS = (dev,)
