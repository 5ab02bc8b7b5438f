"""The `harel` console script: Ctrl-C at any moment ends it with one line on stderr and exit code 130.

A module of its own, outside the `harel` package: importing anything of `harel` imports its public API (the
store, the clients, PyMongo) and the command line then brings click and rich, a second or more before any
command runs. Those imports run here, inside the handling; so does the command (which turns Ctrl-C into
`click.Abort`, reported as `interrupted`, or, in `harel worker` and `harel dev`, into a drain). Once the command
has returned, Ctrl-C ends the process at once: what is left is the interpreter's shutdown (joining threads, the
exit handlers), where an interruption would otherwise print a traceback from whatever it cut short. The last
exit handler ends the process with the command's exit code: after it Python puts SIGINT back to its default,
and Ctrl-C during the rest (tearing the modules down) would kill the process without a word.
Only the standard library's light modules are imported here.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import sys
from types import FrameType

INTERRUPTED = 130  # harel.cli.exits.Exit.INTERRUPTED, not imported: importing it is what may be interrupted


def main() -> int:
    # Started with SIGINT ignored (a background job of a script): it stays ignored.
    handling = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    returned: list[int] = []  # the exit code, once there is one: a traceback leaves the shutdown as it is
    atexit.register(_end_after_the_exit_handlers, returned)  # first registered, so run last
    try:
        from harel.cli.main import main as run_command

        code = run_command()
        _flush()
        if handling:
            signal.signal(signal.SIGINT, _end_at_once)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, _end_at_once)
        _say_interrupted()
        code = INTERRUPTED
    returned.append(code)
    return code


def _line() -> bytes:
    if "--json" in sys.argv[1:]:
        text = json.dumps({"error": "Interrupted", "message": "interrupted", "exit_code": INTERRUPTED})
    else:
        text = "harel: interrupted"
    return f"{text}\n".encode()


def _say_interrupted() -> None:
    with contextlib.suppress(OSError):
        past_the_echo = b"\n" if os.isatty(2) else b""  # a terminal shows ^C where the cursor is
        os.write(2, past_the_echo + _line())


def _flush() -> None:
    """What the command printed, out before the shutdown's Ctrl-C handling is on: ending at once, it flushes
    nothing."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def _end_at_once(_signum: int, _frame: FrameType | None) -> None:
    _say_interrupted()
    os._exit(INTERRUPTED)


def _end_after_the_exit_handlers(returned: list[int]) -> None:
    if returned:
        _flush()
        os._exit(returned[0])
