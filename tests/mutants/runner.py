"""Plant one mutant in a scratch copy of the SDK and run the tests that must kill it against that copy.

The copy is the `harel` package from sdk/src with the mutant's edits, in a temporary directory put first on
PYTHONPATH: the test run, and every `harel` process it starts, import it instead of the working tree's
(which is installed in editable mode behind it on sys.path). `HAREL_MUTANT_SDK` names the copy, and
tests/conftest.py stops the run at once if the `harel` it imported is not that copy. The working tree is
never edited.

A mutant is killed when at least one of its tests fails. It survives when they all pass; a run that cannot
say (a test id that no longer exists, a collection error, a timeout) is an error, never a kill.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

from tests.mutants.catalog import SDK_PACKAGE, Mutant, current_sources, mutated_sources

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]
MUTANT_SDK_VARIABLE = "HAREL_MUTANT_SDK"
RUN_TIMEOUT = 900.0
PYTEST_EXIT_TESTS_FAILED = 1


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # "killed", "survived" or "error"
    failed: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    output: str = ""

    @property
    def killed(self) -> bool:
        return self.status == "killed"


@contextlib.contextmanager
def scratch_sdk(mutant: Mutant | None) -> Iterator[Path]:
    """A directory holding a copy of the `harel` package, with `mutant` planted (None: unchanged)."""
    changed = mutated_sources(mutant, current_sources(mutant)) if mutant is not None else {}
    root = Path(tempfile.mkdtemp(prefix="harel-mutant-"))
    try:
        package = root / "harel"
        shutil.copytree(SDK_PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
        for path, text in changed.items():
            (package / path).write_text(text, encoding="utf-8")
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def environment(sdk_root: Path) -> dict[str, str]:
    inherited = os.environ.get("PYTHONPATH")
    path = str(sdk_root) if not inherited else os.pathsep.join([str(sdk_root), inherited])
    return {**os.environ, "PYTHONPATH": path, MUTANT_SDK_VARIABLE: str(sdk_root / "harel")}


def run_tests(sdk_root: Path, node_ids: Sequence[str], timeout: float = RUN_TIMEOUT) -> tuple[int, str, Path]:
    """pytest on `node_ids` against the SDK in `sdk_root`: its exit code, its output, its junit report."""
    report = sdk_root / "report.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        *node_ids,
    ]
    try:
        finished = subprocess.run(
            command,
            cwd=REPOSITORY_ROOT,
            env=environment(sdk_root),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode(errors="replace") if isinstance(expired.stdout, bytes) else ""
        return -1, f"timed out after {timeout:.0f}s\n{output}", report
    return finished.returncode, finished.stdout + finished.stderr, report


def _node_id(case: ElementTree.Element) -> str:
    module = case.get("classname", "").replace(".", "/")
    return f"{module}.py::{case.get('name')}"


def read_report(report: Path) -> tuple[list[str], list[str], list[str]]:
    """The failed, the passed and the otherwise-ended (error, skip) test ids of a junit report."""
    failed: list[str] = []
    passed: list[str] = []
    other: list[str] = []
    if not report.exists():
        return failed, passed, other
    for case in ElementTree.parse(report).iter("testcase"):
        node = _node_id(case)
        if case.find("failure") is not None:
            failed.append(node)
        elif case.find("error") is not None or case.find("skipped") is not None:
            other.append(node)
        else:
            passed.append(node)
    return failed, passed, other


def plant(mutant: Mutant, timeout: float = RUN_TIMEOUT) -> Outcome:
    """Plant `mutant` in a scratch copy and run its tests against it."""
    started = time.monotonic()
    with scratch_sdk(mutant) as root:
        code, output, report = run_tests(root, mutant.killed_by, timeout)
        failed, passed, other = read_report(report)
    seconds = time.monotonic() - started
    if code == PYTEST_EXIT_TESTS_FAILED and failed:
        status = "killed"
    elif code == 0 and passed and not other:
        status = "survived"
    else:
        status = "error"
    return Outcome(mutant, status, failed, passed, seconds, output)


def baseline(mutants: Sequence[Mutant], timeout: float = RUN_TIMEOUT) -> tuple[int, str, float]:
    """Every named test on an unchanged scratch copy: they must pass there, or a kill proves nothing."""
    started = time.monotonic()
    node_ids = sorted({node for mutant in mutants for node in mutant.killed_by})
    with scratch_sdk(None) as root:
        code, output, _ = run_tests(root, node_ids, timeout)
    return code, output, time.monotonic() - started


def short(node_id: str) -> str:
    """`tests/wire/test_x.py::test_y[p]` as `wire/test_x.py::test_y[p]`."""
    return node_id.removeprefix("tests/")


def table(outcomes: Sequence[Outcome]) -> str:
    lines = [
        "| mutant | planted bug | where (sdk/src/harel/) | killed by | time |",
        "| --- | --- | --- | --- | --- |",
    ]
    for outcome in outcomes:
        mutant = outcome.mutant
        verdict = (
            "<br>".join(f"`{short(node)}`" for node in outcome.failed)
            if outcome.killed
            else f"**{outcome.status.upper()}**"
        )
        lines.append(
            f"| `{mutant.name}` | {mutant.bug} | `{mutant.where}` | {verdict} | {outcome.seconds:.0f} s |"
        )
    return "\n".join(lines)
