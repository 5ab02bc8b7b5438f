"""`harel status | trace`: what an execution is (its states, children, timers and mailbox; or its chart with the
active states marked, `--diagram`) and what it did, once or as it goes (`status --watch`, `trace --follow`,
until it finishes or `--timeout` passes)."""

from __future__ import annotations

import json
import time
from collections.abc import Hashable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any

import click
from rich.live import Live

from harel.backend import Backend
from harel.calls import Waiting, still_running
from harel.cli.charts import RENDERERS, draw, show_drawing
from harel.cli.exits import Exit, epilog
from harel.cli.options import connection_options, json_option, refuse_lone_timeout, timeout_option
from harel.cli.output import Output
from harel.cli.settings import Connection
from harel.cli.views import (
    finished_well,
    fixed_widths,
    mailbox_document,
    status_view,
    trace_table,
    undelivered_document,
    unreadable_document,
    unreadable_view,
)
from harel.diagram import active_paths, execution_tree
from harel.errors import InvalidArgument, UnknownExecution, UnreadableExecution
from harel.executions.replies import parse_execution, parse_parked
from harel.inspection import Mailbox, Undelivered, mailbox_of, undelivered_of
from harel.model import TERMINAL_STATUSES, Execution
from harel.worker import WorkerConfig

LOOKS = (Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED, Exit.NOT_FOUND)
FOLLOWS = (Exit.FAILED, Exit.TIMED_OUT)


@dataclass(frozen=True)
class Snapshot:
    """One look at an execution: its data, its mailbox, the chart versions live workers serve (read only when
    events wait, to tell whether one serves them), its trace, when the look was taken, and the events it sent
    that are still not delivered."""

    execution: Execution
    mailbox: Mailbox
    served: set[str] | None
    trace: list[dict[str, Any]]
    at: float
    undelivered: tuple[Undelivered, ...]

    @property
    def finished(self) -> bool:
        return self.execution.status in TERMINAL_STATUSES

    def change(self) -> Hashable:
        """What `status --watch` prints again when it changes (not the time left on a timer)."""
        box = self.mailbox
        held = tuple(u.event_id for u in self.undelivered)
        return (self.execution.version, tuple(p.id for p in box.pending), box.attempts, box.parked, held)

    def view(self) -> tuple[Execution, Mailbox, set[str] | None, float, tuple[Undelivered, ...]]:
        """The arguments of `status_view`."""
        return self.execution, self.mailbox, self.served, self.at, self.undelivered

    def document(self) -> dict[str, Any]:
        return {
            **self.execution.model_dump(mode="json"),
            "mailbox": mailbox_document(self.mailbox, self.served),
            "undelivered": undelivered_document(self.undelivered),
        }


def look(backend: Backend, execution_id: str) -> Snapshot:
    document = backend.store.document(execution_id)
    exe = parse_execution(document)
    if document is None or exe is None:
        raise UnknownExecution(execution_id)
    box = mailbox_of(document)
    served = served_charts(backend) if box.pending else None
    at = time.time()
    return Snapshot(exe, box, served, list(document.get("trace") or ()), at, undelivered_of(document, at))


def served_charts(backend: Backend) -> set[str]:
    """The chart versions live workers serve, on the deployment's clock as this process estimates it."""
    return backend.heartbeats.served_charts(backend.transport.clock.now(), WorkerConfig.heartbeat_seconds)


def finish_code(snapshot: Snapshot) -> int:
    """How a command that followed an execution to its end exits: 0 completed, 1 failed or cancelled."""
    return Exit.OK if finished_well(snapshot.execution) else Exit.FAILED


def watching(backend: Backend, execution_id: str, timeout: float | None) -> Iterator[Snapshot]:
    """A look now, then again after the pauses `start --wait` makes, until (and including) the look that finds
    it finished; WaitTimedOut once `timeout` seconds have passed without that (None: no limit)."""
    waiting = Waiting(timeout)
    while True:
        snapshot = look(backend, execution_id)
        yield snapshot
        if snapshot.finished:
            return
        time.sleep(waiting.next_pause(still_running(execution_id)))


@contextmanager
def live_view(out: Output) -> Iterator[Live | None]:
    """A region of the terminal redrawn in place; None when stdout is not a terminal (or with --json)."""
    if out.json or not out.out.is_terminal:
        yield None
        return
    with Live(console=out.out, auto_refresh=False, transient=False) as live:
        yield live


@click.command(
    short_help="show an execution: status, active states, children, timers, mailbox",
    epilog=epilog(*LOOKS, *FOLLOWS),
)
@click.argument("execution_id", metavar="ID")
@click.option("--document", is_flag=True, help="print the stored MongoDB document as it is (JSON)")
@click.option(
    "--diagram",
    "diagram_format",
    type=click.Choice(sorted(RENDERERS)),
    is_flag=False,
    flag_value="mermaid",
    help="draw its chart with the active states of the execution and its regions marked: mermaid (the "
    "default) or dot",
)
@click.option(
    "--watch",
    is_flag=True,
    help="keep showing it until it finishes: redrawn on a terminal, printed again at each change otherwise "
    "(one JSON line each with --json); the exit code then says how it ended (0 completed, 1 failed or "
    "cancelled)",
)
@timeout_option("--watch")
@connection_options
@json_option
def status(
    execution_id: str,
    document: bool,
    diagram_format: str | None,
    watch: bool,
    timeout: float | None,
    connection: Connection,
    out: Output,
) -> int:
    """Show the execution ID: status, active states, children, timers with their time to fire, and its
    mailbox: the events waiting, the head event's failed attempts, a dead letter, and whether a live worker
    serves its chart."""
    if sum((document, diagram_format is not None, watch)) > 1:
        raise click.UsageError("--document, --diagram and --watch each show it their own way: give one")
    if not watch:
        refuse_lone_timeout(timeout, "--watch")
    with closing(connection.open_shared("status")) as backend:
        if document:
            load_document(backend, execution_id, out)
            return Exit.OK
        if diagram_format is not None:
            draw_status(backend, execution_id, diagram_format, out)
            return Exit.OK
        if not watch:
            try:
                snapshot = look(backend, execution_id)
            except UnreadableExecution as unreadable:
                show_unreadable(backend, unreadable, out)
                return Exit.OK
            show_status(out, snapshot)
            return Exit.OK
        return watch_status(backend, execution_id, out, timeout)


def load_document(backend: Backend, execution_id: str, out: Output) -> None:
    stored = backend.store.document(execution_id)
    if stored is None or "data" not in stored:
        raise UnknownExecution(execution_id)
    out.document(stored)


def draw_status(backend: Backend, execution_id: str, diagram_format: str, out: Output) -> None:
    exe = look(backend, execution_id).execution
    chart = backend.catalog.get(exe.definition_id, exe.definition_version)
    if chart is None:
        raise InvalidArgument(
            "--diagram",
            f"{exe.definition_id} v{exe.definition_version} is not in the deployment's catalog (workers publish "
            f"the charts they run); `harel chart show {exe.definition_id} --charts DIR` draws it from a file",
        )
    active = active_paths(chart, execution_tree(backend.store.load, execution_id))
    show_drawing(out, chart, diagram_format, draw(chart, diagram_format, active), active=sorted(active))


def show_unreadable(backend: Backend, unreadable: UnreadableExecution, out: Output) -> None:
    """An execution whose document cannot be read, shown from the fields that can (its dead letter among
    them, once a worker parked it)."""
    document = backend.store.document(unreadable.execution_id)
    if document is None:
        raise UnknownExecution(unreadable.execution_id)
    dead = parse_parked(document) if document.get("parked") else None
    if out.json:
        out.document(unreadable_document(document, unreadable, dead))
    else:
        out.show(unreadable_view(document, unreadable, dead))


def show_status(out: Output, snapshot: Snapshot) -> None:
    if out.json:
        out.document(snapshot.document())
    else:
        out.show(status_view(*snapshot.view()))


def watch_status(backend: Backend, execution_id: str, out: Output, timeout: float | None) -> int:
    last: Hashable = None
    snapshot = None
    with live_view(out) as live:
        for snapshot in watching(backend, execution_id, timeout):
            view = status_view(*snapshot.view())
            if live is not None:
                live.update(view, refresh=True)
                continue
            if snapshot.change() == last:
                continue
            if out.json:
                print_line(out, snapshot.document())
            else:
                out.show(*([""] if last is not None else []), view)
            last = snapshot.change()
    assert snapshot is not None
    return finish_code(snapshot)


def print_line(out: Output, value: Any) -> None:
    """One JSON document on one line (what --watch and --follow print with --json)."""
    out.out.file.write(json.dumps(value, default=str, ensure_ascii=False) + "\n")
    out.out.file.flush()


@click.command(
    short_help="show the steps an execution recorded",
    epilog=epilog(*LOOKS, *FOLLOWS),
)
@click.argument("execution_id", metavar="ID")
@click.option(
    "--follow",
    is_flag=True,
    help="then print each new step as it is recorded, until the execution finishes (one JSON line a step "
    "with --json); the exit code then says how it ended (0 completed, 1 failed or cancelled)",
)
@timeout_option("--follow")
@connection_options
@json_option
def trace(execution_id: str, follow: bool, timeout: float | None, connection: Connection, out: Output) -> int:
    """Show the steps the execution ID recorded: each event, the states before and after, and what became
    of events it did not handle itself (forwarded to its regions, or ignored and why)."""
    if not follow:
        refuse_lone_timeout(timeout, "--follow")
    with closing(connection.open_shared("trace")) as backend:
        if not follow:
            steps = look(backend, execution_id).trace
            if out.json:
                out.document(steps)
            else:
                out.show(trace_table(steps))
            return Exit.OK
        return follow_trace(backend, execution_id, out, timeout)


def follow_trace(backend: Backend, execution_id: str, out: Output, timeout: float | None) -> int:
    shown = -1  # the index of the last step printed (the first step's is 0)
    snapshot = None
    for n, snapshot in enumerate(watching(backend, execution_id, timeout)):
        new = [step for step in snapshot.trace if step["index"] > shown]
        if out.json:
            for step in new:
                print_line(out, step)
        elif new or n == 0:
            out.show(fixed_widths(trace_table(new, header=n == 0)))
        shown = max((step["index"] for step in snapshot.trace), default=shown)
    assert snapshot is not None
    return finish_code(snapshot)


COMMANDS = (status, trace)
