"""`harel dev` as a process, with other `harel` commands as processes in the same folder and no URL: its data
kept across runs with --data, a state file left by a killed `harel dev` ignored, and --json. The README's own
session (the order app in an empty folder) runs in tests/wire/test_readme.py."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harel.cli import devstate
from tests.wire.processes import HAREL, clean_environment, wait_until
from tests.wire.test_cli_failures import TICKET

pytestmark = pytest.mark.wire

READY_TIMEOUT = 30.0


def environment() -> dict[str, str]:
    return {k: v for k, v in clean_environment().items() if k != "PYTHONPATH"}


@dataclass
class Dev:
    process: subprocess.Popen[bytes]
    folder: Path
    out: Path
    err: Path

    def stop(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=30)

    def printed(self) -> str:
        return self.out.read_text()


def banner_printed(printed: str, *, json_document: bool) -> bool:
    """Whether `printed` holds the whole banner: its last line (`commands ...`), or with --json the whole
    document."""
    if json_document:
        try:
            json.loads(printed)
        except ValueError:
            return False
        return True
    return any(
        line.startswith("commands ") for line in printed.splitlines(keepends=True) if line.endswith("\n")
    )


class DevProcesses:
    def __init__(self) -> None:
        self.started: list[Dev] = []

    def start(self, folder: Path, *arguments: str) -> Dev:
        n = len(self.started)
        out, err = folder.parent / f"dev-{n}.out", folder.parent / f"dev-{n}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = subprocess.Popen(
                [HAREL, "dev", *arguments], cwd=folder, env=environment(), stdout=stdout, stderr=stderr
            )
        dev = Dev(process, folder, out, err)
        self.started.append(dev)

        def announced() -> bool:
            assert process.poll() is None, f"harel dev exited:\n{err.read_text()}"
            return banner_printed(out.read_text(), json_document="--json" in arguments)

        # The banner is printed a line at a time, after the state file is written: wait for all of it, then
        # hold harel dev to its word that commands find the store once it is printed.
        wait_until(announced, READY_TIMEOUT, "harel dev to print its banner", poll=0.1)
        assert devstate.find(folder) is not None, "the banner is printed, the state file is not written"
        return dev

    def kill_all(self) -> None:
        for dev in self.started:
            if dev.process.poll() is None:
                dev.process.kill()
                dev.process.wait(timeout=10)


@pytest.fixture
def devs() -> Iterator[DevProcesses]:
    processes = DevProcesses()
    yield processes
    processes.kill_all()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shop = tmp_path / "shop"
    (shop / "charts").mkdir(parents=True)
    (shop / "charts" / "ticket.yaml").write_text(TICKET)
    return shop


def harel(folder: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """A command run in `folder`, with no URL given: it finds the store of the harel dev running there."""
    return subprocess.run(
        [HAREL, *arguments],
        cwd=folder,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_data_survives_a_restart_with_a_data_file(folder: Path, devs: DevProcesses) -> None:
    first = devs.start(folder, "--charts", "charts", "--data", "dev.db")
    assert "data      dev.db: saved shortly after changes and at stop; a crash loses the last changes" in (
        first.printed()
    )
    assert harel(folder, "start", "ticket", "--id", "t-1").returncode == 0
    sent = harel(folder, "send", "t-1", "assign", "--wait")
    assert sent.returncode == 0 and sent.stdout.splitlines()[-1] == "assign handled by t-1: open → working"
    assert first.stop() == 0
    assert first.printed().splitlines()[-1] == "harel dev: stopped; the data is in dev.db"
    assert devstate.find(folder) is None

    devs.start(folder, "--charts", "charts", "--data", "dev.db")
    status = harel(folder, "status", "t-1")

    assert status.returncode == 0, status.stderr
    assert "active     working" in status.stdout, "the execution came back with the store"


def test_without_a_data_file_it_says_the_data_goes_with_it(folder: Path, devs: DevProcesses) -> None:
    dev = devs.start(folder, "--charts", "charts")

    assert "data      in memory only: gone when harel dev stops (--data FILE keeps it)" in dev.printed()
    assert "one member, no authentication, no replication: never for production" in dev.printed()
    assert dev.stop() == 0
    assert dev.printed().splitlines()[-1] == "harel dev: stopped; its data was in memory and is gone"


def test_a_killed_dev_leaves_a_state_file_that_is_ignored(folder: Path, devs: DevProcesses) -> None:
    dev = devs.start(folder, "--charts", "charts")
    dev.process.kill()
    dev.process.wait(timeout=10)
    assert (folder / devstate.STATE_FILE).exists(), "kill -9 leaves it behind"

    listed = harel(folder, "list")

    assert listed.returncode == 2, "back to the in-process default, which a client command refuses"
    assert "run `harel dev` in this folder" in listed.stderr
    again = devs.start(folder, "--charts", "charts")  # and a new harel dev takes the folder over
    assert harel(folder, "list").returncode == 0
    assert again.stop() == 0


def test_json_says_where_everything_is_and_commands_below_the_folder_find_it(
    folder: Path, devs: DevProcesses
) -> None:
    dev = devs.start(folder, "--charts", "charts", "--json")
    started = json.loads(dev.printed())
    below = folder / "charts"

    checked = harel(below, "check")

    assert started["charts"] == ["harel.smoke@1", "ticket@1"] and started["data"] is None
    assert started["state_file"] == str(folder / devstate.STATE_FILE)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"harel check {started['url']}")
    assert checked.stderr.splitlines()[0] == (
        f"harel: using the store of harel dev (pid {started['pid']}): {started['url']}"
    )
    assert dev.stop() == 0
