"""`harel worker`: run the charts of an App against a deployment until SIGTERM, then drain."""

from __future__ import annotations

import logging

import click

from harel.app import App
from harel.cli.exits import Exit, epilog
from harel.cli.logsetup import configure
from harel.cli.options import (
    POSITIVE_SECONDS,
    SECONDS,
    app_options,
    async_timeout_option,
    concurrency_option,
    connection_options,
    json_option,
    op_timeout_option,
    worker_config,
)
from harel.cli.output import Output
from harel.cli.settings import Connection
from harel.serve import serve
from harel.smoke import SMOKE_CHART_ID
from harel.transport.base import DEFAULT_LEASE_SECONDS
from harel.worker import WorkerConfig

log = logging.getLogger("harel.cli")


@click.command(
    short_help="run a worker: claim events, step them, relay, fire timers",
    epilog=epilog(Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED),
)
@app_options(runs=True)
@concurrency_option
@click.option(
    "--http-port",
    type=click.IntRange(0, 65535),
    metavar="PORT",
    default=8080,
    show_default=True,
    envvar="HAREL_HTTP_PORT",
    show_envvar=True,
    help="port of /healthz, /readyz and /metrics; 0 turns them off",
)
@click.option(
    "--http-host",
    default="0.0.0.0",
    metavar="ADDRESS",
    show_default=True,
    envvar="HAREL_HTTP_HOST",
    show_envvar=True,
    help="address the HTTP endpoints listen on (all interfaces: probes come from outside the container)",
)
@click.option(
    "--drain-seconds",
    type=SECONDS,
    default=20.0,
    show_default=True,
    envvar="HAREL_DRAIN_SECONDS",
    show_envvar=True,
    help="on SIGTERM, how long in-flight events may finish before they are released",
)
@click.option(
    "--lease-seconds",
    type=POSITIVE_SECONDS,
    default=DEFAULT_LEASE_SECONDS,
    show_default=True,
    envvar="HAREL_LEASE_SECONDS",
    show_envvar=True,
    help="how long a claimed event is reserved before another worker may take it",
)
@click.option(
    "--max-step-seconds",
    type=POSITIVE_SECONDS,
    default=WorkerConfig.max_step_seconds,
    show_default=True,
    envvar="HAREL_MAX_STEP_SECONDS",
    show_envvar=True,
    help="how long one step's actions may run, the lease extended meanwhile; a longer step fails its attempt",
)
@async_timeout_option
@op_timeout_option
@click.option(
    "--zones",
    default="",
    metavar="NAME,...",
    envvar="HAREL_ZONES",
    show_envvar=True,
    help="on a partitioned deployment, the zones (of `harel partitions show`) to look for work in, for "
    "example one worker group per shard; default: all",
)
@click.option("--no-trace", is_flag=True, help="do not record execution traces (the smoke check needs them)")
@connection_options
@json_option(help="log JSON lines (HAREL_LOG_FORMAT=json)")
def worker(
    app: App,
    concurrency: int,
    http_port: int,
    http_host: str,
    drain_seconds: float,
    lease_seconds: float,
    max_step_seconds: float,
    async_timeout: float | None,
    op_timeout: float | None,
    zones: str,
    no_trace: bool,
    connection: Connection,
    out: Output,
) -> int:
    """Run a worker: claim events for the App's charts, step them, relay, fire timers, until SIGTERM; then
    drain. `async def` actions and guards run on the worker's event loop, each for at most --async-timeout.

    Logs go to stderr: HAREL_LOG_LEVEL (DEBUG, INFO, WARNING, ERROR; default INFO: one line per applied
    event with its execution, event, states and duration) and HAREL_LOG_FORMAT (text or json; default json
    unless stderr is a terminal). With --deadline 0 it waits for the deployment indefinitely, /readyz
    answering "not ready" meanwhile."""
    if out.json:
        configure("worker", json_lines=True)
    if connection.embedded:
        log.warning(
            "worker on %s: its store lives inside this process, so no other process can reach it; "
            "give --url or HAREL_MONGO_URL a mongodb:// deployment, or run `harel dev` for a local one",
            connection.url,
        )
    if {chart.id for chart in app.charts} == {SMOKE_CHART_ID}:
        log.warning(
            "worker serves only the built-in smoke chart %s: give --app package.module:app or --charts DIR "
            "for your own charts",
            SMOKE_CHART_ID,
        )
    config = worker_config(
        concurrency=concurrency,
        drain_seconds=drain_seconds,
        lease_seconds=lease_seconds,
        max_step_seconds=max_step_seconds,
        async_timeout=async_timeout,
        op_timeout=op_timeout,
        trace=not no_trace,
    )
    return serve(
        connection.url,
        app,
        config,
        http_port=http_port or None,
        http_host=http_host,
        allow_standalone=connection.dev,
        deadline=connection.deadline,
        zones=[name.strip() for name in zones.split(",") if name.strip()],
    )


COMMANDS = (worker,)
