"""`harel check --deadline` bounds the whole check, as a process: the wait for a deployment that never answers,
and the commands after the ping when the deployment stops answering them.

The bound asserted is the deadline plus a loose margin (MARGIN), not a benchmark: the margin covers starting
the interpreter and importing the CLI (over a second on a loaded two-core machine), closing the client, and the
scheduler on a machine that runs other tests at the same time. Before the deadline bounded the check's
commands, a command that stalled held the check for the client's socket timeout (30 s).
"""

from __future__ import annotations

import time

import pytest
from pymongo import MongoClient

from tests.fake_mongod.fail_command import fail_command
from tests.fake_mongod.fixtures import CLIENT_OPTIONS, FakeDeployment
from tests.loopback import silent
from tests.wire.processes import run_harel

pytestmark = pytest.mark.wire

DEADLINE = 2.0
MARGIN = 4.0
UNREACHABLE = 3


def timed_check(url: str) -> tuple[float, int, str]:
    """How long `harel check URL --deadline 2` took, its exit code and its error line: the last on stderr, after
    one log line per failed attempt."""
    started = time.monotonic()
    result = run_harel("check", url, "--deadline", f"{DEADLINE:g}", timeout=60)
    elapsed = time.monotonic() - started
    *logged, error = result.stderr.splitlines() or [""]
    assert all("not ready (attempt" in line for line in logged), result.stderr
    return elapsed, result.returncode, error


def test_check_gives_up_at_its_deadline_on_a_server_that_never_answers() -> None:
    with silent() as listener:
        elapsed, code, error = timed_check(f"mongodb://{listener.address}/harel?directConnection=true")

    assert code == UNREACHABLE, error
    assert error.startswith(f"harel check: could not reach mongodb://{listener.address}/"), error
    assert elapsed < DEADLINE + MARGIN, f"took {elapsed:.1f}s"


def test_check_gives_up_at_its_deadline_when_a_command_after_the_ping_stalls(fake_rs: FakeDeployment) -> None:
    admin: MongoClient[dict[str, object]] = MongoClient(fake_rs.url, appname="test-admin", **CLIENT_OPTIONS)
    # buildInfo, the check's second command, stalls for longer than the deadline, for `harel`'s client only.
    with (
        admin,
        fail_command(
            admin,
            "alwaysOn",
            failCommands=["buildInfo"],
            blockConnection=True,
            blockTimeMS=8000,
            appName="harel",
        ),
    ):
        elapsed, code, error = timed_check(fake_rs.url)

    assert code == UNREACHABLE, error
    assert error.startswith(f"harel check: could not reach {fake_rs.url} within "), error
    assert elapsed < DEADLINE + MARGIN, f"took {elapsed:.1f}s"
