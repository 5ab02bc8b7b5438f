"""What the local stack's make targets print and exit with when harel-stack fails, and that docs/compose.md says
it: without a Docker engine (a DOCKER_HOST socket nobody listens on) `make up` & co. print harel-stack's one line,
then make's own `make: *** [Makefile:NN: up] Error 3`, echo no command, and exit 2 (make's code for a failed
recipe; harel-stack's own 3 is in make's line). `make up SHARDED=1` is `harel-stack up --sharded`.

make runs the real Makefile in an empty folder with the stamp of the stack's install taken as made (`-o`), so
nothing is installed: the recipe runs this environment's harel-stack."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.documents import DOCS, REPOSITORY, section

HAREL_STACK = Path(sys.executable).with_name("harel-stack")
FAILED_RECIPE = 2  # what make exits with when a recipe fails, whatever the recipe's own code
NO_ENGINE = (
    "Docker is not running (or not reachable at {endpoint}): start it, or use `make demo` to run everything "
    "in-process"
)


def make(
    target: str, folder: Path, docker_host: str, *variables: str, harel_stack: Path = HAREL_STACK
) -> subprocess.CompletedProcess[str]:
    (folder / "Makefile").symlink_to(REPOSITORY / "Makefile")
    # Not a sub-make of a `make test` this suite may run under.
    outside_make = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    return subprocess.run(
        ["make", "-o", ".venv/.installed-stack", target, f"HAREL_STACK={harel_stack}", *variables],
        cwd=folder,
        env={**outside_make, "DOCKER_HOST": docker_host},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def without_line_number(line: str) -> str:
    return re.sub(r"\[Makefile:\d+: ", "[Makefile:NN: ", line)


@pytest.mark.parametrize("target", ["up", "status", "smoke", "logs", "down"])
def test_without_a_docker_engine_a_stack_target_prints_the_tools_line_and_makes_and_exits_2(
    tmp_path: Path, target: str
) -> None:
    endpoint = f"unix://{tmp_path}/docker.sock"
    done = make(target, tmp_path, endpoint)

    assert done.returncode == FAILED_RECIPE, done.stdout + done.stderr
    assert done.stdout == "", "no command echoed"
    assert [without_line_number(line) for line in done.stderr.splitlines()] == [
        NO_ENGINE.format(endpoint=endpoint),
        f"make: *** [Makefile:NN: {target}] Error 3",
    ]


def test_docs_compose_shows_what_make_up_prints_without_a_docker_engine(tmp_path: Path) -> None:
    page = section((DOCS / "compose.md").read_text(encoding="utf-8"), "`make up`")
    shown = page[page.index("Without a running Docker engine") :]
    start = shown.index("```text\n") + len("```text\n")
    block = shown[start : shown.index("\n```", start)]
    endpoint = f"unix://{tmp_path}/docker.sock"
    done = make("up", tmp_path, endpoint)

    assert done.returncode == FAILED_RECIPE and "make exits 2" in shown[: shown.index("```")]
    # The page shows the default socket; make ran against one where nothing can answer, whatever this machine runs.
    shown_lines = block.replace("unix:///var/run/docker.sock", endpoint).splitlines()
    assert [without_line_number(line) for line in shown_lines] == [
        without_line_number(line) for line in done.stderr.splitlines()
    ]


@pytest.mark.parametrize(
    ("variables", "arguments"),
    [((), ["up"]), (("SHARDED=1",), ["up", "--sharded"]), (("SHARDED=0",), ["up"])],
)
def test_make_up_sharded_1_runs_harel_stack_up_sharded(
    tmp_path: Path, variables: tuple[str, ...], arguments: list[str]
) -> None:
    # A harel-stack that prints the arguments it was given, one per line.
    recorder = tmp_path / "bin" / "harel-stack"
    recorder.parent.mkdir()
    recorder.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n', encoding="utf-8")
    recorder.chmod(0o755)
    folder = tmp_path / "checkout"
    folder.mkdir()
    done = make("up", folder, f"unix://{tmp_path}/docker.sock", *variables, harel_stack=recorder)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == arguments
