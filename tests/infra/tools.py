"""Where the test tools that `make test` installs outside .venv's packages live, how to run them, and the error when
one is missing.

checkov runs from a virtualenv of its own (its pins clash with the test environment's), Docker Compose is its own
binary, and mongosh comes from the npm registry (tests/tools/mongosh.py says where); all are pinned in tests/tools/. A test that needs one and does not find it fails, naming the command
that installs it: a missing tool is a broken set-up, not a reason to skip.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.tools.mongosh import MONGOSH

REPOSITORY = Path(__file__).resolve().parents[2]
CHECKOV = REPOSITORY / ".venv" / "tools" / "checkov" / "bin" / "checkov"
DOCKER_COMPOSE = REPOSITORY / ".venv" / "tools" / "compose" / "docker-compose"


def required(tool: Path) -> Path:
    """`tool` if it is installed; otherwise the test fails saying how to install it."""
    if not tool.exists():
        pytest.fail(f"{tool} is missing: `make test` installs it (tests/tools/ pins it)", pytrace=False)
    return tool


@dataclass(frozen=True)
class MongoshRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def mongosh(
    arguments: Sequence[str],
    *,
    home: Path,
    stdin: str = "",
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> MongoshRun:
    """The real mongosh with `arguments` (a leading "mongosh", as a manifest or a task writes it, is replaced by
    the installed one). Its state goes under `home`; telemetry and update checks are off, so nothing but the
    servers the arguments name (the fake replica set on 127.0.0.1) is contacted."""
    if arguments and arguments[0] == "mongosh":
        arguments = arguments[1:]
    home.mkdir(parents=True, exist_ok=True)
    global_config = home / "mongosh.conf"
    global_config.write_text("mongosh:\n  forceDisableTelemetry: true\n  updateURL: ''\n")
    completed = _run(
        [required(MONGOSH), *arguments],
        {
            "HOME": str(home),
            "MONGOSH_GLOBAL_CONFIG_FILE_FOR_TESTING": str(global_config),
            "MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING": "1",
            **(env or {}),
        },
        stdin=stdin,
        timeout=timeout,
    )
    return MongoshRun(completed.returncode, completed.stdout, completed.stderr)


def docker_compose(
    arguments: Sequence[str], *, cwd: Path, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Docker Compose v2 with `arguments` (what follows `docker compose`), as the docker CLI runs its plugin. Only
    commands that need no engine belong here (`config`); DOCKER_HOST points nowhere to make sure."""
    return _run(
        [required(DOCKER_COMPOSE), *arguments],
        {"HOME": os.environ.get("HOME", "/nonexistent"), "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
        cwd=cwd,
        timeout=timeout,
    )


def _run(
    command: Sequence[str | Path],
    env: Mapping[str, str],
    *,
    cwd: Path | None = None,
    stdin: str = "",
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """A tool with only PATH and `env` in its environment, its output captured."""
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={"PATH": os.environ.get("PATH", ""), **env},
    )
