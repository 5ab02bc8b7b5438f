"""`harel smoke` and `harel demo`: the built-in fork/join + durable-timer workflow, run and checked."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.text import Text

from harel.app import App
from harel.backend import DEFAULT_URL, Backend, is_embedded, open_backend
from harel.cli.exits import Exit, epilog
from harel.cli.options import POSITIVE_SECONDS, connection_options, invocation, json_option
from harel.cli.output import Output
from harel.cli.settings import Connection
from harel.errors import InvalidArgument
from harel.model import Execution
from harel.smoke import SmokeReport, register_smoke, run_smoke
from harel.smoke import render as render_smoke
from harel.worker import Worker, WorkerConfig

IN_PROCESS_WORKERS = 3
DOCUMENT_SHOWN = 3000  # characters of the root's stored document the demo prints


def start_workers(backend: Backend, app: App, count: int) -> list[Worker]:
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


def stop_workers(workers: list[Worker]) -> None:
    for worker in workers:
        worker.stop(drain_seconds=2)


def show_report(out: Output, report: SmokeReport) -> None:
    for line in render_smoke(report).splitlines():
        verdict = line.split(" ", 1)[0]
        out.show(Text(line, style={"PASS": "bold green", "FAIL": "bold red"}.get(verdict, "")))


@click.command(
    short_help="run the fork/join + durable-timer smoke workflow through running workers",
    epilog=epilog(Exit.FAILED, Exit.USAGE, Exit.UNREACHABLE, Exit.REFUSED),
)
@click.option(
    "--timeout", type=POSITIVE_SECONDS, default=120.0, show_default=True, help="seconds the workflow may take"
)
@connection_options
@json_option
def smoke(timeout: float, connection: Connection, out: Output) -> int:
    """Run the fork/join + durable-timer smoke workflow through the deployment's workers and check it:
    every timer fired once and not early, the join followed every region, no event took effect twice.
    On mongomock:// it brings its own workers."""
    app = App("smoke")
    chart_id = register_smoke(app)
    backend = connection.open()
    # Nothing outside this process can serve an embedded backend: bring workers along.
    in_process = start_workers(backend, app, IN_PROCESS_WORKERS) if backend.embedded else []

    def progress(root: Execution, elapsed: float) -> None:
        done = sum(1 for child in root.children.values() if child.done)
        regions = f", regions done {done}/{len(root.children)}" if root.children else ""
        active = ", ".join(root.configuration) or "starting"
        out.note(f"smoke: +{elapsed:5.1f}s  {root.id} {root.status.value}: {active}{regions}")

    try:
        report = run_smoke(
            backend.store, backend.transport, app, chart_id=chart_id, timeout=timeout, on_progress=progress
        )
    finally:
        stop_workers(in_process)
        backend.close()
    if out.json:
        out.document(json.loads(report.to_json()))
    else:
        show_report(out, report)
    return Exit.OK if report.passed else Exit.FAILED


@click.command(
    short_help="no services needed: workers and the smoke workflow in this process",
    epilog=epilog(Exit.FAILED, Exit.USAGE),
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    metavar="N",
    default=IN_PROCESS_WORKERS,
    show_default=True,
    help="workers to run in this process",
)
@click.option(
    "--timer", type=POSITIVE_SECONDS, default=1.0, show_default=True, help="seconds each durable timer waits"
)
@click.option(
    "--timeout", type=POSITIVE_SECONDS, default=60.0, show_default=True, help="seconds the workflow may take"
)
@click.option(
    "--url", metavar="URL", help="mongomock:// (default; memory:// is a deprecated alias); nothing else"
)
@json_option
def demo(workers: int, timer: float, timeout: float, url: str | None, out: Output) -> int:
    """No services needed: workers and the smoke workflow in this process, on the production MongoStore and
    MongoTransport over an in-process mongomock."""
    url = url or invocation().root_url or DEFAULT_URL
    if not is_embedded(url):
        raise InvalidArgument(
            "--url",
            f"harel demo runs in this process on mongomock://, not {url.split('://')[0]}://; "
            "to run the workflow through a deployment's workers, use `harel smoke --url URL`",
        )
    app = App("demo")
    chart_id = register_smoke(app, region_timer=timer, final_timer=timer)
    backend = open_backend(url)
    if not out.json:
        out.show(
            f"harel demo: {workers} workers in this process on {url} (the production MongoStore and MongoTransport)",
            f"running the smoke workflow: 3 regions greet each other, wait {timer:g}s on durable timers, "
            "join, wait again",
        )
    running = start_workers(backend, app, workers)
    try:
        report = run_smoke(backend.store, backend.transport, app, chart_id=chart_id, timeout=timeout)
        processed = sum(w.counters["processed"] for w in running)
        conflicts = sum(w.counters["conflicts"] for w in running)
    finally:
        stop_workers(running)
    document = backend.store.document(report.root_id)
    backend.close()
    if out.json:
        out.document(
            {
                "report": json.loads(report.to_json()),
                "workers": workers,
                "processed": processed,
                "conflicts": conflicts,
                "document": document,
            }
        )
    else:
        show_demo(out, report, workers, processed, conflicts, document)
    return Exit.OK if report.passed else Exit.FAILED


def show_demo(
    out: Output,
    report: SmokeReport,
    workers: int,
    processed: int,
    conflicts: int,
    document: dict[str, Any] | None,
) -> None:
    out.show("")
    show_report(out, report)
    out.show("", f"{processed} events processed by {workers} workers, {conflicts} version conflicts retried")
    if document is not None:
        shown = {k: v for k, v in document.items() if k != "trace"}
        out.show("", "the root's stored document, as the workers left it (trace omitted):")
        out.show(json.dumps(shown, indent=2, default=str, ensure_ascii=False)[:DOCUMENT_SHOWN])


COMMANDS = (smoke, demo)
