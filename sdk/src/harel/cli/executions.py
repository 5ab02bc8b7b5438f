"""`harel start | send | cancel | status | list | trace`: what clients do to executions on a deployment."""

from __future__ import annotations

import time
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

import click
from rich.console import RenderableType
from rich.text import Text

from harel.app import App
from harel.backend import Backend
from harel.cli.exits import Exit, epilog
from harel.cli.options import JSON_OBJECT, NON_EMPTY, app_options, connection_options, json_option
from harel.cli.output import Output, pairs, styled, table
from harel.cli.settings import Connection
from harel.client import cancel_execution, send_event, start_execution
from harel.errors import InvalidArgument, UnknownChart, UnknownExecution
from harel.model import Execution, ExecutionPage, ExecutionStatus

DEFAULT_PAGE = 20


def when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


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


# --- start / send / cancel -----------------------------------------------------------------------------------


@click.command(
    short_help="start an execution of a chart", epilog=epilog(Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED)
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
@app_options
@connection_options
@json_option
def start(
    chart: str,
    context: dict[str, Any] | None,
    execution_id: str | None,
    app: App,
    connection: Connection,
    out: Output,
) -> int:
    """Start an execution of CHART: its newest version from --charts/--app, else the newest version a
    worker published."""
    with closing(connection.open_shared("start")) as backend:
        app.use_catalog(backend.catalog)
        try:
            exe, created = start_execution(
                backend.store, backend.transport, app, chart, context=context, execution_id=execution_id
            )
        except UnknownChart as error:
            raise unpublished(error, "it can be started") from None
    if out.json:
        out.document(
            {
                "id": exe.id,
                "created": created,
                "definition_id": exe.definition_id,
                "definition_version": exe.definition_version,
                "status": exe.status.value,
            }
        )
    else:
        outcome = styled("started") if created else Text("already exists; nothing started", style="yellow")
        out.show(Text.assemble(f"{exe.id} ", outcome, f" ({exe.definition_id} v{exe.definition_version})"))
    return Exit.OK


@click.command(
    short_help="send an event to an execution",
    epilog=epilog(Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED, Exit.NOT_FOUND),
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
@app_options
@connection_options
@json_option
def send(
    execution_id: str,
    event: str,
    data: dict[str, Any] | None,
    event_id: str | None,
    app: App,
    connection: Connection,
    out: Output,
) -> int:
    """Send EVENT to the execution ID. The event name is checked against the chart the execution pinned."""
    with closing(connection.open_shared("send")) as backend:
        app.use_catalog(backend.catalog)
        try:
            sent = send_event(
                backend.store, backend.transport, app, execution_id, event, data=data, event_id=event_id
            )
        except UnknownChart as error:
            raise unpublished(error, "the event name can be checked") from None
    if out.json:
        out.document(
            {"execution_id": execution_id, "event": sent.model_dump(mode="json"), "outcome": "queued"}
        )
    else:
        out.show(Text.assemble("queued ", (sent.name, "bold"), f" ({sent.id}) for {execution_id}"))
    return Exit.OK


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


# --- status / list / trace -----------------------------------------------------------------------------------


@click.command(
    short_help="show an execution: status, active states, children, timers",
    epilog=epilog(Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED, Exit.NOT_FOUND),
)
@click.argument("execution_id", metavar="ID")
@click.option("--document", is_flag=True, help="print the stored MongoDB document as it is (JSON)")
@connection_options
@json_option
def status(execution_id: str, document: bool, connection: Connection, out: Output) -> int:
    """Show the execution ID: status, active states, children, timers with their time to fire."""
    with closing(connection.open_shared("status")) as backend:
        exe = load(backend, execution_id)
        stored = backend.store.document(execution_id) if document else None  # type: ignore[attr-defined]
    if stored is not None:
        out.document(stored)
    elif out.json:
        out.document(exe.model_dump(mode="json"))
    else:
        out.show(status_view(exe, time.time()))
    return Exit.OK


def status_view(exe: Execution, now: float) -> RenderableType:
    rows: list[tuple[str, RenderableType]] = [
        ("execution", exe.id),
        ("chart", f"{exe.definition_id} v{exe.definition_version}"),
        ("status", Text.assemble(styled(exe.status.value), f" (version {exe.version})")),
        ("active", ", ".join(exe.configuration) or "-"),
    ]
    if exe.parent_id:
        rows.append(("parent", f"{exe.parent_id} (region {exe.root_path})"))
    for n, (child_id, child) in enumerate(sorted(exe.children.items())):
        rows.append(("children" if n == 0 else "", f"{child_id}  {'done' if child.done else 'running'}"))
    for n, (path, fire_at) in enumerate(sorted(exe.timers.items(), key=lambda t: t[1])):
        due = fire_at - now
        rows.append(
            (
                "timers" if n == 0 else "",
                f"{path}  {f'fires in {due:.1f}s' if due > 0 else f'due {-due:.1f}s ago'}",
            )
        )
    rows.append(("updated", when(exe.updated_at)))
    return pairs(rows)


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


@click.command(
    short_help="show the steps an execution recorded",
    epilog=epilog(Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED, Exit.NOT_FOUND),
)
@click.argument("execution_id", metavar="ID")
@connection_options
@json_option
def trace(execution_id: str, connection: Connection, out: Output) -> int:
    """Show the steps the execution ID recorded: each event, the states before and after."""
    with closing(connection.open_shared("trace")) as backend:
        load(backend, execution_id)
        steps = backend.store.read_trace(execution_id)
    if out.json:
        out.document(steps)
    else:
        out.show(trace_view(steps))
    return Exit.OK


def trace_view(steps: list[dict[str, Any]]) -> RenderableType:
    rows = table("#", "at", "event", "from", "to", "note")
    for step in steps:
        rows.add_row(
            str(step["index"]),
            when(step["at"]),
            step["event"],
            ",".join(step.get("from", [])) or "-",
            ",".join(step.get("to", [])) or "-",
            "" if step.get("handled") else Text(f"ignored: {step.get('reason')}", style="yellow"),
        )
    return rows


COMMANDS = (start, send, cancel, status, list_, trace)
