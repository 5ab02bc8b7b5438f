"""The exit codes of `harel`, which error ends in which, and how `--help` lists them."""

from __future__ import annotations

from enum import IntEnum

from harel.errors import (
    ChartError,
    ConnectionFailed,
    ConnectionRejected,
    DeploymentError,
    DeploymentRefused,
    DevServerNotInstalled,
    EndpointUnavailable,
    EventTooLarge,
    ExecutionFinished,
    ExecutionIdTaken,
    ExecutionTooLarge,
    HarelError,
    InvalidArgument,
    InvalidContext,
    InvalidEventId,
    InvalidExecutionId,
    InvalidURL,
    LocalDataError,
    LocalServerError,
    MailboxFull,
    NotParked,
    UnknownAction,
    UnknownChart,
    UnknownEvent,
    UnknownExecution,
    WaitTimedOut,
)


class Exit(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    UNREACHABLE = 3
    REFUSED = 4
    NOT_FOUND = 5
    TIMED_OUT = 6
    INTERRUPTED = 130


MEANING: dict[Exit, str] = {
    Exit.OK: "ok",
    Exit.FAILED: "the operation ran and failed (smoke or check failed; what --wait, --watch or --follow "
    "waited for failed, was cancelled, ignored or dead-lettered; `dead retry` of an execution still unreadable)",
    Exit.USAGE: "bad input: a bad option, URL, JSON, chart, app or event; an execution that has finished; a "
    "port in use; mongomock:// or harel dev without harel-dev installed",
    Exit.UNREACHABLE: "the deployment did not answer before the deadline, or stopped answering",
    Exit.REFUSED: "refused by the start-up checks (`harel check` shows why), or the deployment rejected the "
    "client (authentication, TLS)",
    Exit.NOT_FOUND: "no such execution",
    Exit.TIMED_OUT: "gave up waiting after --timeout; what it waited for goes on",
    Exit.INTERRUPTED: "interrupted (Ctrl-C)",
}

# Checked in order: the first class the error is an instance of decides. Anything else is FAILED.
EXIT_CODES: tuple[tuple[type[HarelError], Exit], ...] = (
    (InvalidURL, Exit.USAGE),
    (ChartError, Exit.USAGE),
    (UnknownChart, Exit.USAGE),
    (UnknownEvent, Exit.USAGE),
    (UnknownAction, Exit.USAGE),
    (InvalidArgument, Exit.USAGE),
    (ExecutionTooLarge, Exit.USAGE),
    (ExecutionFinished, Exit.USAGE),
    (InvalidExecutionId, Exit.USAGE),
    (InvalidEventId, Exit.USAGE),
    (ExecutionIdTaken, Exit.USAGE),
    (EventTooLarge, Exit.USAGE),
    (InvalidContext, Exit.USAGE),
    (MailboxFull, Exit.FAILED),
    (EndpointUnavailable, Exit.USAGE),
    (LocalServerError, Exit.USAGE),
    (LocalDataError, Exit.USAGE),
    (DevServerNotInstalled, Exit.USAGE),
    (NotParked, Exit.USAGE),
    (WaitTimedOut, Exit.TIMED_OUT),
    (ConnectionFailed, Exit.UNREACHABLE),
    (DeploymentError, Exit.UNREACHABLE),
    (DeploymentRefused, Exit.REFUSED),
    (ConnectionRejected, Exit.REFUSED),
    (UnknownExecution, Exit.NOT_FOUND),
)


def exit_code_for(error: HarelError) -> Exit:
    return next((code for kind, code in EXIT_CODES if isinstance(error, kind)), Exit.FAILED)


def epilog(*codes: Exit) -> str:
    """The "Exit codes" paragraph of a command's --help; `\\b` keeps click from re-wrapping it."""
    rows = [f"  {int(code):<3} {MEANING[code]}" for code in (Exit.OK, *codes)]
    return "\b\nExit codes:\n" + "\n".join(rows)
