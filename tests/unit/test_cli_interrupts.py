"""Ctrl-C at any moment of a `harel` process ends it with one line on stderr and exit code 130: while its modules
are still being imported, and once its command has returned and the interpreter is shutting down.

Each process is held at the moment under test by a `sitecustomize` of the test's own (first on PYTHONPATH), so
the signal lands there and nowhere else: it blocks the first import of `harel`, or an exit handler, says so on
one pipe and waits for the test on another. The test sends SIGINT once it has heard, then lets the hold go (a
signal that arrives before the hold's read is handled once the read returns).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harel import __version__

HAREL = str(Path(sys.executable).with_name("harel"))
INTERRUPTED = 130
# A disposition of "ignore" survives exec: the shell sets it, then becomes the command.
IGNORING_CTRL_C = ["sh", "-c", 'trap "" INT; exec "$0" "$@"']
# And so does a blocked signal: without this, the child would inherit whatever this test process was left with
# (a shell cannot undo an ignore it inherited). With it, SIGINT is at its default and unblocked, as a terminal
# starts a command.
AS_FROM_A_TERMINAL = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); os.execv(sys.argv[1], sys.argv[1:])",
]

HOLD = """
import atexit
import os
import sys


def hold():
    os.write({ready}, b"held")
    os.read({go}, 2)


class OnFirstImportOfHarel:
    def __init__(self, then):
        self.then = then

    def find_spec(self, name, path=None, target=None):
        if name == "harel":
            sys.meta_path.remove(self)
            self.then()
        return None


{install}
"""

# The exit handler is registered once `harel` starts importing: after the entry's own, so it runs before it.
AT = {
    "import": "sys.meta_path.insert(0, OnFirstImportOfHarel(hold))",
    "shutdown": "sys.meta_path.insert(0, OnFirstImportOfHarel(lambda: atexit.register(hold)))",
}


def interrupted_at(
    moment: str, site: Path, *arguments: str, ignoring: bool = False
) -> subprocess.CompletedProcess[str]:
    """`harel ARGUMENTS` held at `moment` ("import" or "shutdown"), sent SIGINT there, run to its end; with
    `ignoring`, started with SIGINT ignored, as a script's background job is."""
    ready_out, ready_in = os.pipe()
    go_out, go_in = os.pipe()
    site.mkdir()
    (site / "sitecustomize.py").write_text(HOLD.format(ready=ready_in, go=go_out, install=AT[moment]))
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    process = subprocess.Popen(
        [*(IGNORING_CTRL_C if ignoring else AS_FROM_A_TERMINAL), HAREL, *arguments],
        env={**os.environ, "PYTHONPATH": path},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        pass_fds=(ready_in, go_out),
    )
    os.close(ready_in)
    os.close(go_out)
    try:
        assert os.read(ready_out, 4) == b"held", "the process ended before it reached the hold"
        process.send_signal(signal.SIGINT)
        with contextlib.suppress(BrokenPipeError):  # it may have ended already: nothing left to let go
            os.write(go_in, b"go")
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
        os.close(ready_out)
        os.close(go_in)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (("--version",), "harel: interrupted"),
        (("list", "--json"), '{"error": "Interrupted", "message": "interrupted", "exit_code": 130}'),
    ],
    ids=["text", "json"],
)
def test_ctrl_c_while_the_modules_are_imported_exits_130_with_one_line(
    tmp_path: Path, arguments: tuple[str, ...], line: str
) -> None:
    done = interrupted_at("import", tmp_path / "site", *arguments)

    assert (done.returncode, done.stderr.splitlines(), done.stdout) == (INTERRUPTED, [line], "")


def test_ctrl_c_during_the_shutdown_exits_130_with_one_line_after_the_output(tmp_path: Path) -> None:
    done = interrupted_at("shutdown", tmp_path / "site", "--version")

    assert (done.returncode, done.stderr.splitlines()) == (INTERRUPTED, ["harel: interrupted"])
    assert done.stdout == f"harel {__version__}\n", "what the command printed is out before the process ends"


def test_a_process_started_with_ctrl_c_ignored_goes_on_ignoring_it(tmp_path: Path) -> None:
    done = interrupted_at("shutdown", tmp_path / "site", "--version", ignoring=True)

    assert (done.returncode, done.stderr, done.stdout) == (0, "", f"harel {__version__}\n")
