"""The `harel` command line as child processes: workers that run until stopped, and one-shot commands.

Every process gets a clean environment (no HAREL_* variable of the caller leaks in), logs to a file the test
can quote when it fails, and is killed by the fixture that started it if the test did not stop it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pymongo import MongoClient

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
HAREL = str(Path(sys.executable).with_name("harel"))
STOP_TIMEOUT = 10.0
READY_TIMEOUT = 30.0
# Debian's faketime: its library, preloaded into the process itself (the `faketime` command forks, so the
# pid a test signals would be the wrapper's).
FAKETIME_LIBRARY = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1"))), None)
SKEWED_SITE = Path(__file__).with_name("skewed_site")


def with_app_name(url: str, app_name: str) -> str:
    """`url` with `appName` set: fail points armed for that name catch this process's commands only."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k.lower() != "appname"] + [("appName", app_name)]
    return urlunsplit(parts._replace(query=urlencode(query)))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(poll)


def clean_environment() -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HAREL_")}
    return {
        **environment,
        "PYTHONUNBUFFERED": "1",
        "HAREL_LOG_FORMAT": "json",
        "HAREL_HTTP_HOST": "127.0.0.1",
    }


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log_path: Path
    http_port: int | None

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def running(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to release, ack or say goodbye."""
        if self.running():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT)

    def terminate(self) -> int:
        """SIGTERM and wait for the drain; the exit code."""
        if self.running():
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"worker {self.pid} did not stop within {STOP_TIMEOUT:.0f}s of SIGTERM"
            ) from None

    def wait_registered(self, client: MongoClient[dict[str, object]]) -> None:
        """Until the worker's first heartbeat is stored: it passed the start-up checks and is consuming."""

        def registered() -> bool:
            if not self.running():
                raise AssertionError(f"worker exited with {self.process.returncode}:\n{self.log()}")
            return client.harel.workers.find_one({"pid": self.pid}) is not None

        wait_until(registered, READY_TIMEOUT, f"worker {self.pid} to register")


class WorkerProcesses:
    """Starts worker processes and kills whatever is still running when the test ends."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._started: list[WorkerProcess] = []

    def harel_worker(
        self,
        url: str,
        *arguments: str,
        http_port: int | None = None,
        clock_offset: float | None = None,
        cwd: Path = REPOSITORY_ROOT,
    ) -> WorkerProcess:
        """`harel worker --url URL --http-port PORT ARGUMENTS...` (port 0: no HTTP endpoints), run in `cwd`
        (where `--app` imports from); with `clock_offset`, on a host whose wall clock is that many seconds off
        (`skewed_clock`)."""
        port = ["--http-port", str(http_port or 0)]
        skew = {} if clock_offset is None else skewed_clock(clock_offset)
        return self._start([HAREL, "worker", "--url", url, *port, *arguments], http_port, skew, cwd)

    def short_lease_worker(self, url: str, lease_seconds: float) -> WorkerProcess:
        """`harel worker` with a short lease: a message it held when killed is claimable again soon."""
        options = ["--lease-seconds", str(lease_seconds), "--drain-seconds", "2"]
        return self._start([HAREL, "worker", "--url", url, "--http-port", "0", *options], None)

    def _start(
        self,
        command: list[str],
        http_port: int | None,
        environment: Mapping[str, str] | None = None,
        cwd: Path = REPOSITORY_ROOT,
    ) -> WorkerProcess:
        log_path = self._log_dir / f"worker-{len(self._started)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command,
                cwd=cwd,
                env={**clean_environment(), **(environment or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        worker = WorkerProcess(process, log_path, http_port)
        self._started.append(worker)
        return worker

    def kill_all(self) -> None:
        for worker in self._started:
            worker.kill()


def skewed_clock(offset: float) -> dict[str, str]:
    """The environment that runs a process with its wall clock `offset` seconds off (libfaketime); its
    monotonic clock stays true, as on a host whose clock is set wrong."""
    if FAKETIME_LIBRARY is None:
        raise AssertionError(
            "the clock-skew tests need libfaketime (Debian package `faketime`): apt-get install faketime"
        )
    return {
        "LD_PRELOAD": str(FAKETIME_LIBRARY),
        "FAKETIME": f"{offset:+g}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        # its sitecustomize makes time.sleep work under libfaketime; what was on the path stays (the mutation
        # run puts its scratch copy of the SDK there)
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SKEWED_SITE), os.environ.get("PYTHONPATH")])),
    }


def run_harel(
    *arguments: str,
    timeout: float = 120.0,
    cwd: Path = REPOSITORY_ROOT,
    environment: Mapping[str, str] | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """One `harel` command to completion, its output captured; `environment` adds to the clean one."""
    return subprocess.run(
        [HAREL, *arguments],
        cwd=cwd,
        env={**clean_environment(), **(environment or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
