"""The `harel` command line.

Each subcommand is a `Command`: a name, a one-line help, a function that adds its arguments and a function that
runs it and returns the exit code. `COMMANDS` lists them; `main` builds the parser from it. Every command gets
`--url` and `--dev`. A HarelError that escapes a command is printed as one line on stderr and mapped to its
exit code by `EXIT_CODES`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any

from pymongo.errors import PyMongoError

from harel import __version__
from harel.app import App
from harel.backend import DEFAULT_URL, Backend, is_embedded, open_backend
from harel.client import cancel_execution, send_event, start_execution
from harel.connection import (
    CheckReport,
    Finding,
    Status,
    check,
    connect,
    embedded_backend,
    embedded_report,
    redact,
    scrub,
)
from harel.errors import (
    ChartError,
    ConnectionFailed,
    ConnectionRejected,
    DeploymentRefused,
    HarelError,
    InvalidArgument,
    InvalidURL,
    UnknownAction,
    UnknownChart,
    UnknownEvent,
    UnknownExecution,
)
from harel.logs import configure_logging
from harel.model import Execution, ExecutionStatus
from harel.serve import build_app, serve
from harel.smoke import register_smoke, run_smoke
from harel.smoke import render as render_smoke
from harel.transport.base import DEFAULT_LEASE_SECONDS
from harel.worker import Worker, WorkerConfig

_TRUE = frozenset({"1", "true", "yes", "on"})


class Exit(IntEnum):
    OK = 0
    FAILED = 1  # the operation ran and failed (smoke failed, check found errors)
    USAGE = 2  # bad input or usage: bad URL, malformed chart, unknown event, bad JSON
    UNREACHABLE = 3  # the deployment did not answer before the deadline
    REFUSED = 4  # refused by the start-up checks
    NOT_FOUND = 5  # no such execution


# Checked in order: the first class the error is an instance of decides. Anything else is FAILED.
EXIT_CODES: tuple[tuple[type[HarelError], Exit], ...] = (
    (InvalidURL, Exit.USAGE),
    (ChartError, Exit.USAGE),
    (UnknownChart, Exit.USAGE),
    (UnknownEvent, Exit.USAGE),
    (UnknownAction, Exit.USAGE),
    (InvalidArgument, Exit.USAGE),
    (ConnectionFailed, Exit.UNREACHABLE),
    (DeploymentRefused, Exit.REFUSED),
    (ConnectionRejected, Exit.REFUSED),
    (UnknownExecution, Exit.NOT_FOUND),
)


def exit_code_for(error: HarelError) -> Exit:
    return next((code for kind, code in EXIT_CODES if isinstance(error, kind)), Exit.FAILED)


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# --- harel check ---------------------------------------------------------------------------------------------


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", metavar="URL", help="the deployment to check (default: --url)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument(
        "--deadline",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the deployment to answer (default: 60)",
    )


def run_check(args: argparse.Namespace) -> int:
    url: str = args.target or args.url
    if embedded_backend(url):
        report = embedded_report(url)
    else:
        started = time.monotonic()
        client = connect(url, deadline=args.deadline)
        try:
            report = check(client, allow_standalone=args.dev)
        except PyMongoError as error:  # the deployment stopped answering between the ping and the check
            raise ConnectionFailed(redact(url), time.monotonic() - started, scrub(str(error), url)) from None
        finally:
            client.close()
    print(json.dumps(report.document(), indent=2) if args.json else render_report(report, redact(url)))
    return Exit.OK if report.passed else Exit.FAILED


def render_report(report: CheckReport, url: str) -> str:
    """The table people read: check | found | required | status, a fix under each error and warning, then a
    summary line."""
    if report.embedded:
        return f"{url} is an {report.deployment}."
    header = ("check", "found", "required", "status")
    rows = [(f.check, f.found, f.required, _status_text(f)) for f in report.findings]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(3)]
    lines = [f"harel check {url}", f"deployment: {report.deployment}", ""]
    lines.append(_table_line(header, widths))
    lines.append(_table_line((*("-" * w for w in widths), "------"), widths))
    for finding, row in zip(report.findings, rows, strict=True):
        lines.append(_table_line(row, widths))
        if finding.fix and finding.status is not Status.OK:
            lines.append(f"    fix: {finding.fix}")
    lines += ["", _summary(report)]
    return "\n".join(lines)


def _status_text(finding: Finding) -> str:
    return finding.status.value.upper() if finding.status is Status.ERROR else finding.status.value


def _table_line(cells: tuple[str, ...], widths: list[int]) -> str:
    return (
        "  ".join(cell.ljust(width) for cell, width in zip(cells[:3], widths, strict=True)) + "  " + cells[3]
    )


def _counted(count: int, status: Status) -> str:
    plural = count != 1 and status in (Status.WARNING, Status.ERROR)
    return f"{count} {status.value}{'s' if plural else ''}"


def _summary(report: CheckReport) -> str:
    counts = ", ".join(_counted(report.count(status), status) for status in Status if report.count(status))
    if not report.passed:
        return f"{counts}: refused. Fix the errors above; workers will not start on this deployment."
    if report.count(Status.RELAXED):
        return f"{counts}: accepted for development only (--dev). Never run production like this."
    return f"{counts}: passed."


# --- shared by the execution commands ------------------------------------------------------------------------


def _json_argument(name: str, text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgument(name, f"not valid JSON ({error.msg} at position {error.pos})") from None
    if not isinstance(value, dict):
        raise InvalidArgument(name, f"must be a JSON object, got {type(value).__name__}")
    return value


def _app_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--app", metavar="PKG.MODULE:APP", help="a Python App with charts, actions and guards"
    )
    parser.add_argument(
        "--charts",
        metavar="DIR",
        help="a directory of YAML/JSON charts (start and send also find the charts the workers published)",
    )


def _backend(args: argparse.Namespace) -> Backend:
    if is_embedded(args.url) and args.command != "smoke":  # smoke brings its own in-process workers
        print(
            f"note: {args.url} lives inside this one process; use `harel demo`, or a mongodb:// URL to reach workers",
            file=sys.stderr,
        )
    return open_backend(args.url, allow_standalone=args.dev, deadline=args.deadline)


def _deadline_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--deadline",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the deployment (default: 60)",
    )


def _load(backend: Backend, execution_id: str) -> Execution:
    exe = backend.store.load(execution_id)
    if exe is None:
        raise UnknownExecution(execution_id)
    return exe


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# --- harel worker --------------------------------------------------------------------------------------------


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise InvalidArgument(name, f"must be a number, got {raw!r}") from None


def _worker_arguments(parser: argparse.ArgumentParser) -> None:
    _app_arguments(parser)
    _deadline_argument(parser)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=int(_env_number("HAREL_CONCURRENCY", 2)),
        help="events handled at once (env HAREL_CONCURRENCY; default 2)",
    )
    parser.add_argument(
        "--http-port",
        type=int,
        default=int(_env_number("HAREL_HTTP_PORT", 8080)),
        help="port of /healthz, /readyz and /metrics; 0 turns them off (env HAREL_HTTP_PORT; default 8080)",
    )
    parser.add_argument(
        "--drain-seconds",
        type=float,
        default=_env_number("HAREL_DRAIN_SECONDS", 20.0),
        help="on SIGTERM, how long in-flight events may finish before they are released (env HAREL_DRAIN_SECONDS; default 20)",
    )
    parser.add_argument(
        "--http-host",
        default=os.environ.get("HAREL_HTTP_HOST", "0.0.0.0"),
        help="address the HTTP endpoints listen on (env HAREL_HTTP_HOST; default 0.0.0.0, for probes from outside the container)",
    )
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=_env_number("HAREL_LEASE_SECONDS", DEFAULT_LEASE_SECONDS),
        help="how long a claimed event is reserved before another worker may take it (env HAREL_LEASE_SECONDS; default 30)",
    )
    parser.add_argument(
        "--no-trace", action="store_true", help="do not record execution traces (the smoke check needs them)"
    )


def run_worker(args: argparse.Namespace) -> int:
    configure_logging()
    if args.concurrency < 1:
        raise InvalidArgument("--concurrency", "must be at least 1")
    if args.lease_seconds <= 0:
        raise InvalidArgument("--lease-seconds", "must be positive")
    app = build_app(args.app, args.charts)
    if is_embedded(args.url):
        logging.getLogger("harel.cli").warning(
            "worker on %s: its store lives inside this process, so no other process can reach it; "
            "give --url or HAREL_MONGO_URL a mongodb:// deployment (or use `harel demo`)",
            args.url,
        )
    config = WorkerConfig(
        concurrency=args.concurrency,
        drain_seconds=args.drain_seconds,
        lease_seconds=args.lease_seconds,
        trace=not args.no_trace,
    )
    return serve(
        args.url,
        app,
        config,
        http_port=args.http_port or None,
        http_host=args.http_host,
        allow_standalone=args.dev,
        deadline=args.deadline,
    )


# --- harel start / send / cancel -----------------------------------------------------------------------------


def _start_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "chart",
        help="the chart id to start: its newest version from --charts/--app, else the newest a worker published",
    )
    parser.add_argument("--context", metavar="JSON", help="the initial context, a JSON object")
    parser.add_argument(
        "--id",
        metavar="ID",
        help="execution id; an idempotency key: starting it again returns the same execution",
    )
    _app_arguments(parser)
    _deadline_argument(parser)


def run_start(args: argparse.Namespace) -> int:
    context = _json_argument("--context", args.context)
    app = build_app(args.app, args.charts)
    backend = _backend(args)
    app.use_catalog(backend.catalog)
    try:
        exe, created = start_execution(
            backend.store, backend.transport, app, args.chart, context=context, execution_id=args.id
        )
    finally:
        backend.close()
    print(
        f"{exe.id}\t{'started' if created else 'already exists'}\t{exe.definition_id} v{exe.definition_version}"
    )
    return Exit.OK


def _send_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution_id", metavar="ID")
    parser.add_argument("event", metavar="EVENT")
    parser.add_argument("--data", metavar="JSON", help="the event's data, a JSON object")
    parser.add_argument(
        "--event-id", metavar="EVENT_ID", help="the event's id; sending the same id again takes effect once"
    )
    _app_arguments(parser)
    _deadline_argument(parser)


def run_send(args: argparse.Namespace) -> int:
    data = _json_argument("--data", args.data)
    app = build_app(args.app, args.charts)
    backend = _backend(args)
    app.use_catalog(backend.catalog)
    try:
        event = send_event(
            backend.store,
            backend.transport,
            app,
            args.execution_id,
            args.event,
            data=data,
            event_id=args.event_id,
        )
    except UnknownChart as error:
        raise InvalidArgument(
            "--charts/--app",
            f"{error}, and no worker published it; give it with --charts DIR or --app so the event name can be checked",
        ) from None
    finally:
        backend.close()
    print(f"queued {event.name} ({event.id}) for {args.execution_id}")
    return Exit.OK


def _id_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("execution_id", metavar="ID")
    _deadline_argument(parser)


def run_cancel(args: argparse.Namespace) -> int:
    backend = _backend(args)
    try:
        event = cancel_execution(backend.store, backend.transport, args.execution_id)
    finally:
        backend.close()
    print(f"queued cancel ({event.id}) for {args.execution_id}; its children are cancelled with it")
    return Exit.OK


# --- harel status / list / trace -----------------------------------------------------------------------------


def _status_arguments(parser: argparse.ArgumentParser) -> None:
    _id_arguments(parser)
    parser.add_argument("--document", action="store_true", help="print the stored MongoDB document as it is")
    parser.add_argument("--json", action="store_true", help="print the execution as JSON")


def run_status(args: argparse.Namespace) -> int:
    backend = _backend(args)
    try:
        exe = _load(backend, args.execution_id)
        document = backend.store.document(args.execution_id) if args.document else None
    finally:
        backend.close()
    if document is not None:
        print(json.dumps(document, indent=2, default=str, ensure_ascii=False))
    elif args.json:
        print(exe.model_dump_json(indent=2))
    else:
        print(render_status(exe, time.time()))
    return Exit.OK


def render_status(exe: Execution, now: float) -> str:
    lines = [
        f"execution  {exe.id}",
        f"chart      {exe.definition_id} v{exe.definition_version}",
        f"status     {exe.status.value} (version {exe.version})",
        f"active     {', '.join(exe.configuration) or '-'}",
    ]
    if exe.parent_id:
        lines.append(f"parent     {exe.parent_id} (region {exe.root_path})")
    for n, (child_id, child) in enumerate(sorted(exe.children.items())):
        lines.append(f"{'children' if n == 0 else '':<10} {child_id}  {'done' if child.done else 'running'}")
    for n, (path, fire_at) in enumerate(sorted(exe.timers.items(), key=lambda t: t[1])):
        due = fire_at - now
        when = f"fires in {due:.1f}s" if due > 0 else f"due {-due:.1f}s ago"
        lines.append(f"{'timers' if n == 0 else '':<10} {path}  {when}")
    lines.append(f"updated    {_when(exe.updated_at)}")
    return "\n".join(lines)


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", choices=[s.value for s in ExecutionStatus])
    parser.add_argument("--definition", metavar="CHART_ID")
    parser.add_argument("--roots", action="store_true", help="only executions without a parent")
    parser.add_argument("--limit", type=int, default=20, help="rows per page (default 20)")
    parser.add_argument("--cursor", help="continue from the cursor a previous page printed")
    parser.add_argument("--json", action="store_true")
    _deadline_argument(parser)


def run_list(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise InvalidArgument("--limit", "must be at least 1")
    backend = _backend(args)
    try:
        page = backend.store.list_executions(
            status=args.status,
            definition_id=args.definition,
            roots_only=args.roots,
            limit=args.limit,
            cursor=args.cursor,
        )
    except ValueError as error:
        raise InvalidArgument("--cursor", str(error)) from None
    finally:
        backend.close()
    if args.json:
        print(page.model_dump_json(indent=2))
        return Exit.OK
    for item in page.items:
        active = ",".join(item.configuration) or "-"
        print(
            f"{item.id}\t{item.status.value}\t{item.definition_id} v{item.definition_version}\t{active}\t{_when(item.updated_at)}"
        )
    if page.next_cursor:
        print(f"more: harel list --cursor {page.next_cursor}", file=sys.stderr)
    return Exit.OK


def _trace_arguments(parser: argparse.ArgumentParser) -> None:
    _id_arguments(parser)
    parser.add_argument("--json", action="store_true")


def run_trace(args: argparse.Namespace) -> int:
    backend = _backend(args)
    try:
        _load(backend, args.execution_id)
        trace = backend.store.read_trace(args.execution_id)
    finally:
        backend.close()
    if args.json:
        print(json.dumps(trace, indent=2, default=str))
        return Exit.OK
    for step in trace:
        before = ",".join(step.get("from", [])) or "-"
        after = ",".join(step.get("to", [])) or "-"
        note = "" if step.get("handled") else f"  (ignored: {step.get('reason')})"
        print(f"#{step['index']:<4} {_when(step['at'])}  {step['event']:<14} {before} -> {after}{note}")
    return Exit.OK


# --- harel smoke / demo --------------------------------------------------------------------------------------


def _smoke_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds the workflow may take (default 120)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    _deadline_argument(parser)


def run_smoke_command(args: argparse.Namespace) -> int:
    app = App("smoke")
    chart_id = register_smoke(app)
    backend = _backend(args)
    in_process: list[Worker] = []
    if backend.embedded:  # nothing outside this process can serve an embedded backend: bring workers along
        in_process = _start_workers(backend, app, 3)
    try:
        report = run_smoke(
            backend.store,
            backend.transport,
            app,
            chart_id=chart_id,
            timeout=args.timeout,
            on_progress=_smoke_progress,
        )
    finally:
        for worker in in_process:
            worker.stop(drain_seconds=2)
        backend.close()
    print(report.to_json() if args.json else render_smoke(report))
    return Exit.OK if report.passed else Exit.FAILED


def _smoke_progress(root: Execution, elapsed: float) -> None:
    done = sum(1 for child in root.children.values() if child.done)
    regions = f", regions done {done}/{len(root.children)}" if root.children else ""
    active = ", ".join(root.configuration) or "starting"
    print(f"smoke: +{elapsed:5.1f}s  {root.id} {root.status.value}: {active}{regions}", file=sys.stderr)


def _start_workers(backend: Backend, app: App, count: int) -> list[Worker]:
    workers = [
        Worker(
            backend.store,
            backend.transport,
            app,
            config=WorkerConfig(concurrency=2),
            heartbeats=backend.heartbeats,
        )
        for _ in range(count)
    ]
    for worker in workers:
        worker.start()
    return workers


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=3, help="workers to run in this process (default 3)")
    parser.add_argument(
        "--timer", type=float, default=1.0, help="seconds each durable timer waits (default 1)"
    )
    parser.add_argument("--timeout", type=float, default=60.0)


def run_demo(args: argparse.Namespace) -> int:
    url = args.url if is_embedded(args.url) else DEFAULT_URL
    if args.workers < 1 or args.timer <= 0:
        raise InvalidArgument("--workers/--timer", "need at least one worker and a positive timer")
    logging.getLogger("harel").setLevel(logging.ERROR)
    app = App("demo")
    chart_id = register_smoke(app, region_timer=args.timer, final_timer=args.timer)
    backend = open_backend(url)
    print(
        f"harel demo: {args.workers} workers in this process on {url} (the production MongoStore and MongoTransport)"
    )
    print(
        f"running the smoke workflow: 3 regions greet each other, wait {args.timer:g}s on durable timers, join, wait again"
    )
    workers = _start_workers(backend, app, args.workers)
    try:
        report = run_smoke(backend.store, backend.transport, app, chart_id=chart_id, timeout=args.timeout)
        processed = sum(w.counters["processed"] for w in workers)
        conflicts = sum(w.counters["conflicts"] for w in workers)
    finally:
        for worker in workers:
            worker.stop(drain_seconds=2)
    print()
    print(render_smoke(report))
    print()
    print(f"{processed} events processed by {args.workers} workers, {conflicts} version conflicts retried")
    document = getattr(backend.store, "document", lambda _id: None)(report.root_id)
    if document is not None:
        shown = {k: v for k, v in document.items() if k != "trace"}
        print("\nthe root's stored document (trace omitted; `harel status --document ID` shows it whole):")
        print(json.dumps(shown, indent=2, default=str, ensure_ascii=False)[:3000])
    backend.close()
    return Exit.OK if report.passed else Exit.FAILED


# --- the parser ----------------------------------------------------------------------------------------------


COMMANDS: tuple[Command, ...] = (
    Command("worker", "run a worker: consume events, relay, fire timers", _worker_arguments, run_worker),
    Command("start", "start an execution of a chart", _start_arguments, run_start),
    Command("send", "send an event to an execution", _send_arguments, run_send),
    Command("status", "show an execution: active states, children, timers", _status_arguments, run_status),
    Command("list", "list executions, paged; filter by status, chart or roots", _list_arguments, run_list),
    Command("trace", "show an execution's recorded steps", _trace_arguments, run_trace),
    Command("cancel", "cancel an execution and its children", _id_arguments, run_cancel),
    Command(
        "smoke",
        "run the fork/join + durable-timer smoke workflow against running workers",
        _smoke_arguments,
        run_smoke_command,
    ),
    Command(
        "demo",
        "no services needed: workers and the smoke workflow in this process",
        _demo_arguments,
        run_demo,
    ),
    Command("check", "check a deployment against the start-up rules", _check_arguments, run_check),
)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def _common_options(*, with_defaults: bool) -> argparse.ArgumentParser:
    # Accepted before and after the subcommand; only the top-level copy carries defaults, so a value given
    # before the subcommand is not overwritten by the subcommand's unset copy.
    parser = argparse.ArgumentParser(add_help=False)
    default_url = os.environ.get("HAREL_MONGO_URL") or DEFAULT_URL
    parser.add_argument(
        "--url",
        default=default_url if with_defaults else argparse.SUPPRESS,
        help="mongodb://, mongodb+srv://, mongomock:// or memory:// (env HAREL_MONGO_URL; default mongomock://)",
    )
    parser.add_argument(
        "--dev",
        action="store_true",
        default=_env_flag("HAREL_DEV") if with_defaults else argparse.SUPPRESS,
        help="development only: accept a standalone server, loudly (env HAREL_DEV=1)",
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harel",
        description="Durable Harel statecharts on MongoDB.",
        parents=[_common_options(with_defaults=True)],
    )
    parser.add_argument("--version", action="version", version=f"harel {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        sub = subparsers.add_parser(
            command.name, help=command.help, parents=[_common_options(with_defaults=False)]
        )
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse: --help and --version exit 0, a usage error 2
        return stop.code if isinstance(stop.code, int) else Exit.USAGE
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.run(args))
    except HarelError as error:
        print(f"harel {args.command}: {_one_line(error)}", file=sys.stderr)
        return exit_code_for(error)


if __name__ == "__main__":
    sys.exit(main())
