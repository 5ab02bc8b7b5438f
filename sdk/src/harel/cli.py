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
from enum import IntEnum

from pymongo.errors import PyMongoError

from harel import __version__
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
    DeploymentRefused,
    HarelError,
    InvalidURL,
    UnknownChart,
    UnknownEvent,
    UnknownExecution,
)

# With neither --url nor HAREL_MONGO_URL, commands run on the embedded default: the production MongoStore and
# MongoTransport on an in-process mongomock.
DEFAULT_URL = "mongomock://"
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
    (ConnectionFailed, Exit.UNREACHABLE),
    (DeploymentRefused, Exit.REFUSED),
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


def _summary(report: CheckReport) -> str:
    counts = ", ".join(f"{report.count(status)} {status.value}" for status in Status if report.count(status))
    if not report.passed:
        return f"{counts}: refused. Fix the errors above; workers will not start on this deployment."
    if report.count(Status.RELAXED):
        return f"{counts}: accepted for development only (--dev). Never run production like this."
    return f"{counts}: passed."


# --- the parser ----------------------------------------------------------------------------------------------


COMMANDS: tuple[Command, ...] = (
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
