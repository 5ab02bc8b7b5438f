"""`harel pause [--wait] | resume`: stop every live worker claiming and relaying, and start them again
(`harel.pausing`; a quiesced dump of a sharded cluster, docs/sharded-clusters.md)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import click
from rich.text import Text

from harel.cli.exits import Exit, epilog
from harel.cli.options import POSITIVE_SECONDS, connection_options, json_option
from harel.cli.output import Output, table
from harel.cli.partitions import database_option
from harel.cli.settings import Connection
from harel.connection import connect, redact
from harel.errors import InvalidArgument, PauseNotAcknowledged
from harel.pausing import MongoPauses, PauseStatus
from harel.worker import WorkerConfig

DEFAULT_TIMEOUT = 120.0
POLL_SECONDS = 1.0


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _show(out: Output, status: PauseStatus) -> None:
    rows = table("worker", "host", "pid", "paused")
    for worker in status.workers:
        paused = f"since {_when(worker.paused_at)}" if worker.paused_at is not None else "not yet"
        rows.add_row(worker.worker_id, worker.host or "-", str(worker.pid or "-"), paused)
    out.show(rows)
    waiting = len(status.waiting)
    if not status.workers:
        out.show(Text("no live worker"))
    elif waiting:
        out.show(
            Text(
                f"{len(status.acknowledged)} of {len(status.workers)} live worker(s) paused; {waiting} not yet"
            )
        )
    else:
        out.show(Text(f"all {len(status.workers)} live worker(s) paused"))


def _status_only(out: Output, status: PauseStatus) -> int:
    if out.json:
        out.document(status.document())
    elif status.request is None:
        out.show(Text("no pause stands"))
    else:
        out.show(Text(f"pause requested at {_when(status.request.requested_at)} ({status.request.reason})"))
        _show(out, status)
    return Exit.OK


def _refuse_embedded(connection: Connection) -> None:
    if connection.embedded:
        raise InvalidArgument(
            "--url", f"{connection.url} is an in-process store: no worker of another process can hear a pause"
        )


@click.command(
    short_help="pause every live worker: no claim, no relay, until `harel resume`",
    epilog=epilog(Exit.USAGE, Exit.UNREACHABLE, Exit.TIMED_OUT),
)
@click.option(
    "--reason",
    default="harel pause",
    show_default=True,
    metavar="TEXT",
    help="why, recorded with the pause (a pause that stands keeps its own)",
)
@click.option(
    "--status",
    "only_status",
    is_flag=True,
    help="request nothing: show whether a pause stands and which live workers acknowledged it",
)
@click.option(
    "--wait",
    is_flag=True,
    help="wait until every live worker has acknowledged; exit 6 if one has not by --timeout",
)
@click.option(
    "--timeout",
    type=POSITIVE_SECONDS,
    default=DEFAULT_TIMEOUT,
    show_default=True,
    metavar="SECONDS",
    help="with --wait: give up after this long (exit 6); the pause stands",
)
@database_option
@connection_options
@json_option
def pause(
    reason: str,
    only_status: bool,
    wait: bool,
    timeout: float,
    database: str,
    connection: Connection,
    out: Output,
) -> int:
    """Ask every worker to pause: each stops claiming once it hears of it (its next heartbeat, every
    5 s), lets the steps in flight commit and relay, stops its background relay and acknowledges. A worker
    that starts meanwhile starts paused. Prints the live workers, which acknowledged and which not yet.
    `harel resume` lifts the pause; --status only looks."""
    _refuse_embedded(connection)
    if only_status and wait:
        raise click.UsageError("--status requests nothing to wait for: give one of --status and --wait")
    client = connect(connection.url, deadline=connection.deadline)
    try:
        pauses = MongoPauses(client, database, heartbeat_seconds=WorkerConfig.heartbeat_seconds)
        if only_status:
            return _status_only(out, pauses.status())
        request = pauses.request(reason)
        if not out.json:
            out.note(
                f"harel pause: requested at {_when(request.requested_at)} ({request.reason}) on {redact(connection.url)}"
            )
        status = pauses.status()
        deadline = time.monotonic() + timeout
        while wait and not status.complete and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            pauses.flag()  # a worker that started since
            status = pauses.status()
    finally:
        client.close()
    if out.json:
        out.document(status.document())
    else:
        _show(out, status)
    if wait and not status.complete:
        raise PauseNotAcknowledged([w.worker_id for w in status.waiting], timeout)
    return Exit.OK


@click.command(
    short_help="lift the pause: the workers claim and relay again",
    epilog=epilog(Exit.USAGE, Exit.UNREACHABLE),
)
@database_option
@connection_options
@json_option
def resume(database: str, connection: Connection, out: Output) -> int:
    """Lift the pause `harel pause` (or a backup) requested: every worker claims and relays again at its next
    heartbeat. Nothing to lift is not an error."""
    _refuse_embedded(connection)
    client = connect(connection.url, deadline=connection.deadline)
    try:
        lifted = MongoPauses(client, database).resume()
    finally:
        client.close()
    if out.json:
        out.document(
            {"resumed": lifted is not None, "request": None if lifted is None else lifted.document()}
        )
    elif lifted is None:
        out.show(Text("no pause stood; the workers run"))
    else:
        out.show(
            Text(
                f"resumed: the pause requested at {_when(lifted.requested_at)} ({lifted.reason}) is lifted; "
                "the workers claim again at their next heartbeat"
            )
        )
    return Exit.OK


COMMANDS = (pause, resume)
