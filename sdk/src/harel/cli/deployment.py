"""`harel check`: a deployment's findings against the start-up rules, as a table or one JSON document."""

from __future__ import annotations

import time

import click
from rich.text import Text

from harel.cli.exits import Exit, epilog
from harel.cli.options import connection_options, json_option
from harel.cli.output import Output, styled, table
from harel.cli.settings import Connection
from harel.connection import (
    CheckReport,
    Status,
    check,
    connect,
    embedded_backend,
    embedded_report,
    redact,
    scrub,
)
from harel.connection.attempts import time_left
from harel.errors import ConnectionFailed, DeploymentError


@click.command(
    "check",
    short_help="check a deployment against the start-up rules",
    epilog=epilog(Exit.FAILED, Exit.USAGE, Exit.UNREACHABLE),
)
@click.argument("target", required=False, metavar="[URL]")
@connection_options
@json_option
def check_command(target: str | None, connection: Connection, out: Output) -> int:
    """Check a deployment against the start-up rules: every finding, with the fix for each error and
    warning. URL defaults to --url / HAREL_MONGO_URL / HAREL_MONGO_URL_FILE / the store of a running
    `harel dev`. --deadline bounds the whole check. Changes nothing."""
    url = target or connection.url
    if embedded_backend(url):
        report = embedded_report(url)
    else:
        started = time.monotonic()
        client = connect(url, deadline=connection.deadline)
        # The deadline bounds the whole check: its commands get what the wait for the ping left.
        left = time_left(connection.deadline, time.monotonic() - started)
        try:
            report = check(client, allow_standalone=connection.dev, timeout=left)
        except DeploymentError as error:  # it stopped answering after the ping, or the deadline ran out
            raise ConnectionFailed(
                redact(url), time.monotonic() - started, scrub(error.message, url)
            ) from None
        finally:
            client.close()
    if out.json:
        out.document(report.document())
    else:
        out.show(*report_view(report, redact(url), out))
    return Exit.OK if report.passed else Exit.FAILED


def report_view(report: CheckReport, url: str, out: Output) -> list[Text]:
    """The table people read: check | found | required | status, the fix under each error and warning,
    then a summary line."""
    if report.embedded:
        return [Text(f"{url} is an {report.deployment}.")]
    findings = table("check", "found", "required", "status")
    for finding in report.findings:
        findings.add_row(finding.check, finding.found, finding.required, styled(status_text(finding.status)))
    header, rule, *rows = out.lines(findings)
    lines = [Text(f"harel check {url}", style="bold"), Text(f"deployment: {report.deployment}"), Text()]
    lines += [header, rule]
    for finding, row in zip(report.findings, rows, strict=True):
        lines.append(row)
        if finding.fix and finding.status is not Status.OK:
            lines.append(Text(f"    fix: {finding.fix}", style="dim"))
    lines += [Text(), summary(report)]
    return lines


def status_text(status: Status) -> str:
    return status.value.upper() if status is Status.ERROR else status.value


def _counted(count: int, status: Status) -> str:
    plural = count != 1 and status in (Status.WARNING, Status.ERROR)
    return f"{count} {status.value}{'s' if plural else ''}"


def summary(report: CheckReport) -> Text:
    counts = ", ".join(_counted(report.count(status), status) for status in Status if report.count(status))
    if not report.passed:
        return Text(
            f"{counts}: refused. Fix the errors above; workers will not start on this deployment.",
            style="bold red",
        )
    if report.count(Status.RELAXED):
        return Text(
            f"{counts}: accepted for development only (--dev). Never run production like this.",
            style="magenta",
        )
    return Text(f"{counts}: passed.", style="green")


COMMANDS = (check_command,)
