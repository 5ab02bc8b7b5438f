"""`harel dead list | retry ID | drop ID`: executions whose head event failed every attempt.

Such an execution is parked: its dead-lettered event and every event behind it wait (none overtakes it)
until an operator retries the event (attempted again now, its attempts reset) or drops it (removed and
recorded as processed, so a redelivery cannot bring it back; the events behind it go on).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import closing

import click
from rich.text import Text

from harel.backend import Backend
from harel.cli.exits import Exit, epilog
from harel.cli.options import connection_options, json_option
from harel.cli.output import Output, table
from harel.cli.settings import Connection
from harel.cli.views import chart_name
from harel.errors import NotParked, UnknownExecution
from harel.executions.records import Parked
from harel.executions.replies import earliest_timer, parse_execution, parse_parked, parse_relay_work
from harel.inspection import mailbox_of, raised_at

OPERATOR = (Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED, Exit.NOT_FOUND)


@click.group(short_help="dead letters: executions waiting for an operator (list, retry, drop)")
def dead() -> None:
    """Executions whose head event failed every attempt wait, with the events behind it, until an operator
    retries or drops that event."""


def dead_letter(backend: Backend, execution_id: str) -> Parked:
    document = backend.store.document(execution_id)
    if document is None or "data" not in document:
        raise UnknownExecution(execution_id)
    if not document.get("parked"):
        raise NotParked(execution_id)
    return parse_parked(document)


def letter_document(letter: Parked) -> dict[str, object]:
    return {
        "execution_id": letter.execution_id,
        "chart": letter.chart,
        "event_id": letter.event_id,
        "event": letter.event_name,
        "attempts": letter.attempts,
        "error": letter.error,
        "raised_at": raised_at(letter.traceback),
        "traceback": letter.traceback,
        "at": letter.at,
        "waiting": letter.waiting,
    }


@dead.command("list", epilog=epilog(*OPERATOR[:3]))
@click.option(
    "--limit", type=click.IntRange(min=1), metavar="N", default=100, show_default=True, help="rows at most"
)
@connection_options
@json_option
def list_dead(limit: int, connection: Connection, out: Output) -> int:
    """List the parked executions, oldest dead letter first: the event, its attempts and last error, and how
    many events wait behind it."""
    with closing(connection.open_shared("dead list")) as backend:
        letters = backend.transport.parked(limit)
    if out.json:
        out.document([letter_document(letter) for letter in letters])
        return Exit.OK
    if not letters:
        out.note("no dead letters: nothing waits for an operator")
        return Exit.OK
    rows = table("execution", "chart", "event", "attempts", "parked", "waiting", "error", "raised at")
    now = time.time()
    for letter in letters:
        rows.add_row(
            letter.execution_id,
            chart_name(letter.chart),
            f"{letter.event_name} ({letter.event_id})",
            str(letter.attempts),
            f"{max(0.0, now - letter.at):.0f}s ago",
            str(letter.waiting),
            Text(letter.error, style="red"),
            raised_at(letter.traceback) or "",
        )
    out.show(rows)
    return Exit.OK


def settle(
    connection: Connection,
    out: Output,
    execution_id: str,
    command: str,
    act: Callable[[Backend, Parked], bool],
    outcome: str,
    said: str,
) -> int:
    """Read the execution's dead letter, `act` on it (False: no longer parked, someone else settled it
    meanwhile), then say `said` (formatted with the letter's fields) or print the letter with `outcome`."""
    with closing(connection.open_shared(command)) as backend:
        letter = dead_letter(backend, execution_id)
        if not act(backend, letter):
            raise NotParked(execution_id)
    if out.json:
        out.document({**letter_document(letter), "outcome": outcome})
    else:
        out.show(said.format(**letter_document(letter)))
    return Exit.OK


def retry_readable(backend: Backend, letter: Parked) -> bool:
    """Retry an execution only once its document can be read, its relay work and timers too:
    UnreadableExecution otherwise (a worker, its relay or its sweep would park it again at once). Dropping
    the head event needs no reading: it may be what cannot be read."""
    document = backend.store.document(letter.execution_id)
    if document is not None:
        parse_execution(document)
        mailbox_of(document)
        parse_relay_work(document)
        earliest_timer(document)
    return backend.transport.retry(letter.execution_id)


@dead.command("retry", epilog=epilog(Exit.FAILED, *OPERATOR))
@click.argument("execution_id", metavar="ID")
@connection_options
@json_option
def retry(execution_id: str, connection: Connection, out: Output) -> int:
    """Attempt the dead-lettered event of the execution ID again, now, with its attempts reset."""
    return settle(
        connection,
        out,
        execution_id,
        "dead retry",
        retry_readable,
        "retried",
        "{execution_id}: {event} ({event_id}) is attempted again now, its attempts reset; {waiting} event(s) "
        "wait behind it",
    )


@dead.command("drop", epilog=epilog(*OPERATOR))
@click.argument("execution_id", metavar="ID")
@connection_options
@json_option
def drop(execution_id: str, connection: Connection, out: Output) -> int:
    """Drop the dead-lettered event of the execution ID: it is removed and recorded as processed (a
    redelivery cannot bring it back), and the events behind it go on."""
    return settle(
        connection,
        out,
        execution_id,
        "dead drop",
        lambda backend, letter: backend.transport.drop(letter.execution_id, letter.event_id),
        "dropped",
        "{execution_id}: dropped {event} ({event_id}), never to be applied; {waiting} event(s) behind it go on",
    )


COMMANDS = (dead,)
