"""`harel start | send | cancel | list`: what clients do to executions on a deployment, and (with --wait) what
came of it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from typing import Any

import click
from rich.console import RenderableType
from rich.text import Text

from harel.app import App
from harel.backend import Backend
from harel.cli.exits import Exit, epilog
from harel.cli.observe import served_charts
from harel.cli.options import (
    JSON_OBJECT,
    NON_EMPTY,
    F,
    app_options,
    connection_options,
    json_option,
    refuse_lone_timeout,
    timeout_option,
)
from harel.cli.output import Output, styled, table
from harel.cli.settings import Connection
from harel.cli.views import ended, fate_line, finished_well, unserved, when
from harel.client import cancel_execution, poll_until, send_event, start_execution, wait_for_execution
from harel.errors import InvalidArgument, UnknownChart, UnknownExecution
from harel.inspection import Disposition, EventFate, Stage, event_fate, mailbox_of
from harel.model import Event, Execution, ExecutionPage, ExecutionStatus

DEFAULT_PAGE = 20
WAITS = (Exit.FAILED, Exit.TIMED_OUT)


def load(backend: Backend, execution_id: str) -> Execution:
    exe = backend.store.load(execution_id)
    if exe is None:
        raise UnknownExecution(execution_id)
    return exe


def unpublished(error: UnknownChart, what: str) -> InvalidArgument:
    return InvalidArgument(
        "--charts/--app",
        f"{error}, and no worker published it; give it with --charts DIR or --app MODULE:APP so {what}, "
        "or start a worker that serves it",
    )


def wait_options(what: str) -> Callable[[F], F]:
    """`--wait` and `--timeout`, handed to the command as `wait: bool` and `timeout: float | None`."""

    def decorate(command: F) -> F:
        command = timeout_option("--wait")(command)
        return click.option("--wait", is_flag=True, help=f"wait until {what}")(command)

    return decorate


def waiting_note(out: Output, text: str) -> None:
    """Said only to a person at a terminal: a script knows what it asked for."""
    if out.err.is_terminal:
        out.note(f"{text}; Ctrl-C stops waiting, not the execution")


# --- start / send / cancel -----------------------------------------------------------------------------------


@click.command(
    short_help="start an execution of a chart",
    epilog=epilog(Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED, *WAITS),
)
@click.argument("chart")
@click.option(
    "--context",
    type=JSON_OBJECT,
    default=None,
    metavar="JSON|@FILE|-",
    help="the initial context: a JSON object, @file.json, or - to read it from standard input",
)
@click.option(
    "--id",
    "execution_id",
    type=NON_EMPTY,
    metavar="ID",
    help="the execution's id; an idempotency key: starting it again returns the same execution",
)
@wait_options("the execution finishes; the exit code says how (0 completed, 1 failed or cancelled)")
@app_options
@connection_options
@json_option
def start(
    chart: str,
    context: dict[str, Any] | None,
    execution_id: str | None,
    wait: bool,
    timeout: float | None,
    app: App,
    connection: Connection,
    out: Output,
) -> int:
    """Start an execution of CHART: its newest version from --charts/--app, else the newest version a
    worker published. With --wait, wait until it finishes."""
    if not wait:
        refuse_lone_timeout(timeout, "--wait")
    with closing(connection.open_shared("start")) as backend:
        app.use_catalog(backend.catalog)
        try:
            exe, created = start_execution(
                backend.store, backend.transport, app, chart, context=context, execution_id=execution_id
            )
        except UnknownChart as error:
            raise unpublished(error, "it can be started") from None
        if not out.json:
            outcome = (
                styled("started") if created else Text("already exists; nothing started", style="yellow")
            )
            out.show(
                Text.assemble(f"{exe.id} ", outcome, f" ({exe.definition_id} v{exe.definition_version})")
            )
        final = None
        if wait:
            waiting_note(out, f"waiting for {exe.id} to finish")
            final = wait_for_execution(backend.store, exe.id, timeout=timeout)
    if out.json:
        document: dict[str, Any] = {
            "id": exe.id,
            "created": created,
            "definition_id": exe.definition_id,
            "definition_version": exe.definition_version,
            "status": (final or exe).status.value,
        }
        if final is not None:
            document["configuration"] = final.configuration
        out.document(document)
    elif final is not None:
        out.show(ended(final))
    return Exit.OK if final is None or finished_well(final) else Exit.FAILED


@click.command(
    short_help="send an event to an execution",
    epilog=epilog(Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED, Exit.NOT_FOUND, *WAITS),
)
@click.argument("execution_id", metavar="ID")
@click.argument("event", metavar="EVENT")
@click.option(
    "--data",
    type=JSON_OBJECT,
    default=None,
    metavar="JSON|@FILE|-",
    help="the event's data: a JSON object, @file.json, or - to read it from standard input",
)
@click.option(
    "--event-id",
    type=NON_EMPTY,
    metavar="EVENT_ID",
    help="the event's id; sending the same id again takes effect once",
)
@wait_options(
    "a worker applied the event, and say whether it was handled, forwarded to the regions or ignored "
    "(exit 1 when ignored or dead-lettered)"
)
@app_options
@connection_options
@json_option
def send(
    execution_id: str,
    event: str,
    data: dict[str, Any] | None,
    event_id: str | None,
    wait: bool,
    timeout: float | None,
    app: App,
    connection: Connection,
    out: Output,
) -> int:
    """Send EVENT to the execution ID. The event name is checked against the chart the execution pinned.
    With --wait, wait until a worker applied it and say what it did."""
    if not wait:
        refuse_lone_timeout(timeout, "--wait")
    with closing(connection.open_shared("send")) as backend:
        app.use_catalog(backend.catalog)
        try:
            sent = send_event(
                backend.store, backend.transport, app, execution_id, event, data=data, event_id=event_id
            )
        except UnknownChart as error:
            raise unpublished(error, "the event name can be checked") from None
        if not out.json:
            out.show(Text.assemble("queued ", (sent.name, "bold"), f" ({sent.id}) for {execution_id}"))
        fate = wait_for_event(backend, execution_id, sent, out, timeout) if wait else None
    if out.json:
        document: dict[str, Any] = {
            "execution_id": execution_id,
            "event": sent.model_dump(mode="json"),
            "outcome": "queued" if fate is None else outcome_name(fate),
        }
        if fate is not None:
            document.update({"step": fate.step, "forwarded_to": list(fate.forwarded_to), "error": fate.error})
        out.document(document)
    elif fate is not None:
        out.show(fate_line(execution_id, sent.name, fate))
    if fate is None:
        return Exit.OK
    return Exit.FAILED if fate.stage is Stage.DEAD or fate.disposition is Disposition.IGNORED else Exit.OK


def outcome_name(fate: EventFate) -> str:
    if fate.stage is Stage.DEAD:
        return "dead-lettered"
    return fate.disposition.value if fate.disposition is not None else "applied"


def wait_for_event(
    backend: Backend, execution_id: str, event: Event, out: Output, timeout: float | None
) -> EventFate:
    """The event's fate once a worker applied it (or dead-lettered it). Says on stderr, once each, when an
    attempt failed and when no live worker serves the execution's chart."""
    waiting_note(out, f"waiting for a worker to apply {event.name}")
    said: set[str] = set()

    def settled() -> EventFate | None:
        document = backend.store.document(execution_id)
        if document is None:
            raise UnknownExecution(execution_id)
        fate = event_fate(document, event.id)
        if fate.stage is not Stage.WAITING:
            return fate
        box = mailbox_of(document)
        notes = []
        if fate.attempts:
            notes.append(f"attempt {fate.attempts} at {event.name} failed: {fate.error}; it is retried")
        served = None if box.leased else served_charts(backend)
        if served is not None and box.chart not in served:
            notes.append(unserved(box.chart, served))
        for note in notes:
            if note not in said:
                said.add(note)
                out.note(note)
        return None

    return poll_until(settled, f"{event.name} ({event.id}) is not applied yet at {execution_id}", timeout)


@click.command(
    short_help="cancel an execution and its children",
    epilog=epilog(Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED, Exit.NOT_FOUND),
)
@click.argument("execution_id", metavar="ID")
@connection_options
@json_option
def cancel(execution_id: str, connection: Connection, out: Output) -> int:
    """Cancel the execution ID: it stops, disarms its timers and cancels its children."""
    with closing(connection.open_shared("cancel")) as backend:
        sent = cancel_execution(backend.store, backend.transport, execution_id)
    if out.json:
        out.document({"execution_id": execution_id, "event_id": sent.id, "outcome": "queued"})
    else:
        out.show(f"queued cancel ({sent.id}) for {execution_id}: it stops and cancels its children")
    return Exit.OK


# --- list ------------------------------------------------------------------------------------------------


@click.command(
    "list",
    short_help="list executions, a page at a time; filter by status, chart or roots",
    epilog=epilog(Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED),
)
@click.option("--status", type=click.Choice([s.value for s in ExecutionStatus]), help="only this status")
@click.option("--definition", metavar="CHART_ID", help="only executions of this chart")
@click.option("--roots", is_flag=True, help="only executions without a parent")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    metavar="N",
    default=DEFAULT_PAGE,
    show_default=True,
    help="rows per page",
)
@click.option("--cursor", metavar="CURSOR", help="continue from the cursor a previous page printed")
@connection_options
@json_option
def list_(
    status: str | None,
    definition: str | None,
    roots: bool,
    limit: int,
    cursor: str | None,
    connection: Connection,
    out: Output,
) -> int:
    """List executions, a page at a time, filtered by status, chart or roots."""
    with closing(connection.open_shared("list")) as backend:
        try:
            page = backend.store.list_executions(
                status=status, definition_id=definition, roots_only=roots, limit=limit, cursor=cursor
            )
        except ValueError as error:
            raise InvalidArgument("--cursor", f"{error}; use the cursor a previous page printed") from None
    if out.json:
        out.document(page.model_dump(mode="json"))
        return Exit.OK
    out.show(list_view(page))
    if page.next_cursor:
        filters = {"--status": status, "--definition": definition, "--roots": roots or None}
        if limit != DEFAULT_PAGE:
            filters["--limit"] = str(limit)
        again = [f"{name} {value}" if value is not True else name for name, value in filters.items() if value]
        out.note(" ".join(["more: harel list", *again, "--cursor", page.next_cursor]))
    elif not page.items:
        out.note("no executions match")
    return Exit.OK


def list_view(page: ExecutionPage) -> RenderableType:
    rows = table("id", "status", "chart", "active", "updated")
    for item in page.items:
        rows.add_row(
            item.id,
            styled(item.status.value),
            f"{item.definition_id} v{item.definition_version}",
            ",".join(item.configuration) or "-",
            when(item.updated_at),
        )
    return rows


COMMANDS = (start, send, cancel, list_)
